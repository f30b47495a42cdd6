"""The promote gate's scope for a workspace: what the viewer, `rsi diff` and the reports pass to the one rate
computation (rsi.store.queries_rates.RateQueries.pass_tally).

The store counts; this module only says, from the workspace's contract and files, which K per task and which
integrity levels promote counts, and which tasks are the regression suites' (kept out of the holdout).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rsi.store.queries_rates import PassTally, RateScope, promotion_scope

# An opened workspace (rsi.loop.context.WorkspaceContext or rsi.view.context.ViewContext): .ws, .contract, .reader
Ctx = Any
# what every page says a rate counts (and what it leaves out)
COUNTS = ("model arms only (agent harness or an external harness; the oracle, nop, known-wrong and other "
          "controls are not counted), each generation under its own harness config, discover's probe left out, "
          "infra errors left out, as the promote gate counts")


def suite_digests(ctx: Ctx) -> frozenset[str]:
    """Digests of the contract's regression suites' tasks: promote measures them beside the holdout (a starter
    task may say `split = "holdout"`), so every holdout figure keeps them out, as the gate does."""
    from rsi.store.files import find_task_dirs, load_tasks

    dirs = [d for rel in ctx.contract.promotion.suites if (d := (ctx.ws.root / rel).resolve()).is_dir()]
    return frozenset(t.digest for t in load_tasks(find_task_dirs(dirs))) if dirs else frozenset()


def gate_scope(ctx: Ctx, parts: tuple[str, ...] | None = ("holdout",), family: str | None = None) -> RateScope:
    """The scope promote counts under the workspace's contract, over `parts` (None: every part)."""
    return promotion_scope(ctx.contract, parts, suite_digests(ctx), family)


def generation_tally(ctx: Ctx, generation: str, scope: RateScope, agents: Iterable[str] | None = None) -> PassTally:
    """A generation's model-arm tally under `scope` (`agents`: narrowed to these, e.g. what a promotion measured)."""
    return ctx.reader.pass_tally(scope, generation=generation, agents=agents)


__all__ = ["COUNTS", "gate_scope", "generation_tally", "suite_digests"]
