"""`rsi discover --reprobe`: re-run the active pool against the current generation, retire what
became easy or broken, and move each family's difficulty level (the curriculum).

The oracle runs once on every active task (a task whose oracle now fails is retired as broken);
the generation attempts each *train* task K times (p = 1 over K retires it as easy). Holdout tasks
get the oracle check only: their outcomes are sealed from discovery. A family's level goes up when
its train tasks' mean pass rate lies above the band, and down when all of them are at 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rsi.core.arm import Arm
from rsi.core.discover import next_level
from rsi.core.trial import TrialStatus, is_infra
from rsi.loop.arms import ArmPlan, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.stages import probe_rate
from rsi.loop.run import Progress, new_job_id
from rsi.loop.stages import ChildJobs, Stage
from rsi.sandbox.base import SandboxProvider
from rsi.store.tables import TrialRow


@dataclass
class ReprobeOutcome:
    job_id: str
    rates: dict[str, float | None] = field(default_factory=dict)  # task -> probe pass rate (train)
    retired: list[tuple[str, str]] = field(default_factory=list)  # (task, why)
    levels: list[tuple[str, int, int, str]] = field(default_factory=list)  # (family, old, new, why)
    interrupted: bool = False
    reason: str | None = None


def reprobe(ctx: WorkspaceContext, *, generation: str | None, attempts: int | None, band: tuple[float, float] | None,
            budget: float | None, concurrency: int, stage_progress: Callable[[str], Progress] | None = None,
            probe_agent: str = "harness", provider: SandboxProvider | None = None) -> ReprobeOutcome:
    from rsi.loop.discover.phase import _pool

    store, contract = ctx.store, ctx.contract
    gen = ctx.generation(generation)
    k = attempts or contract.discovery.probe_attempts
    band = band or contract.discovery.band
    pool = _pool(ctx)
    harness = resolve_arms(ctx, "harness", [gen.id], [])[0] if probe_agent == "harness" \
        else ArmPlan(Arm(agent=probe_agent, generation=gen.id, variant="probe"), gen)
    oracle = ArmPlan(Arm(agent="oracle", generation=gen.id), gen)
    job_id = new_job_id().replace("job-", "reprobe-")
    store.acquire_driver()
    try:
        store.create_job(job_id, agent="harness", generation=gen.id, harness_config_digest=harness.arm.config_digest,
                         attempts=k, concurrency=concurrency, task_paths=[], tasks_fingerprint="", trials=[],
                         kind="reprobe", phase="discover", params={"generation": gen.id, "attempts": k})
        store.claim_job(job_id)
        cells = [(t.name, oracle.arm.id, 1) for t in pool]
        cells += [(t.name, harness.arm.id, k) for t in pool if t.split == "train"]
        runner = ChildJobs(ctx, job_id, phase="discover", budget=budget, concurrency=concurrency,
                           progress_for=stage_progress, resume_hint="run `rsi discover --reprobe` again",
                           task_state="active", provider=provider)
        res = runner.run(Stage("reprobe", [oracle, harness], cells, [Path(t.path) for t in pool]))
        out = ReprobeOutcome(job_id=job_id, interrupted=res.stop is not None, reason=res.stop)
        by_task: dict[str, list[TrialRow]] = {}
        for t in res.trials:
            by_task.setdefault(t.task_name, []).append(t)
        for task in pool:
            ts = by_task.get(task.name, [])
            orc = [t for t in ts if t.arm_id == oracle.arm.id and t.status == TrialStatus.DONE.value
                   and not is_infra(t.error_type)]
            if orc and not any(t.passed for t in orc):
                why = f"broken: the oracle failed ({orc[0].id})"
                store.retire_task(task.digest, why)
                out.retired.append((task.name, why))
                continue
            if task.split != "train":
                continue
            rate, n = probe_rate([t for t in ts if t.arm_id == harness.arm.id])
            out.rates[task.name] = rate
            if rate is None:
                continue
            store.set_task_probe(task.digest, rate, n)
            if rate == 1.0 and n >= k:
                why = f"easy: {gen.id} passed {n} of {n}"
                store.retire_task(task.digest, why)
                out.retired.append((task.name, why))
        levels = store.curriculum()
        fams = sorted({t.family for t in pool if t.split == "train"})
        for fam in fams:
            rates = [r for t in pool if t.family == fam and (r := out.rates.get(t.name)) is not None]
            old = levels[fam].level if fam in levels else 1
            new, why = next_level(old, rates, band, contract.discovery.max_difficulty)
            if new != old or fam not in levels:
                store.set_level(fam, new, why)
            if new != old:
                out.levels.append((fam, old, new, why))
        if out.interrupted:
            store.mark_job_interrupted(job_id, out.reason or "interrupted")
        else:
            store.finish_job(job_id, "done")
        return out
    except BaseException:
        if store.get_job(job_id).status == "running":
            store.mark_job_interrupted(job_id, "the run ended unexpectedly")
        raise
    finally:
        store.release_driver()
