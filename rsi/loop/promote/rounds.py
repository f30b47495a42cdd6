"""Promote's measurement in rounds: the group-sequential test over the holdout (rsi.core.sequential).

Round r brings every holdout task to ceil(r * trials_per_task / looks) graded trials per generation (and
every suite task to ceil(r * suite_trials_per_task / looks)), as one child `run` job per part and round
(stage `holdout`, `holdout-2`, ...; `suite`, `suite-2`, ...), then looks: the gates are evaluated on the
first trials per task up to the round's count, with the round's efficacy bound for the significance gate and
the round's non-inferiority bound (`noninferiority_spending` over the same looks) for the non-inferiority gates.
A look stops the promote for a clear gain (every gate passes) or a clear failure (the futility bound);
otherwise the next round runs; the last look decides. Trials already recorded count at every look, so a
killed promote resumes its round and re-derives the earlier looks from the same trials (oldest first).
"""

from __future__ import annotations

from pathlib import Path

from rsi.core.generation import GenerationManifest
from rsi.core.promotion import PromotionVerdict, TaskOutcome, evaluate, look_bounds
from rsi.core.sequential import Look, SequentialRecord, decide, schedule, z_of
from rsi.core.task import Task
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.evidence import arm_outcomes, cells_for, have, outcomes
from rsi.loop.stages import ChildJobs, Stage

STAGE = "holdout"
SUITE_STAGE = "suite"
IN_TEMPLATE_STAGE = "in_template"


def _major(version: str) -> int:
    return int(version.split(".")[0])


class Rounds:
    """The holdout and suite measured look by look, the in-template rate once at the end, and the verdict."""

    def __init__(self, ctx: WorkspaceContext, runner: ChildJobs, plans: list[ArmPlan], tasks: list[Task],
                 suite: list[Task], *, measured: bool) -> None:
        promo = ctx.contract.promotion
        self.ctx, self.runner, self.plans, self.tasks, self.suite, self.measured = (
            ctx, runner, plans, tasks, suite, measured)
        self.looks = min(promo.looks, promo.trials_per_task)  # every round adds at least one trial per task
        self.sched = schedule(promo.trials_per_task, self.looks)
        self.sched_suite = schedule(promo.suite_trials_per_task, self.looks)
        self.bounds = look_bounds(promo) if measured else (promo.alpha,)
        # the non-inferiority gates' own bounds over the same looks (promo.noninferiority_spending)
        self.ni_bounds = look_bounds(promo, promo.noninferiority_spending) if measured else (promo.alpha,)
        self.record = SequentialRecord(looks=self.looks, rule=promo.spending, alpha=promo.alpha,
                                       futility_z=promo.futility_z)
        self.bound = self.ni_bound = promo.alpha
        self.want = (0, 0)  # trials per task of the latest look: (holdout, suite)
        self.planned = 0
        self.before: dict[tuple[str, str], int] = {}  # (arm, task digest) -> trials recorded before this promote
        self.wanted: dict[str, int] = {}  # task digest -> trials per task the verdict used
        self.in_out: tuple[dict[str, TaskOutcome], dict[str, TaskOutcome]] | None = None
        if measured:
            self._count_before([*tasks, *suite])

    def _count_before(self, group: list[Task]) -> None:
        for p in self.plans:
            for t in group:
                self.before.setdefault((p.arm.id, t.digest), have(self.ctx, p, t))

    def _stage(self, base: str, r: int, group: list[Task], want: int, part: str) -> str | None:
        cells = cells_for(self.ctx, self.plans, group, want)
        self.planned += sum(c[2] for c in cells)
        key = base if r == 1 else f"{base}-{r}"
        return self.runner.run(Stage(key, self.plans, cells, [Path(t.path) for t in group], part=part)).stop

    def _use(self, group: list[Task], want: int) -> None:
        self.wanted.update({t.digest: want for t in group})

    def run(self, parent: GenerationManifest, cand: GenerationManifest) -> str | None:
        """Measure round by round until a look decides; the reason to stop (Ctrl-C, breaker) or None."""
        for r in range(1, self.looks + 1):
            want = (self.sched[r - 1], self.sched_suite[r - 1])
            for base, group, n, part in ((STAGE, self.tasks, want[0], "holdout"),
                                         (SUITE_STAGE, self.suite, want[1], "suite")):
                if group and (stop := self._stage(base, r, group, n, part)) is not None:
                    self.want = want
                    self._use(self.tasks, want[0])
                    self._use(self.suite, want[1])
                    return stop
            self.want, self.bound, self.ni_bound = want, self.bounds[r - 1], self.ni_bounds[r - 1]
            self._use(self.tasks, want[0])
            self._use(self.suite, want[1])
            v = self.verdict(parent, cand)
            others = all(g.passed for g in v.gates if g.name != "significance")
            d = decide(r, self.looks, v.p_value, self.bound, others, self.record.futility_z)
            self.record.history.append(Look(r, want[0], v.p_value, self.bound, z_of(v.p_value), d))
            self.record.rounds_run = r
            if d != "continue":
                self.record.stopped = d
                return None
        return None

    def in_template(self, group: list[Task], k: int) -> str | None:
        """The train tasks at `k` trials per task and generation (reported, never gated), once."""
        self._count_before(group)
        stop = self._stage(IN_TEMPLATE_STAGE, 1, group, k, "in-template")
        own = self.runner.trials()
        self.in_out = (arm_outcomes(self.ctx, self.plans[0], own, group, k, "template"),
                       arm_outcomes(self.ctx, self.plans[1], own, group, k, "template"))
        self._use(group, k)
        return stop

    def reused(self) -> int:
        """Trials recorded before this promote that its verdict used."""
        return sum(min(n, self.wanted.get(digest, 0)) for (_arm, digest), n in self.before.items())

    def verdict(self, parent: GenerationManifest, cand: GenerationManifest) -> PromotionVerdict:
        """The gates at the latest look (nothing measured: every task with no trial, for the advice)."""
        ctx, promo = self.ctx, self.ctx.contract.promotion
        own = self.runner.trials()
        allowed: list[str] = list(ctx.contract.grading.promotion_integrity)

        def arm(group: list[Task], want: int, unit: str, i: int) -> dict[str, TaskOutcome]:
            if not self.measured:
                return outcomes([], [], group, want, allowed, unit)  # type: ignore[arg-type]
            return arm_outcomes(ctx, self.plans[i], own, group, want, unit)  # type: ignore[arg-type]

        hold = [arm(self.tasks, self.want[0], promo.holdout_unit, i) for i in (0, 1)]
        suite = [arm(self.suite, self.want[1], "task", i) for i in (0, 1)]
        v = evaluate(hold[0], hold[1], promo, parent_major=_major(parent.contract),
                     candidate_major=_major(cand.contract), contract_major=ctx.contract.major,
                     suite=(suite[0], suite[1]), in_template=self.in_out, bound=self.bound,
                     ni_bound=self.ni_bound)
        v.sequential = self.record if self.measured else None
        return v


__all__ = ["IN_TEMPLATE_STAGE", "Rounds", "STAGE", "SUITE_STAGE"]
