"""A fresh in-skill question every cycle: what the cycle's holdout-only discover draws for the in-skill part.

The contract's `promotion.in_skill` says what the part asks: `compositions` (held-out compositions of trained
operations, the compose generator's: a combination never trained, every step of it trained, in a person's words)
or `phrasings` (train templates in held-out phrasings). A workspace whose split has no held-out composition (split
by task, or none at the levels) keeps the phrasings, when the contract holds phrasings out; with neither there is
no in-skill top-up.

Each cycle draws its own in-skill part (its tasks record `instance_cycle` = the cycle's number), topped up to its
goal over the tasks of *this* cycle only (rsi.loop.cycle.split.holdout_deficits), with the seed recorded in the
cycle job's params (`in_skill.seed`: the cycle's seed plus IN_SKILL_SEED_OFFSET, so `rsi cycle --seed` reproduces
it). Compositions are drawn from the levels the cycle trains on (its compose levels, else pairs, level 3: the
step just above single operations) and, where enough exist, only from those whose every operation is a template
among the pool's active train tasks (the operations this cycle trains on); else from every held-out composition of
trained operations. Earlier cycles' in-skill tasks stay in the holdout as the frozen no-forgetting part
(rsi.core.holdout_parts).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.split import InSkillSource, in_skill_compositions, in_skill_source
from rsi.loop.promote.evidence import train_tasks

IN_SKILL_SEED_OFFSET = 15887  # the in-skill top-up's seed: the cycle's seed plus this
COMPOSE_LEVELS = (3, 4)  # pairs, triples (rsi.loop.discover.generators.compose)


def composition_levels(levels: list[int]) -> list[int]:
    """The compose levels a cycle at `levels` draws its in-skill compositions at: its own compose levels, else
    pairs (3) of the operations it trains."""
    return [lv for lv in dict.fromkeys(levels) if lv in COMPOSE_LEVELS] or [COMPOSE_LEVELS[0]]


@dataclass
class InSkillPlan:
    """How a cycle draws its in-skill part (recorded in the cycle job's params as `in_skill`)."""

    source: InSkillSource
    seed: int
    cycle: int
    levels: list[int] = field(default_factory=list)  # empty: the cycle's own levels (phrasings)
    generators: list[str] = field(default_factory=list)  # empty: the cycle's own generators (phrasings)
    templates: list[str] = field(default_factory=list)  # the compositions it may draw (compositions)
    trained_ops_only: bool = False  # every composition's operations among the pool's train templates

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "templates": len(self.templates)}

    def describe(self) -> str:
        if self.source == "phrasings":
            return f"train templates in held-out phrasings, seed {self.seed}"
        ops = "operations the pool trains on" if self.trained_ops_only else "trained operations"
        return (f"{len(self.templates)} held-out compositions of {ops} at level(s) "
                f"{', '.join(map(str, self.levels))}, seed {self.seed}")


def plan(ctx: WorkspaceContext, source: InSkillSource, seed: int, cycle: int, levels: list[int],
         need: int) -> InSkillPlan:
    """The in-skill draw of cycle `cycle` (its seed `seed`): for compositions, the held-out compositions of
    trained operations at the cycle's compose levels, narrowed to those of operations the pool trains on when at
    least `need` are (see the module docstring)."""
    from rsi.loop.discover.generators.compose import FAMILY, ops_of

    s = seed + IN_SKILL_SEED_OFFSET
    if source == "phrasings":
        return InSkillPlan("phrasings", s, cycle)
    lvs = composition_levels(levels)
    every = [t for lv in lvs for t in in_skill_compositions(ctx, lv)]
    trained = {t.spec.metadata.rsi.template for t in train_tasks(ctx)}
    mine = [t for t in every if set(ops_of(t)) <= trained]
    narrow = len(mine) >= need
    return InSkillPlan("compositions", s, cycle, lvs, [FAMILY], mine if narrow else every, narrow)


def in_skill_draw(ctx: WorkspaceContext, job_id: str, seed: int, cycle: int, levels: list[int],
                  need: int) -> InSkillPlan | None:
    """The cycle's in-skill draw (`plan`), recorded in the cycle job's params as `in_skill`; None where the
    workspace can draw no in-skill task."""
    source = in_skill_source(ctx)
    if source is None:
        return None
    out = plan(ctx, source, seed, cycle, list(levels), need)
    store = ctx.store
    store.acquire_driver()
    try:
        store.merge_job_params(job_id, {"in_skill": out.as_json()})
    finally:
        store.release_driver()
    return out


__all__ = ["COMPOSE_LEVELS", "IN_SKILL_SEED_OFFSET", "InSkillPlan", "composition_levels", "in_skill_draw",
           "in_skill_source", "plan"]
