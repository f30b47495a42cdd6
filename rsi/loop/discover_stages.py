"""Discovery's executed checks: each stage is a child `run` job of the discover job, and each
candidate's verdict is read from that job's trials.

- oracle: the reference solution passes every run (`discovery.oracle_runs`); a build failure, a
  failing oracle and a flaky one (passes, then fails) are each their own rejection;
- controls: `nop` and every known-wrong solution fail;
- probe: the generation's pass rate over K attempts, against the band.
A trial that failed on infra decides nothing: the candidate stays where it was and the discover
job ends interrupted, so `--resume` re-runs exactly those trials (run_job keeps every attempt).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rsi.core.discover import in_band
from rsi.core.trial import ErrorType, TrialStatus, is_infra
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import Progress, RunRequest, run_job
from rsi.sandbox.base import SandboxProvider
from rsi.store.tables import CandidateRow, TrialRow


@dataclass
class Stage:
    name: str  # oracle | controls | probe | reprobe
    arms: list[ArmPlan]
    cells: list[tuple[str, str, int]]  # (task name, arm id, attempts)
    task_dirs: list[Path]
    task_state: str = "candidate"  # how tasks new to the store are registered (pool tasks: "active")


@dataclass
class StageResult:
    job_id: str
    trials: list[TrialRow]
    stop: str | None = None


class StageRunner:
    """Runs (or resumes) one stage's child job within what is left of the parent's trial budget."""

    def __init__(self, ctx: WorkspaceContext, parent: str, budget: float | None, concurrency: int,
                 progress_for: Callable[[str], Progress], resume_hint: str, *,
                 provider: SandboxProvider | None = None) -> None:
        self.ctx, self.parent, self.budget, self.concurrency = ctx, parent, budget, concurrency
        self.progress_for, self.resume_hint, self.provider = progress_for, resume_hint, provider

    def _child(self, stage: str) -> str | None:
        for j in self.ctx.store.child_jobs(self.parent):
            if j.params.get("stage") == stage:
                return j.id
        return None

    def spent(self, exclude: str | None = None) -> int:
        """Trials finished by every child job of the parent (but `exclude`)."""
        n = 0
        for j in self.ctx.store.child_jobs(self.parent):
            if j.id != exclude:
                n += sum(1 for t in self.ctx.store.trials(j.id) if t.status == TrialStatus.DONE.value)
        return n

    def run(self, stage: Stage) -> StageResult:
        store = self.ctx.store
        child = self._child(stage.name)
        if child is not None:
            job = store.get_job(child)
            rerun = [t for t in store.trials(child)
                     if t.status != TrialStatus.DONE.value
                     or (is_infra(t.error_type) and t.error_type != ErrorType.CANCELLED.value)]
            if job.status == "done" and not rerun:
                return StageResult(child, store.trials(child))
        remaining = None if self.budget is None else self.budget - self.spent(exclude=child)
        if remaining is not None and remaining <= 0:
            return StageResult(child or "", store.trials(child) if child else [],
                               stop=f"budget spent ({self.budget:g} trials) before the {stage.name} stage; "
                                    f"{self.resume_hint} --budget N")
        req = RunRequest(paths=[] if child else stage.task_dirs, resume=child, concurrency=self.concurrency,
                         budget=remaining, arm_plans=None if child else stage.arms,
                         cells=None if child else stage.cells, phase="discover", parent_job=self.parent,
                         params={"stage": stage.name}, task_state=stage.task_state)
        out = run_job(self.ctx, req, self.progress_for(stage.name), provider=self.provider)
        self.ctx.store.acquire_driver()  # run_job gave the driver lock back; the parent still writes
        stop = None
        if out.interrupted:
            what = "budget spent" if out.stop == "budget" else (out.reason or out.stop or "interrupted")
            stop = f"{stage.name} stage stopped ({what}); {self.resume_hint}" + (
                " --budget N" if out.stop == "budget" else "")
        return StageResult(out.job.id, out.trials, stop)


def _by_task(trials: list[TrialRow]) -> dict[str, list[TrialRow]]:
    out: dict[str, list[TrialRow]] = defaultdict(list)
    for t in trials:
        out[t.task_name].append(t)
    return out


def _undecided(trials: list[TrialRow]) -> bool:
    return any(t.status != TrialStatus.DONE.value or is_infra(t.error_type) for t in trials)


def evaluate_oracle(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult) -> None:
    store, by = ctx.store, _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        ids = [t.id for t in ts]
        if not ts or _undecided(ts):
            continue
        if any(t.error_type == ErrorType.ENVIRONMENT_BUILD_FAILED.value for t in ts):
            _reject(ctx, job_id, c, "build_failed", ts[0].error_message or "the image did not build", ids)
        elif all(t.passed for t in ts):
            store.update_candidate(job_id, c.name, state="checked", evidence=ids)
        elif any(t.passed for t in ts):
            _reject(ctx, job_id, c, "oracle_flaky", f"passed {sum(t.passed for t in ts)} of {len(ts)} runs", ids)
        else:
            why = next((t.error_type or f"reward {t.reward}" for t in ts), "")
            _reject(ctx, job_id, c, "oracle_failed", f"failed all {len(ts)} runs ({why})", ids)


def evaluate_controls(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult) -> None:
    store, by = ctx.store, _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        ids = [t.id for t in ts]
        if not ts or _undecided(ts):
            continue
        nop = [t for t in ts if t.agent == "nop"]
        wrong = [t for t in ts if t.agent == "known_wrong" and t.passed]
        if any(t.passed for t in nop):
            _reject(ctx, job_id, c, "nop_passed", "doing nothing passed", ids)
        elif wrong:
            _reject(ctx, job_id, c, "known_wrong_passed",
                    "known-wrong solution(s) " + ", ".join(t.variant or "?" for t in wrong) + " passed", ids)
        else:
            store.update_candidate(job_id, c.name, state="valid", evidence=ids)


def probe_rate(trials: list[TrialRow]) -> tuple[float | None, int]:
    """Pass rate over finished, non-infra trials, and how many there were."""
    counted = [t for t in trials if t.status == TrialStatus.DONE.value and not is_infra(t.error_type)]
    if not counted:
        return None, 0
    return sum(t.passed for t in counted) / len(counted), len(counted)


def evaluate_probe(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult,
                   band: tuple[float, float]) -> None:
    store, by = ctx.store, _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        if not ts or _undecided(ts):
            continue
        rate, n = probe_rate(ts)
        assert rate is not None
        ids = [t.id for t in ts]
        where = in_band(rate, band)
        if where == "in":
            store.update_candidate(job_id, c.name, probe_pass_rate=rate, probe_trials=n, evidence=ids)
        elif where == "above":
            store.update_candidate(job_id, c.name, state="dropped", reason="above_band", probe_pass_rate=rate,
                                   probe_trials=n, detail=f"pass rate {rate:.2f} > {band[1]:g}", evidence=ids)
            _mark_task(ctx, c, "rejected", f"above_band: pass rate {rate:.2f}")
        else:
            _reject(ctx, job_id, c, "below_band", f"pass rate {rate:.2f} < {band[0]:g}", ids)
            store.update_candidate(job_id, c.name, probe_pass_rate=rate, probe_trials=n)


def _reject(ctx: WorkspaceContext, job_id: str, c: CandidateRow, reason: str, detail: str, ids: list[str]) -> None:
    ctx.store.update_candidate(job_id, c.name, state="rejected", reason=reason, detail=detail[:2000], evidence=ids)
    _mark_task(ctx, c, "rejected", f"{reason}: {detail}"[:500])


def _mark_task(ctx: WorkspaceContext, c: CandidateRow, state: str, reason: str) -> None:
    if c.task_digest and any(r.digest == c.task_digest for r in ctx.store.task_rows(state="candidate")):
        ctx.store.retire_task(c.task_digest, reason, state=state)
