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

Generalisation (the contract's `training` section):

- a *validation slice* of train templates (a pure function of the template id, `in_validation`) is held
  out of training: its accepted trajectories are only measured (their log-probability stops training
  early when it falls), its other trajectories are left out;
- a *per-template cap*: at most `per_template_cap` trajectories that train (accepted first, round-robin
  over the template's tasks, then failures that carry a policy-gradient signal) per template, so no
  template dominates; the rest are `capped` and left out of the dataset;
- *replay* (`choose_replay`): accepted trajectories of earlier generations, spread round-robin across
  templates (those with least current data first), within the same per-template cap.

A task without a template (older tasks) is its own template: `task:<name>`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field

from rsi.core.contract import Contract
from rsi.core.digest import digest_obj
from rsi.core.model import RsiModel

Objective = Literal["sft", "pg", "sft+pg"]
OBJECTIVES: tuple[str, ...] = ("sft", "pg", "sft+pg")
# Error types that are the infrastructure's fault: such a trial says nothing about the policy.
INFRA_ERRORS = frozenset({"sandbox_error", "model_unavailable", "environment_build_failed", "cancelled"})


class TrainSettings(RsiModel):
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
    # CPU threads for the local backend; None = the physical cores (no trial runs while an update trains)
    threads: int | None = Field(default=None, gt=0)
    # the local backend's throughput (issue 36): `pack` trains whole trajectories per step, the turns of one
    # trajectory in one sequence where their tokens chain (one forward for the shared prefix), several sequences
    # per forward (length-sorted, padded to at most `pack_tokens` tokens), logits only at completion tokens;
    # False is the pre-issue-36 loop (one turn per forward). `dtype` is the matmul precision: auto = bfloat16
    # autocast where the device has native bf16 (AVX512-BF16/AMX, a bf16 GPU), else float32; the adapter's
    # weights, the log-softmax and the losses stay float32.
    pack: bool = True
    pack_tokens: int = Field(default=4096, gt=0)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    clip_eps: float = Field(default=0.2, gt=0)
    pg_coef: float = Field(default=1.0, ge=0)
    # the policy-gradient ratio's denominator: `trainer` re-scores each rollout with the model as loaded, before
    # the first step (as RL trainers re-score vLLM's samples), so the ratio starts at exactly 1 whatever engine
    # served it (llama.cpp's quantized log-probs differ from the trainer's by ~0.06 nats a token, up to ~0.4:
    # benchmarks/records/engines.json); `served` takes the log-probs the endpoint recorded
    pg_old_logprobs: Literal["trainer", "served"] = "trainer"
    normalize_std: bool = False
    # KL to the parent; None: the contract's `training.kl_coef`, which is also the floor (rsi.update resolves it)
    kl_coef: float | None = Field(default=None, ge=0)
    # the validation slice: measured every N steps on at most M of its completions; training stops after
    # `validation_patience` measurements in a row below the best by more than `validation_tolerance`
    validation_every: int = Field(default=8, gt=0)
    validation_max_samples: int = Field(default=4, gt=0)
    validation_patience: int = Field(default=2, gt=0)
    validation_tolerance: float = Field(default=0.01, ge=0)
    # the before/after mean log-probability (a diagnostic, not a gate) is measured on at most this many accepted
    # completions, spread across templates: on the demo's ~680 turns the full measurement was two extra passes
    # over the data, about a tenth of the update (benchmarks/records/cycle_profile.json)
    eval_max_samples: int = Field(default=64, gt=0)
    lineage: str = "agent"  # the adapter's name in a manifest; serve names are <lineage>-g<N>-<sha8>
    # Where a revision starts (issue 46's recipe): `parent` continues the parent's adapter on this generation's
    # data plus `training.replay_cap` replayed samples of the lineage (KL to the parent); `base` trains a fresh
    # LoRA from the frozen base on the union of every accepted sample of the lineage, every source, within the
    # per-template cap (ReST-EM, AgentEvol; KL to the base).
    init: Literal["parent", "base"] = "parent"


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
    template: str | None = None  # `<family>/<template>`; None on older tasks (then the task is its own)
    # who chose the actions (DESIGN §12): `self` | `gateway` (self, under an external harness, recorded by the
    # gateway) | `hinted:<level>` | `oracle`
    source: str = "self"

    @property
    def unit(self) -> str:
        return template_key(self.template, self.task_name)

    @property
    def own(self) -> bool:
        """The generation's own unaided rollout (rsi's loop, or an external harness through the gateway): the only
        sources with a group advantage (a policy-gradient term)."""
        return self.source in OWN_SOURCES


def source_kind(source: str) -> str:
    """`hinted:2` -> `hinted`."""
    return source.split(":", 1)[0]


def source_rank(source: str) -> tuple[int, str]:
    """Preference when caps bind: the model's own rollouts, then hinted ones (lowest hint first), then replays."""
    kind = source_kind(source)
    return (SOURCE_KINDS.index(kind) if kind in SOURCE_KINDS else len(SOURCE_KINDS), source)


SOURCE_KINDS = ("self", "gateway", "hinted", "oracle")
# the model's own unaided rollouts: its served tokens and log-probs are the policy's
OWN_SOURCES = ("self", "gateway")


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
    capped: dict[str, str] = field(default_factory=dict)  # trial id -> why the per-template cap left it out
    validation: list[str] = field(default_factory=list)  # accepted trials of validation templates (measured only)
    held_out: dict[str, str] = field(default_factory=dict)  # other trials of validation templates (left out)
    validation_templates: list[str] = field(default_factory=list)
    validation_note: str | None = None  # why there is no validation slice, when there is none

    def dataset_ids(self) -> list[str]:
        """The usable trials the dataset holds, in order: all but the capped and the held-out."""
        return [r.trial_id for r in self.usable if r.trial_id not in self.capped and r.trial_id not in self.held_out]

    @property
    def groups_with_signal(self) -> list[str]:
        return [g for g, ids in self.groups.items() if any(self.advantages[t] != 0.0 for t in ids)]

    def counts(self) -> dict[str, Any]:
        reasons: dict[str, int] = defaultdict(int)
        accepted = set(self.accepted)
        for r in [*self.excluded.values(), *self.not_accepted.values(), *self.capped.values(),
                  *self.held_out.values()]:
            reasons[r.split(":")[0]] += 1
        return {
            "usable": len(self.usable),
            "accepted": len(self.accepted),
            "excluded": len(self.excluded),
            "groups": len(self.groups),
            "groups_with_signal": len(self.groups_with_signal),
            "groups_without_signal": len(self.groups) - len(self.groups_with_signal),
            "reasons": dict(sorted(reasons.items())),
            "capped": len(self.capped),
            "templates": len({r.unit for r in self.usable if r.trial_id in accepted}),
            "validation": {"templates": self.validation_templates, "accepted": len(self.validation),
                           "held_out": len(self.held_out), **({"note": self.validation_note}
                                                               if self.validation_note else {})},
        }


def group_id(r: TrialRecord) -> str:
    """The rollouts of one task by one generation under one config; another source is a group of its own."""
    key: list[object] = [r.task_digest, r.generation, r.config_digest]
    return "grp-" + digest_obj(key if r.own else [*key, r.source])[:12]


def exclusion(r: TrialRecord, contract: Contract) -> str | None:
    """Why `r` may not enter training at all, or None."""
    if r.split != "train":
        return "holdout: the holdout split is sealed"
    if source_kind(r.source) not in contract.training.sources:
        return f"source: the contract's training.sources ({', '.join(contract.training.sources)}) leave out {r.source}"
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
    from rapidfuzz import fuzz  # imported here: every command loads this module, few compare trajectories

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
    records: list[TrialRecord], contract: Contract, *, normalize_std: bool = False,
    never_validation: frozenset[str] = frozenset(),
) -> Selection:
    """`never_validation`: templates the validation slice may not take (the in-skill holdout's: a template whose
    held-out phrasing the promote gate measures must be trained on, or the gate measures transfer instead)."""
    sel = Selection()
    order = sorted(records, key=lambda r: (r.task_name, r.task_digest, r.generation or "", r.attempt, r.trial_id))
    for r in order:
        why = exclusion(r, contract)
        if why is not None:
            sel.excluded[r.trial_id] = why
        else:
            sel.usable.append(r)
    # groups and advantages: the generation's own rollouts only; a hinted rollout or a replay is SFT data (its
    # actions were chosen in another context, so no advantage and no ratio against its log-probs)
    by_group: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in sel.usable:
        by_group[group_id(r)].append(r)
    for gid, members in by_group.items():
        rewards = [float(m.reward or 0.0) for m in members]
        advantages = group_advantages(rewards, normalize_std=normalize_std) if members[0].own else [0.0] * len(members)
        if members[0].own:
            sel.groups[gid] = [m.trial_id for m in members]
        for k, (m, a) in enumerate(zip(members, advantages, strict=True)):
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
        cands.sort(key=lambda r: (source_rank(r.source), -(r.reward or 0.0), r.attempt, r.trial_id))
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
    _hold_out_validation(sel, contract.training.validation_fraction, never_validation)
    _cap_templates(sel, contract.training.per_template_cap)
    return sel


def template_key(template: str | None, task_name: str) -> str:
    """The template a trajectory counts under: its task's template id, or the task itself when it has none."""
    return template or f"task:{task_name}"


def in_validation(key: str, fraction: float) -> bool:
    """Whether a train template belongs to the validation slice: a pure function of its id."""
    return int(digest_obj(["validation", key])[:8], 16) / 16**8 < fraction


def _hold_out_validation(sel: Selection, fraction: float, never: frozenset[str] = frozenset()) -> None:
    """Move the validation templates' trajectories out of training: accepted ones are measured, others dropped.
    No slice when no template with an accepted trajectory falls in it, or when it would leave none to train on."""
    if fraction <= 0:
        sel.validation_note = "validation_fraction is 0"
        return
    accepted = set(sel.accepted)
    units = sorted({r.unit for r in sel.usable if r.trial_id in accepted})
    chosen = [u for u in units if in_validation(u, fraction) and u not in never]
    if not chosen:
        sel.validation_note = f"none of the {len(units)} template(s) with an accepted trajectory is in the slice"
        return
    if len(chosen) == len(units):
        sel.validation_note = (f"every template with an accepted trajectory ({len(units)}) is in the slice: "
                               "nothing would be left to train on, so none is held out")
        return
    sel.validation_templates = chosen
    held = set(chosen)
    for r in sel.usable:
        if r.unit not in held:
            continue
        if r.trial_id in accepted:
            sel.validation.append(r.trial_id)
        else:
            sel.held_out[r.trial_id] = f"validation: template {r.unit} is held out of training"
    measured = set(sel.validation)
    sel.accepted = [t for t in sel.accepted if t not in measured]


def _round_robin(records: list[TrialRecord]) -> list[TrialRecord]:
    """Records interleaved across their tasks (tasks in order of first appearance, each task's own order kept),
    so one task does not fill a cap."""
    by_task: dict[str, list[TrialRecord]] = {}
    for r in records:
        by_task.setdefault(r.task_digest, []).append(r)
    queues = list(by_task.values())
    out: list[TrialRecord] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _cap_templates(sel: Selection, cap: int) -> None:
    """At most `cap` trajectories that train per template: accepted first (best reward, round-robin over tasks),
    then failures with a non-zero advantage; the rest are capped."""
    accepted = set(sel.accepted)
    by_unit: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in sel.usable:
        if r.trial_id in sel.held_out or r.trial_id in sel.validation:
            continue
        if r.trial_id in accepted or sel.advantages.get(r.trial_id, 0.0) != 0.0:
            by_unit[r.unit].append(r)
    for unit, members in by_unit.items():
        first = sorted((m for m in members if m.trial_id in accepted),
                       key=lambda r: (source_rank(r.source), -(r.reward or 0.0), r.attempt, r.trial_id))
        rest = [m for m in members if m.trial_id not in accepted]
        for r in (_round_robin(first) + _round_robin(rest))[cap:]:
            sel.capped[r.trial_id] = f"template_cap: {cap} per template already train ({unit})"
    sel.accepted = [t for t in sel.accepted if t not in sel.capped]


def choose_replay(candidates: list[TrialRecord], current: dict[str, int], *, cap: int, per_template_cap: int,
                  validation_fraction: float, kept: dict[str, list[TrialRecord]] | None = None,
                  near_duplicate_threshold: float = 1.0) -> tuple[list[TrialRecord], dict[str, str]]:
    """Replay: up to `cap` accepted trajectories of earlier generations, round-robin across templates (those with
    the least current data first, so templates this generation has nothing of are kept alive), newest generation
    first within a template, each template within `per_template_cap` counting its current trajectories. Never a
    validation template; never a near-duplicate of a trajectory of the same task kept already (`kept`).
    Returns the chosen records and, for the others, why not."""
    why: dict[str, str] = {}
    kept = {k: list(v) for k, v in (kept or {}).items()}
    by_unit: dict[str, list[TrialRecord]] = defaultdict(list)
    for r in candidates:
        if validation_fraction > 0 and in_validation(r.unit, validation_fraction):
            why[r.trial_id] = f"validation: template {r.unit} is held out of training"
        else:
            by_unit[r.unit].append(r)
    queues: list[tuple[str, list[TrialRecord]]] = []
    for unit in sorted(by_unit, key=lambda u: (current.get(u, 0), u)):
        ordered = sorted(by_unit[unit], key=lambda r: (_gen_order(r.generation), r.task_name, r.attempt, r.trial_id))
        queues.append((unit, _round_robin(ordered)))
    room = {u: max(0, per_template_cap - current.get(u, 0)) for u, _ in queues}
    chosen: list[TrialRecord] = []
    while len(chosen) < cap and any(q for _, q in queues):
        for unit, q in queues:
            while q and len(chosen) < cap:
                r = q.pop(0)
                if room[unit] <= 0:
                    why[r.trial_id] = f"template_cap: {per_template_cap} per template already train ({unit})"
                    continue
                dup = next((k for k in kept.get(r.task_digest, [])
                            if similarity(k.actions, r.actions) >= near_duplicate_threshold), None)
                if dup is not None:
                    why[r.trial_id] = f"near_duplicate: of {dup.trial_id}"
                    continue
                chosen.append(r)
                kept.setdefault(r.task_digest, []).append(r)
                room[unit] -= 1
                break
    for _, q in queues:
        for r in q:
            why.setdefault(r.trial_id, f"replay_cap: {cap} replayed already")
    return chosen, why


def _gen_order(gen: str | None) -> int:
    """Newest generation first (gen-NNNN by number, descending)."""
    tail = (gen or "").rsplit("-", 1)[-1]
    return -int(tail) if tail.isdigit() else 0


__all__ = [
    "INFRA_ERRORS",
    "OBJECTIVES",
    "Objective",
    "Selection",
    "TrainSettings",
    "TrialRecord",
    "choose_replay",
    "exclusion",
    "group_advantages",
    "group_id",
    "in_validation",
    "rejection",
    "select",
    "similarity",
    "source_kind",
    "source_rank",
    "template_key",
]
