"""Child jobs of a phase job: each stage (a baseline, a batch of oracle re-runs, a search round) is
a `run` job whose parent is the phase job, found again by its stage key on resume.

Discover, its re-probe and expand all run their stages through it, in any budget unit:
the phase job's budget is shared by its children, so each child runs within what the others left,
and what is spent is computed from the trials actually recorded (never a separate counter that a
`kill -9` could leave behind).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rsi.core.trial import ErrorType, TrialStatus, is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import Progress, RunRequest, run_job
from rsi.sandbox.base import SandboxProvider
from rsi.store.tables import JobRow, TrialRow


def row_cost(unit: str, t: TrialRow) -> float:
    """What a recorded trial cost in `unit` (rsi.core.budget.trial_cost, from the row)."""
    if t.status != TrialStatus.DONE.value:
        return 0.0
    if unit == "trials":
        return 0.0 if is_infra(t.error_type) else 1.0
    if unit == "tokens":
        return float(t.prompt_tokens + t.completion_tokens)
    return t.t_total / 60.0


@dataclass
class Stage:
    key: str  # unique within the parent: how a resume finds the child again
    arms: list[ArmPlan]
    cells: list[tuple[str, str, int]]  # (task name, arm id, attempts)
    task_dirs: list[Path]
    part: str = ""  # the budget line it is charged to (baseline, attribution, search...)
    extra: dict[str, object] = field(default_factory=dict)  # more params for the child


@dataclass
class StageResult:
    job_id: str
    trials: list[TrialRow]
    stop: str | None = None  # why the parent must stop (budget, Ctrl-C, breaker); None: finished
    budget_out: bool = False  # the stop was the budget being spent


class ChildJobs:
    """Runs (or resumes) the child jobs of one phase job within the phase job's budget."""

    def __init__(self, ctx: WorkspaceContext, parent: str, *, phase: str, budget: float | None,
                 unit: str = "trials", concurrency: int = 1,
                 progress_for: Callable[[str], Progress] | None = None, resume_hint: str = "",
                 task_state: str = "active", provider: SandboxProvider | None = None,
                 trial_env_hook: Callable[[TrialEnv], None] | None = None) -> None:
        self.ctx, self.parent, self.phase, self.budget, self.unit = ctx, parent, phase, budget, unit
        self.concurrency, self.resume_hint, self.task_state = concurrency, resume_hint, task_state
        self.progress_for = progress_for or (lambda _k: Progress())
        self.provider, self.trial_env_hook = provider, trial_env_hook

    def children(self) -> list[JobRow]:
        return self.ctx.store.child_jobs(self.parent)

    def child(self, key: str) -> JobRow | None:
        return next((j for j in self.children() if j.params.get("stage") == key), None)

    def trials(self) -> list[TrialRow]:
        return [t for j in self.children() for t in self.ctx.store.trials(j.id)]

    def spent(self, exclude: str | None = None) -> float:
        return sum(row_cost(self.unit, t) for j in self.children() if j.id != exclude
                   for t in self.ctx.store.trials(j.id))

    def spent_by_part(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for j in self.children():
            part = str(j.params.get("part") or j.params.get("stage") or "")
            out[part] = out.get(part, 0.0) + sum(row_cost(self.unit, t) for t in self.ctx.store.trials(j.id))
        return out

    def remaining(self) -> float | None:
        return None if self.budget is None else self.budget - self.spent()

    def run(self, stage: Stage) -> StageResult:
        store = self.ctx.store
        existing = self.child(stage.key)
        if existing is not None:
            rerun = [t for t in store.trials(existing.id)
                     if t.status != TrialStatus.DONE.value
                     or (is_infra(t.error_type) and t.error_type != ErrorType.CANCELLED.value)]
            if existing.status == "done" and not rerun:
                return StageResult(existing.id, store.trials(existing.id))
        elif not stage.cells:
            return StageResult("", [])
        left = None if self.budget is None else self.budget - self.spent(exclude=existing.id if existing else None)
        if left is not None and left <= 0:
            return StageResult(existing.id if existing else "", store.trials(existing.id) if existing else [],
                               stop=f"budget spent ({self.budget:g} {self.unit}) before {stage.key}; "
                                    f"{self.resume_hint} --budget N", budget_out=True)
        child = existing.id if existing else None
        req = RunRequest(paths=[] if child else stage.task_dirs, resume=child, concurrency=self.concurrency,
                         budget=left, budget_unit=self.unit, arm_plans=None if child else stage.arms,
                         cells=None if child else stage.cells, phase=self.phase, parent_job=self.parent,
                         params={"stage": stage.key, "part": stage.part, **stage.extra},
                         task_state=self.task_state)
        try:
            out = run_job(self.ctx, req, self.progress_for(stage.key), provider=self.provider,
                          trial_env_hook=self.trial_env_hook)
        finally:
            store.acquire_driver()  # run_job gave the driver lock back; the parent still writes
        stop = None
        if out.interrupted:
            what = "budget spent" if out.stop == "budget" else (out.reason or out.stop or "interrupted")
            stop = f"{stage.key} stopped ({what}); {self.resume_hint}" + (
                " --budget N" if out.stop == "budget" else "")
        return StageResult(out.job.id, out.trials, stop, budget_out=out.interrupted and out.stop == "budget")


__all__ = ["ChildJobs", "Stage", "StageResult", "row_cost"]
