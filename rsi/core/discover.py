"""Discovery's pure rules: task drafts, rejection reasons, the split, the band, near-duplicates and
the per-family curriculum (BACKGROUND §3.2.3, DESIGN §1).

A generator writes a `TaskDraft`: the Harbor task's parts plus one or more known-wrong solutions
(plausible but wrong answers the gate runs and which never ship in the task). `render_task` turns
a draft into the task's files, `task.toml` included, so `(generator, seed, difficulty, template,
phrasing side, instance side, cycle)` always gives the same bytes and the same digest. A procedural instance's
names, data and reference are drawn from a stream keyed by the side it is drawn for and the cycle
(`instance_seed`), so the same (template, seed, level) gives other instances on the train side, in each holdout
part and for a suite. `draft_placement` decides a draft's split
and holdout part from its template and phrasing (`phrasing_side`). Nothing here reads or writes files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from hashlib import sha256
from typing import Literal

from pydantic import ConfigDict, Field

from rsi.core.contract import Contract, HoldoutUnit, InSkillSource
from rsi.core.digest import digest_files, digest_obj
from rsi.core.model import RsiModel
from rsi.core.task import HoldoutPart, InstanceSide, Split, TaskSpec

# Which of a template's phrasings a generator request may draw: the train ones, the held-out ones (the last
# `promotion.holdout_phrasings`), or any.
PhrasingSide = Literal["train", "holdout", "any"]


def instance_seed(generator: str, template: str, side: InstanceSide, cycle: int, seed: int, level: int) -> int:
    """The seed of the random stream an instance's parameters are drawn from: a stable hash (sha256, the same on
    every run and platform) of everything that asks for it. The side and the cycle are in the key, so a train
    task and a held-out one of one (template, seed, level) share nothing but the template, and a later cycle's
    holdout is not an earlier cycle's train task under another seed offset."""
    key = json.dumps([generator, template, side, cycle, seed, level])
    return int(sha256(key.encode()).hexdigest()[:16], 16)

# generated -> checked (the oracle passed every run) -> valid (nop and known-wrong fail) -> admitted;
# or rejected / dropped on the way.
CandidateState = Literal["generated", "checked", "valid", "admitted", "rejected", "dropped"]

# Why a candidate never entered the pool. Every rejection records one of these, its detail and the
# trial ids behind it. `above_band` candidates are dropped (valid, but already solved too often).
REJECT_REASONS: dict[str, str] = {
    "generator_error": "the generator raised",
    "unparseable": "the model's proposal did not parse into a task",
    "invalid_task": "the task does not load (a missing file or a bad task.toml)",
    "over_contract": "the task asks for more than the contract's limits allow",
    "no_known_wrong": "the candidate has no known-wrong solution to check the verifier against",
    "near_duplicate": "the instruction nearly repeats a pool task's",
    "build_failed": "the environment does not build",
    "oracle_failed": "the reference solution fails",
    "oracle_flaky": "the reference solution passes on one run and fails on another (flaky verifier)",
    "nop_passed": "doing nothing passes (the test always passes or the environment already solves it)",
    "known_wrong_passed": "a known-wrong solution passes (the verifier is too weak)",
    "above_band": "the current generation already solves it more often than the band allows",
    "below_band": "the current generation solves it less often than the band requires",
    "duplicate_digest": "an identical task is already in the pool",
    "name_taken": "a different task with the same name is already in tasks/",
}


class TaskDraft(RsiModel):
    """A generated task before it is written: Harbor parts, rsi metadata and known-wrong solutions."""

    model_config = ConfigDict(extra="forbid")

    generator: str
    family: str
    template: str | None = None  # `<family>/<template>`: the unit of evaluation (None: the task is its own)
    difficulty: int = Field(ge=0, le=10)
    seed: int | None = None
    # the stream the instance was drawn from (`instance_seed`): the side the request drew for and the cycle
    side: InstanceSide | None = None
    cycle: int | None = Field(default=None, ge=0)
    parent_task: str | None = None
    # which wording of the template's instruction (0-based) of how many it has (None: not a template's)
    phrasing: int | None = Field(default=None, ge=0)
    phrasings: int | None = Field(default=None, ge=1)
    # the operations' templates a composed task chains (`text/sort`, ...), in order (None: not a composition)
    ops: list[str] | None = None
    instruction: str
    dockerfile: str
    env_files: dict[str, str] = Field(default_factory=dict)  # relative to environment/
    test_sh: str
    solve_sh: str
    known_wrong: list[str] = Field(default_factory=list)  # solve.sh bodies that must fail
    reads: list[str] = Field(default_factory=list)  # the paths the verifier reads (integrity level 1)
    agent_timeout_sec: float = 120.0
    verifier_timeout_sec: float = 60.0
    cpus: float = 1.0
    memory_mb: int = 512
    pids: int = 256
    network_mode: str = "no-network"
    tags: list[str] = Field(default_factory=list)

    def key(self) -> str:
        """A short stable key of what the generator was asked for (or wrote, without a seed)."""
        if self.seed is not None:
            asked: list[object] = [self.generator, self.seed, self.difficulty, self.parent_task]
            if self.template:
                asked.append(self.template)
            if self.phrasing is not None:  # one seed drawn on the train and on the held-out side: two tasks
                asked.append(self.phrasing)
            if self.side is not None:  # one seed drawn for two sides or cycles: two instances, two names
                asked += [self.side, self.cycle or 0]
            return digest_obj(asked)[:8]
        return digest_obj(self.model_dump(mode="json"))[:8]

    def name(self) -> str:
        return f"{self.family}-d{self.difficulty}-{self.key()}"


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_toml_str(v) for v in values) + "]"


def render_task_toml(d: TaskDraft, *, name: str, split: Split, discovered_by: str | None,
                     holdout_part: HoldoutPart | None = None) -> str:
    lines = [
        'version = "1.0"',
        "",
        "[task]",
        f"name = {_toml_str(name)}",
        "",
        "[metadata]",
        'author_name = "rsi discover"',
        f"category = {_toml_str(d.family)}",
        f"tags = {_toml_list(d.tags)}",
        "",
        "[metadata.rsi]",
        f"family = {_toml_str(d.family)}",
        *([f"template = {_toml_str(d.template)}"] if d.template else []),
        f"difficulty = {d.difficulty}",
        f"split = {_toml_str(split)}",
        *([f"holdout_part = {_toml_str(holdout_part)}"] if split == "holdout" and holdout_part else []),
        *([f"phrasing = {d.phrasing}", f"phrasings = {d.phrasings}"]
          if d.phrasing is not None and d.phrasings is not None else []),
        *([f"ops = {_toml_list(d.ops)}"] if d.ops else []),
        f"generator = {_toml_str(d.generator)}",
    ]
    if d.seed is not None:
        lines.append(f"seed = {d.seed}")
    if d.side is not None:
        lines += [f"instance_side = {_toml_str(d.side)}", f"instance_cycle = {d.cycle or 0}"]
    if d.parent_task is not None:
        lines.append(f"parent_task = {_toml_str(d.parent_task)}")
    if discovered_by is not None:
        lines.append(f"discovered_by = {_toml_str(discovered_by)}")
    lines += [
        "",
        "[agent]",
        f"timeout_sec = {float(d.agent_timeout_sec)}",
        "",
        "[verifier]",
        f"timeout_sec = {float(d.verifier_timeout_sec)}",
    ]
    if d.reads:
        lines.append(f"reads = {_toml_list(d.reads)}")
    lines += [
        "",
        "[environment]",
        "build_timeout_sec = 300.0",
        f"cpus = {d.cpus:g}",
        f"memory_mb = {d.memory_mb}",
        f"pids = {d.pids}",
        f"network_mode = {_toml_str(d.network_mode)}",
        "",
    ]
    return "\n".join(lines)


def render_task(d: TaskDraft, *, name: str, split: Split, discovered_by: str | None,
                holdout_part: HoldoutPart | None = None) -> dict[str, str]:
    """The task directory's files (relative path -> text). Known-wrong solutions are not among them."""
    files = {
        "instruction.md": d.instruction.rstrip() + "\n",
        "task.toml": render_task_toml(d, name=name, split=split, discovered_by=discovered_by,
                                      holdout_part=holdout_part),
        "environment/Dockerfile": d.dockerfile,
        "tests/test.sh": d.test_sh,
        "solution/solve.sh": d.solve_sh,
    }
    for rel, text in d.env_files.items():
        files[f"environment/{rel}"] = text
    return files


def content_digest(files: Mapping[str, str]) -> str:
    return digest_files((k, v.encode()) for k, v in files.items())


def split_of(digest: str, holdout_fraction: float) -> Split:
    """`holdout` for a fixed share of digests, `train` for the rest: a pure function of the digest."""
    return "holdout" if int(digest[:8], 16) / 16**8 < holdout_fraction else "train"


def unit_of(unit: HoldoutUnit, *, template: str | None, family: str, task: str) -> str:
    """The evaluation unit a task belongs to (what the split keeps whole and the paired test clusters on):
    its template id, its family, or the task itself (`task`, and any task without a template)."""
    if unit == "template" and template:
        return template
    if unit == "family":
        return f"family:{family}"
    return f"task:{task}"


def unit_split(unit: HoldoutUnit, key: str, holdout_fraction: float) -> Split:
    """The split of a whole template or family: a pure function of its id (and the unit kind)."""
    return split_of(sha256(f"{unit}:{key}".encode()).hexdigest(), holdout_fraction)


def draft_split(d: TaskDraft, name: str, holdout_fraction: float, unit: HoldoutUnit = "task") -> Split:
    """The split of a draft. By template (or family) it is a function of the template id (family name),
    so every task of one template lands on the same side. By task, or for a draft without a template,
    it is decided by the digest of its files as generated with no split written (the split field itself
    is part of the final digest, so it cannot decide itself)."""
    if unit == "template" and d.template:
        return unit_split("template", d.template, holdout_fraction)
    if unit == "family":
        return unit_split("family", d.family, holdout_fraction)
    return split_of(content_digest(render_task(d, name=name, split="train", discovered_by=None)), holdout_fraction)


def phrasing_side(i: int, n: int, holdout_phrasings: int) -> Split:
    """The side of phrasing `i` of a template's `n`: the last `holdout_phrasings` are held out (`holdout`:
    never trained on, the in-skill holdout's words), the rest are `train`. Pure, so every caller agrees."""
    if not 0 <= i < n:
        raise ValueError(f"phrasing {i} is not one of 0..{n - 1}")
    return "holdout" if i >= n - holdout_phrasings else "train"


def phrasings_on(side: PhrasingSide, n: int, holdout_phrasings: int) -> list[int]:
    """The phrasings (indices of `n`) a request for `side` may draw; empty when the side has none."""
    return [i for i in range(n) if side == "any" or phrasing_side(i, n, holdout_phrasings) == side]


def trained_ops(d: TaskDraft, holdout_fraction: float, unit: HoldoutUnit = "task") -> bool:
    """Whether a composed draft (one with `ops`) chains only operations the split trains on: every operation's
    template (by template; its family by family) on the train side. False for a draft without ops, or by task."""
    if not d.ops or unit == "task":
        return False
    keys = d.ops if unit == "template" else [op.split("/", 1)[0] for op in d.ops]
    return all(unit_split(unit, k, holdout_fraction) == "train" for k in keys)


def draft_placement(d: TaskDraft, name: str, holdout_fraction: float, unit: HoldoutUnit = "task",
                    holdout_phrasings: int = 0,
                    in_skill: InSkillSource = "phrasings") -> tuple[Split, HoldoutPart | None]:
    """Where a draft goes: `train`, or `holdout` with its part. A template (family, task) the unit split
    holds out is `unseen` whatever its phrasing, except, when the contract's in-skill part is `compositions`, a
    held-out composition of trained operations (`ops`, every one a train template): `in_skill` (a combination
    never trained, of skills that were); a train template's draft in a held-out phrasing is `in_skill` (the
    skill was trained, these words never were); the rest is `train`. So no unseen template ever has a train task
    and no train task uses a held-out phrasing, whatever the generator was asked for."""
    if draft_split(d, name, holdout_fraction, unit) == "holdout":
        if in_skill == "compositions" and trained_ops(d, holdout_fraction, unit):
            return "holdout", "in_skill"
        return "holdout", "unseen"
    if d.phrasing is not None and d.phrasings is not None \
            and phrasing_side(d.phrasing, d.phrasings, holdout_phrasings) == "holdout":
        return "holdout", "in_skill"
    return "train", None


def contract_overreach(spec: TaskSpec, contract: Contract) -> list[str]:
    """`field: why` for each limit the task asks beyond the contract's ceilings."""
    lim, box, env = contract.limits, contract.limits.sandbox, spec.environment
    out = []
    if spec.agent.timeout_sec > lim.agent_timeout_sec:
        out.append(f"agent.timeout_sec: {spec.agent.timeout_sec:g} > the contract's {lim.agent_timeout_sec:g}")
    if spec.verifier.timeout_sec > lim.verifier_timeout_sec:
        out.append(f"verifier.timeout_sec: {spec.verifier.timeout_sec:g} > the contract's "
                   f"{lim.verifier_timeout_sec:g}")
    if env.cpus > box.cpus:
        out.append(f"environment.cpus: {env.cpus:g} > the contract's {box.cpus:g}")
    if env.memory_mb > box.memory_mb:
        out.append(f"environment.memory_mb: {env.memory_mb} > the contract's {box.memory_mb}")
    if env.pids > box.pids:
        out.append(f"environment.pids: {env.pids} > the contract's {box.pids}")
    if spec.network("agent") != "no-network" and not box.network:
        out.append(f"environment.network_mode: '{spec.network('agent')}' but the contract allows no network")
    return out


_WS = re.compile(r"\s+")
_PUNCT = re.compile(r"[`*_#>\[\]()]")


def normalise(text: str) -> str:
    return _WS.sub(" ", _PUNCT.sub(" ", text.lower())).strip()


def nearest_duplicate(instruction: str, pool: Mapping[str, str]) -> tuple[str, float] | None:
    """The pool task (name -> instruction) most similar to `instruction`, with the similarity in 0..1."""
    from rapidfuzz import fuzz  # here: only discover compares instructions, and every command imports this module

    mine = normalise(instruction)
    best: tuple[str, float] | None = None
    for name, other in pool.items():
        score = fuzz.ratio(mine, normalise(other)) / 100.0
        if best is None or score > best[1]:
            best = (name, score)
    return best


def in_band(rate: float, band: tuple[float, float]) -> Literal["below", "in", "above"]:
    lo, hi = band
    if rate < lo:
        return "below"
    return "above" if rate > hi else "in"


def next_level(level: int, rates: list[float], band: tuple[float, float], max_level: int) -> tuple[int, str]:
    """A family's next difficulty level from its tasks' recent pass rates: up when the family's mean
    rate lies above the band, down when every task is at 0 (and not below level 1)."""
    if not rates:
        return level, "no probes yet"
    mean = sum(rates) / len(rates)
    if mean > band[1] and level < max_level:
        return level + 1, f"mean pass rate {mean:.2f} above the band's {band[1]:.2f}"
    if all(r == 0 for r in rates) and level > 1:
        return level - 1, f"all {len(rates)} task(s) at 0"
    return level, f"mean pass rate {mean:.2f} within reach"
