"""Update's pure rules: which trials become training data, their groups and group-relative advantages.

Selection (the contract's `acceptance` section, BACKGROUND's Update step) works on plain records,
one per finished trial, so it is the same for any store or trajectory format:

- *usable* trials may enter a policy-gradient group: train split, not an infra error, an integrity
  level the contract lets feed training, no tamper finding, a reward;
- *accepted* trials (the SFT set) are usable ones with reward >= `min_reward`, a clean exit when
  the contract asks for one (no error of any kind, within the turn limit), not a near-duplicate of an
  accepted trajectory of the same task kept before it, and within the per-task quota (best reward
  first, then attempt order, so the choice is deterministic);
- a *group* is every usable attempt at one task by one generation under one config; its advantages
  are reward minus the group mean (optionally divided by the group's standard deviation). A group whose
  rewards are all equal carries no policy-gradient signal; such groups are counted and reported.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import fuzz

from rsi.core.contract import Contract
from rsi.core.digest import digest_obj

Objective = Literal["sft", "pg", "sft+pg"]
OBJECTIVES: tuple[str, ...] = ("sft", "pg", "sft+pg")
# Error types that are the infrastructure's fault: such a trial says nothing about the policy.
INFRA_ERRORS = frozenset({"sandbox_error", "model_unavailable", "environment_build_failed", "cancelled"})


class TrainSettings(BaseModel):
    """LoRA and optimiser settings (`train:` in rsi.yaml). Reference values (BACKGROUND): the flagship
    uses rank 16 / alpha 32; a local 50B model rank 64 / alpha 128. The defaults suit the embedded 135M."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(default=16, gt=0)
    alpha: int = Field(default=32, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    learning_rate: float = Field(default=5e-4, gt=0)
    steps: int = Field(default=8, gt=0)
    batch_size: int = Field(default=4, gt=0)
    max_seq_len: int = Field(default=2048, gt=0)
    seed: int = 0
    # CPU threads for the local backend; None = half the cores (a busy 2-core machine runs a 135M
    # forward+backward ~10x faster on one thread than on two fighting other processes).
    threads: int | None = Field(default=None, gt=0)
    clip_eps: float = Field(default=0.2, gt=0)
    kl_coef: float = Field(default=0.0, ge=0)
    pg_coef: float = Field(default=1.0, ge=0)
    normalize_std: bool = False
    lineage: str = "agent"  # the adapter's name in a manifest; serve names are <lineage>-g<N>-<sha8>


@dataclass(frozen=True)
class TrialRecord:
    """What selection needs of one finished trial."""

    trial_id: str
    task_digest: str
    task_name: str
    generation: str | None
    config_digest: str | None
    attempt: int
    split: str
    reward: float | None
    error_type: str | None
    integrity: str | None
    tampered: bool
    turns: int
    max_turns: int
    actions: tuple[str, ...] = ()  # the assistant replies, for near-duplicate detection


@dataclass
class Selection:
    usable: list[TrialRecord] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # trial id -> why it is not usable
    not_accepted: dict[str, str] = field(default_factory=dict)  # usable trial id -> why not accepted
    groups: dict[str, list[str]] = field(default_factory=dict)  # group id -> trial ids (attempt order)
    advantages: dict[str, float] = field(default_factory=dict)
    sample_index: dict[str, int] = field(default_factory=dict)
    group_of: dict[str, str] = field(default_factory=dict)

    @property
    def groups_with_signal(self) -> list[str]:
        return [g for g, ids in self.groups.items() if any(self.advantages[t] != 0.0 for t in ids)]

    def counts(self) -> dict[str, Any]:
        reasons: dict[str, int] = defaultdict(int)
        for r in [*self.excluded.values(), *self.not_accepted.values()]:
            reasons[r.split(":")[0]] += 1
        return {
            "usable": len(self.usable),
            "accepted": len(self.accepted),
            "excluded": len(self.excluded),
            "groups": len(self.groups),
            "groups_with_signal": len(self.groups_with_signal),
            "groups_without_signal": len(self.groups) - len(self.groups_with_signal),
            "reasons": dict(sorted(reasons.items())),
        }


def group_id(r: TrialRecord) -> str:
    return "grp-" + digest_obj([r.task_digest, r.generation, r.config_digest])[:12]


def exclusion(r: TrialRecord, contract: Contract) -> str | None:
    """Why `r` may not enter training at all, or None."""
    if r.split != "train":
        return "holdout: the holdout split is sealed"
    if r.error_type in INFRA_ERRORS:
        return f"infra: {r.error_type}"
    if r.tampered or r.error_type == "tamper_detected":
        return "tamper: the grader found tampering"
    if r.integrity not in contract.grading.training_integrity:
        return f"integrity: level {r.integrity} may not feed training"
    if r.reward is None:
        return "no_reward: the trial has no reward"
    return None


def rejection(r: TrialRecord, contract: Contract) -> str | None:
    """Why a usable trial is not accepted for SFT (before quota and dedupe), or None."""
    acc = contract.acceptance
    assert r.reward is not None
    if r.reward < acc.min_reward:
        return f"low_reward: {r.reward:g} < {acc.min_reward:g}"
    if acc.require_clean_exit and r.error_type is not None:
        return f"unclean_exit: {r.error_type}"
    if acc.require_clean_exit and r.turns > r.max_turns:
        return f"over_limits: {r.turns} turns > {r.max_turns}"
    return None


def similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """0..1 similarity of two trajectories' replies (normalised whitespace)."""
    ja, jb = (" ".join(" ".join(x.split()) for x in t) for t in (a, b))
    if ja == jb:
        return 1.0
    return float(fuzz.ratio(ja, jb)) / 100.0


def group_advantages(rewards: list[float], *, normalize_std: bool) -> list[float]:
    """Reward minus the group mean (GRPO), optionally over the group's standard deviation."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    adv = [r - mean for r in rewards]
    if normalize_std:
        std = math.sqrt(sum(a * a for a in adv) / len(adv))
        adv = [a / std if std > 0 else 0.0 for a in adv]
    return [0.0 if abs(a) < 1e-12 else a for a in adv]


def select(
    records: list[TrialRecord], contract: Contract, *, normalize_std: bool = False
) -> Selection:
    sel = Selection()
    order = sorted(records, key=lambda r: (r.task_name, r.task_digest, r.generation or "", r.attempt, r.trial_id))
    for r in order:
        why = exclusion(r, contract)
        if why is not None:
            sel.excluded[r.trial_id] = why
        else:
            sel.usable.append(r)
    # groups and advantages
    by_group: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in sel.usable:
        by_group[group_id(r)].append(r)
    for gid, members in by_group.items():
        sel.groups[gid] = [m.trial_id for m in members]
        rewards = [float(m.reward or 0.0) for m in members]
        for k, (m, a) in enumerate(zip(members, group_advantages(rewards, normalize_std=normalize_std), strict=True)):
            sel.advantages[m.trial_id] = a
            sel.sample_index[m.trial_id] = k
            sel.group_of[m.trial_id] = gid
    # accepted: rules, then near-duplicates, then the quota, per task
    threshold = contract.acceptance.near_duplicate_threshold
    by_task: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in sel.usable:
        why = rejection(r, contract)
        if why is not None:
            sel.not_accepted[r.trial_id] = why
        else:
            by_task[r.task_digest].append(r)
    for _task, cands in sorted(by_task.items()):
        cands.sort(key=lambda r: (-(r.reward or 0.0), r.attempt, r.trial_id))
        kept: list[TrialRecord] = []
        for r in cands:
            dup = next((k for k in kept if similarity(k.actions, r.actions) >= threshold), None)
            if dup is not None:
                sel.not_accepted[r.trial_id] = f"near_duplicate: of {dup.trial_id}"
            elif len(kept) >= contract.acceptance.per_task_quota:
                sel.not_accepted[r.trial_id] = f"quota: {contract.acceptance.per_task_quota} per task already kept"
            else:
                kept.append(r)
        sel.accepted += [k.trial_id for k in kept]
    return sel


__all__ = [
    "INFRA_ERRORS",
    "OBJECTIVES",
    "Objective",
    "Selection",
    "TrainSettings",
    "TrialRecord",
    "exclusion",
    "group_advantages",
    "group_id",
    "rejection",
    "select",
    "similarity",
]
