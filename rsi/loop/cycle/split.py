"""A cycle's budget, split between its phases before any of them runs: promote's need first (both generations
on the holdout, every part of it, the no-forgetting part included, the suite and, when asked, the train tasks), the
rest between discover and expand; and how many templates each holdout part lacks (`unseen`: templates never trained
on; `in_skill`: this cycle's own question, held-out compositions of trained operations or train templates in their
held-out phrasings, rsi.loop.cycle.in_skill), which the cycle's discover tops up."""

from __future__ import annotations

from typing import Literal

from rsi.core.errors import InputError
from rsi.core.promotion import unit_floor
from rsi.core.task import HoldoutPart
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.evidence import holdout_tasks, task_unit, train_tasks
from rsi.loop.suites import suite_tasks

DISCOVER_SHARE = 0.4  # of what promote leaves; expand gets the rest
TOP_UP_SPARE = 1  # holdout candidates asked beyond the paired test's minimum when topping the split up


def in_template_count(ctx: WorkspaceContext) -> int:
    """How many train tasks promote measures the in-template rate on (the contract's cap, else all)."""
    n, cap = len(train_tasks(ctx)), ctx.contract.promotion.in_template_max_tasks
    return min(n, cap) if cap > 0 else n


def holdout_goal(ctx: WorkspaceContext, target: int | None) -> int:
    """How many holdout units (templates) the cycle's discover tops the split up to: `target`, at least the
    paired test's minimum (below it promote cannot pass); by default that minimum plus one spare."""
    need = unit_floor(ctx.contract.promotion)
    return max(need, target) if target is not None else need + TOP_UP_SPARE


def holdout_part_units(ctx: WorkspaceContext, cycle: int | None = None) -> dict[HoldoutPart, set[str]]:
    """The evaluation units (templates) of each holdout part among the active holdout tasks; a holdout task
    without a part (written before parts existed, or by hand) is of a template never trained on: `unseen`. With
    `cycle`, `in_skill` counts only the in-skill tasks drawn for that cycle (`instance_cycle`): its own question
    (earlier cycles' are the no-forgetting part)."""
    unit = ctx.contract.promotion.holdout_unit
    out: dict[HoldoutPart, set[str]] = {"unseen": set(), "in_skill": set()}
    for t in holdout_tasks(ctx):
        meta = t.spec.metadata.rsi
        if meta.holdout_part == "in_skill" and cycle is not None and (meta.instance_cycle or 0) != cycle:
            continue
        out[meta.holdout_part or "unseen"].add(task_unit(t, unit))
    return out


def holdout_deficits(ctx: WorkspaceContext, target: int | None, in_skill_target: int | None = None,
                     cycle: int | None = None) -> dict[HoldoutPart, int]:
    """Templates to add to each part. `unseen`: none when it has the paired test's minimum (and `target`),
    else up to the goal (the minimum plus a spare, or the target). `in_skill`: asked for only with
    `in_skill_target` (and an in-skill source: held-out compositions or phrasings), up to its goal likewise,
    counted over the in-skill tasks of `cycle` alone when given (a fresh question every cycle)."""
    have, need = holdout_part_units(ctx, cycle), unit_floor(ctx.contract.promotion)
    unseen = len(have["unseen"])
    out: dict[HoldoutPart, int] = {"unseen": 0 if unseen >= need and (target is None or unseen >= target)
                                   else max(0, holdout_goal(ctx, target) - unseen), "in_skill": 0}
    if in_skill_target is not None and in_skill_source(ctx) is not None:
        out["in_skill"] = max(0, holdout_goal(ctx, in_skill_target) - len(have["in_skill"]))
    return out


InSkillSource = Literal["compositions", "phrasings"]


def in_skill_compositions(ctx: WorkspaceContext, level: int | None = None) -> list[str]:
    """The compositions (`compose/<op>+<op>[+<op>]`) an in-skill part can draw from: those the contract's template
    split holds out, every operation of them from a train template (rsi.loop.discover.generators.compose). Empty
    unless the split is by template."""
    from rsi.loop.discover.generators.compose import held_out_compositions  # only this function needs it

    p = ctx.contract.promotion
    return held_out_compositions(p.holdout_fraction, level) if p.holdout_unit == "template" else []


def in_skill_source(ctx: WorkspaceContext) -> InSkillSource | None:
    """What this workspace's in-skill part asks: held-out compositions of trained operations where the contract's
    `promotion.in_skill` says `compositions` and the split has any, else train templates in held-out phrasings
    (when the contract holds phrasings out); None: it can draw no in-skill task."""
    p = ctx.contract.promotion
    if p.in_skill == "compositions" and in_skill_compositions(ctx):
        return "compositions"
    return "phrasings" if p.holdout_phrasings > 0 else None


def plan_split(ctx: WorkspaceContext, budget: float, discover_share: float = DISCOVER_SHARE,
               holdout_target: int | None = None, in_skill_target: int | None = None,
               cycle: int | None = None) -> dict[str, float]:
    """Trials per phase: promote's need first, the rest 40/60 (by default) between discover and expand.
    Promote measures every active holdout task for both generations: earlier cycles' in-skill tasks (the frozen
    no-forgetting part) too, and this cycle's in-skill part (`cycle`) as discover will top it up."""
    p = ctx.contract.promotion
    # a part short of the minimum units (or of an explicit target) is topped up by discover, a task per
    # missing unit: promote pays for those
    holdout = len(holdout_tasks(ctx)) + sum(holdout_deficits(ctx, holdout_target, in_skill_target, cycle).values())
    try:
        suite = len(suite_tasks(ctx))
    except InputError:
        suite = 0  # promote names the missing suite
    prom = float(2 * p.trials_per_task * holdout + 2 * p.suite_trials_per_task * suite
                 + 2 * p.in_template_trials_per_task * in_template_count(ctx))
    rest = budget - prom
    if rest < 2:
        raise InputError("--budget", None, f"{budget:g} trials cannot cover promote's {prom:g} (2 generations x "
                                           f"({p.trials_per_task} trials x {holdout} holdout tasks + "
                                           f"{p.suite_trials_per_task} x {suite} suite tasks)) and leave any "
                                           f"for discover and expand; the minimum that works is {prom + 2:g}")
    disc = float(max(1, int(rest * discover_share)))
    return {"discover": disc, "expand": rest - disc, "update": 0.0, "promote": prom}


__all__ = ["DISCOVER_SHARE", "TOP_UP_SPARE", "InSkillSource", "holdout_deficits", "holdout_goal",
           "holdout_part_units", "in_skill_compositions", "in_skill_source", "in_template_count", "plan_split"]
