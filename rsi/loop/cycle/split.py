"""A cycle's budget, split between its phases before any of them runs: promote's need first (both generations
on the holdout, the suite and, when asked, the train tasks), the rest between discover and expand."""

from __future__ import annotations

from rsi.core.errors import InputError
from rsi.core.promotion import min_tasks
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.phase import holdout_tasks, holdout_units, train_tasks
from rsi.loop.suites import suite_tasks

DISCOVER_SHARE = 0.4  # of what promote leaves; expand gets the rest
TOP_UP_SPARE = 1  # holdout candidates asked beyond the paired test's minimum when topping the split up


def holdout_goal(ctx: WorkspaceContext, target: int | None) -> int:
    """How many holdout units (templates) the cycle's discover tops the split up to: `target`, at least the
    paired test's minimum (below it promote cannot pass); by default that minimum plus one spare."""
    need = min_tasks(ctx.contract.promotion.alpha)
    return max(need, target) if target is not None else need + TOP_UP_SPARE


def plan_split(ctx: WorkspaceContext, budget: float, discover_share: float = DISCOVER_SHARE,
               holdout_target: int | None = None) -> dict[str, float]:
    """Trials per phase: promote's need first, the rest 40/60 (by default) between discover and expand."""
    p = ctx.contract.promotion
    tasks, units, need = len(holdout_tasks(ctx)), len(holdout_units(ctx)), min_tasks(p.alpha)
    # a split short of the minimum units (or of an explicit target) is topped up by discover, a task per
    # missing unit: promote pays for those
    holdout = tasks if units >= need and (holdout_target is None or units >= holdout_target) \
        else tasks + max(0, holdout_goal(ctx, holdout_target) - units)
    try:
        suite = len(suite_tasks(ctx))
    except InputError:
        suite = 0  # promote names the missing suite
    prom = float(2 * p.trials_per_task * holdout + 2 * p.suite_trials_per_task * suite
                 + 2 * p.in_template_trials_per_task * len(train_tasks(ctx)))
    rest = budget - prom
    if rest < 2:
        raise InputError("--budget", None, f"{budget:g} trials cannot cover promote's {prom:g} (2 generations x "
                                           f"({p.trials_per_task} trials x {holdout} holdout tasks + "
                                           f"{p.suite_trials_per_task} x {suite} suite tasks)) and leave any "
                                           f"for discover and expand; the minimum that works is {prom + 2:g}")
    disc = float(max(1, int(rest * discover_share)))
    return {"discover": disc, "expand": rest - disc, "update": 0.0, "promote": prom}


__all__ = ["DISCOVER_SHARE", "TOP_UP_SPARE", "holdout_goal", "plan_split"]
