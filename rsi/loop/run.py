"""`rsi run`: a job of every arm x task x K attempts, N at a time, resumable, within a budget.

The job, its arms and all its planned trials are written to the store before the first trial
starts, so a `kill -9` loses at most the trials in flight; `--resume JOB` sweeps the job's
leftover containers and runs what did not finish (infra failures included: their attempts stay
on record), each recorded exactly once. The job ends `interrupted`, with its reason, on Ctrl-C,
on a spent budget, after N consecutive endpoint or daemon failures (the circuit breaker), or on an
unexpected error; a `finally` makes sure it is never left `running`. On PostgreSQL a driver that
loses the job's lease (another driver took it over, or the database was away past the lease) stops
at once: nothing new starts, the trials in flight are cancelled, nothing more is recorded (the row is
the new owner's) and `run_job` raises LeaseLostError.
"""

from __future__ import annotations

import json
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from rsi.core.arm import TrialSpec
from rsi.core.budget import UNITS, Budget, BudgetUnit
from rsi.core.digest import digest_obj
from rsi.core.errors import ConfigError, InputError, RsiError
from rsi.core.task import Task
from rsi.core.trial import ErrorType, TrialResult, TrialStatus, is_infra
from rsi.exec.base import Executor, TrialEvent
from rsi.exec.grading import grading_policy
from rsi.exec.local import EXECUTORS, driver_provider
from rsi.exec.trial import TrialEnv
from rsi.exec.verifier_offline import check_verifiers_offline
from rsi.harness.agent import AGENTS
from rsi.harness.builtin import load_agents
from rsi.loop.arms import CONFIG_AGENTS, ArmPlan, arms_of_job, override_model, resolve_arms, trial_spec
from rsi.loop.context import WorkspaceContext
from rsi.loop.hooks import Progress
from rsi.sandbox.base import SandboxError, SandboxProvider
from rsi.store.files import load_tasks
from rsi.store.lease import LeaseLostError
from rsi.store.repo import Store
from rsi.store.tables import BudgetRow, JobRow, TrialRow

BREAKER_TYPES = {ErrorType.MODEL_UNAVAILABLE.value, ErrorType.SANDBOX_ERROR.value}


@dataclass
class RunRequest:
    paths: list[Path]
    agent: str | None = None  # default: the resumed job's agent, else "oracle"
    variant: str | None = None  # the arms' variant label (the `hinted` agent's `hint-<level>`)
    attempts: int = 1
    concurrency: int = 1
    generation: str | None = None
    generations: list[str] = field(default_factory=list)
    configs: list[Path] = field(default_factory=list)
    resume: str | None = None
    executor: str | None = None  # default: the workspace's (rsi.yaml `executor:`), else "local"
    budget: float | None = None
    budget_unit: str = "trials"
    # For the loop's phases: arms resolved by the caller, and which (task name, arm id, attempts)
    # cells to plan (default: every arm x task x `attempts`). `phase` labels the job.
    arm_plans: list[ArmPlan] | None = None
    cells: list[tuple[str, str, int]] | None = None
    phase: str = "run"
    parent_job: str | None = None  # the phase job (discover, expand...) this job runs trials for
    params: dict[str, object] | None = None  # what the parent job needs to find this one again
    task_state: str = "active"  # how new tasks are registered (discovery's candidates: "candidate")
    model: str | None = None  # `rsi run --model`: the served name every request of this job names
    endpoint: str | None = None  # `rsi run --endpoint`: the OpenAI-compatible base URL for this job


@dataclass
class JobOutcome:
    job: JobRow
    trials: list[TrialRow]
    tasks: list[Task]
    interrupted: bool = False
    reason: str | None = None
    stop: str | None = None  # cancelled | breaker | budget | None (a lost lease raises LeaseLostError)


def new_job_id() -> str:
    return f"job-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def tasks_fingerprint(tasks: list[Task]) -> str:
    return digest_obj(sorted((t.name, t.digest) for t in tasks))


def _check_request(req: RunRequest) -> None:
    if req.attempts < 1:
        raise InputError("--attempts", None, "must be at least 1")
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    if req.budget is not None and req.budget <= 0:
        raise InputError("--budget", None, "must be more than 0")
    given = "--model" if req.model is not None else "--endpoint" if req.endpoint is not None else None
    if given and req.agent is not None and req.agent not in CONFIG_AGENTS:
        raise InputError(given, None, f"agent '{req.agent}' calls no model; {given} is for {', '.join(CONFIG_AGENTS)}")
    if req.budget_unit not in UNITS:
        raise InputError("--unit", None, f"'{req.budget_unit}' is not one of {', '.join(UNITS)}")


def run_job(
    ctx: WorkspaceContext,
    req: RunRequest,
    progress: Progress | None = None,
    *,
    provider: SandboxProvider | None = None,
    trial_env_hook: Callable[[TrialEnv], None] | None = None,
) -> JobOutcome:
    """Plan (or resume) a job, run its unfinished trials and return every trial row."""
    load_agents()
    _check_request(req)
    if req.agent is not None:
        AGENTS.get(req.agent)  # an unknown name lists the known ones
    progress = progress or Progress()
    store, contract = ctx.store, ctx.contract
    existing = store.get_job(req.resume) if req.resume else None
    if existing is None and not req.paths:
        raise InputError("PATH", None, "give at least one task directory")
    paths = req.paths or [Path(p) for p in json.loads(existing.task_paths_json)] if existing else req.paths
    tasks = load_tasks(paths)
    for t in tasks:  # a task whose grading policy is invalid is refused before anything is written
        grading_policy(t, contract)
    # ... and one whose verifier must set itself up offline and cannot (its wheels are fetched here, once)
    check_verifiers_offline(tasks, contract)
    if existing is not None:
        arm_plans = arms_of_job(ctx, existing.id)
        agents = sorted({p.arm.agent for p in arm_plans}) or [existing.agent]
        if req.agent is not None and agents != [req.agent]:
            raise ConfigError(f"--resume {existing.id}: the job ran agent '{', '.join(agents)}', not '{req.agent}'")
        gens = sorted({p.arm.generation or "" for p in arm_plans})
        asked = sorted(set(req.generations + ([req.generation] if req.generation else [])))
        if asked and asked != gens:
            raise ConfigError(
                f"--resume {existing.id}: the job ran generation {', '.join(gens)}, not {', '.join(asked)}"
            )
        if req.configs or req.model is not None or req.endpoint is not None:
            what = "--config" if req.configs else "--model" if req.model is not None else "--endpoint"
            raise ConfigError(f"--resume {existing.id}: a resumed job keeps its arms; {what} is not allowed")
        if existing.tasks_fingerprint != tasks_fingerprint(tasks):
            raise ConfigError(f"--resume {existing.id}: the tasks' contents differ from the job's (digests changed)")
    elif req.arm_plans is not None:
        arm_plans = req.arm_plans
    else:
        gens = list(req.generations) + ([req.generation] if req.generation else [])
        agent = req.agent or "oracle"
        variant = req.variant
        if agent == "hinted" and variant is None:
            variant = "hint-3"
        if variant is not None and agent in ("hinted", "oracle-replay"):
            from rsi.harness.replay import hint_level, replay_style

            try:
                hint_level(variant) if agent == "hinted" else replay_style(variant)
            except RsiError as e:
                raise InputError("--variant", None, str(e)) from None
        arm_plans = resolve_arms(ctx, agent, gens, list(req.configs), variant=variant)
        arm_plans = override_model(ctx, arm_plans, req.model, req.endpoint)

    # The substrate must answer before anything is written: a refused job leaves no rows behind.
    from rsi.sandbox.base_image import resolve_base_image

    executor = req.executor or ctx.settings.executor.name
    # with `ray`, the slot nodes: each node's daemon must answer and hold the base image
    provider = provider or driver_provider(executor, ctx.settings.sandbox.provider, ctx.settings.executor.address)
    provider.ping()
    base_image = resolve_base_image(ctx.settings.sandbox.base_image)
    base_id = provider.image_id(base_image)
    if base_id is None:
        raise RsiError(f"base image {base_image} is missing; build it with `rsi sandbox build-base`", exit_code=1)

    store.acquire_driver()
    job_id: str | None = None
    try:
        with _model_endpoint(arm_plans, ctx) as endpoint:
            store.put_tasks(tasks, state=req.task_state)
            if existing is None:
                job_id = _plan_job(ctx, req, arm_plans, tasks, paths)
            else:
                store.claim_job(existing.id)  # refused while another process holds the job
                job_id = existing.id
                # Sweep this job's leftovers from the dead run, and only this job's.
                provider.gc(set(), scope={job_id})
            env = TrialEnv(provider=provider, contract=contract, base_image=base_image, base_image_id=base_id,
                           model_endpoint=endpoint)
            if trial_env_hook:
                trial_env_hook(env)
            budget = _budget(ctx, job_id, req)
            # this run's name on its containers: after a lost lease it sweeps its own, not the new owner's
            driver = secrets.token_hex(6)
            specs = _pending_specs(ctx, job_id, arm_plans, tasks, driver)
            total = len(store.trials(job_id))
            progress.start(total, total - len(specs), job_id)
            stop, reason = _drive(ctx, job_id, specs, env, req, budget, progress)
        left = store.unfinished_trials(job_id)
        if stop is None and left:
            stop, reason = "cancelled", "trials left unfinished"
        if stop is None:
            store.finish_job(job_id, "done")
        else:
            store.mark_job_interrupted(job_id, reason or stop)
        return JobOutcome(job=store.get_job(job_id), trials=store.trials(job_id), tasks=tasks,
                          interrupted=stop is not None, reason=reason, stop=stop)
    finally:
        if (job_id is not None and store.lease_lost(job_id) is None
                and store.get_job(job_id).status == "running"):
            store.mark_job_interrupted(job_id, "the run ended unexpectedly")
        store.release_driver()


def _budget(ctx: WorkspaceContext, job_id: str, req: RunRequest) -> Budget | None:
    store = ctx.store
    row: BudgetRow | None
    if req.budget is not None:
        unit: BudgetUnit = req.budget_unit  # type: ignore[assignment]
        row = store.set_budget(job_id, unit, req.budget)
    else:
        row = store.get_budget(job_id)
    if row is None:
        return None
    return Budget(unit=row.unit, limit=row.limit, spent=row.spent)  # type: ignore[arg-type]


def _pending_specs(ctx: WorkspaceContext, job_id: str, arm_plans: list[ArmPlan], tasks: list[Task],
                   driver: str | None = None) -> list[TrialSpec]:
    """Specs of every trial that has not finished, and of every finished one that failed on infra
    (re-runnable; its failed attempt is kept on record)."""
    store = ctx.store
    by_name = {t.name: t for t in tasks}
    by_arm = {p.arm.id: p for p in arm_plans}
    specs = []
    for row in store.trials(job_id):
        if row.status == TrialStatus.DONE.value:
            if not (is_infra(row.error_type) and row.error_type != ErrorType.CANCELLED.value):
                continue
            store.record_infra_attempt(row.id, row.error_type or "", row.error_message or "")
        plan = by_arm.get(row.arm_id or "") or (arm_plans[0] if len(arm_plans) == 1 else None)
        if plan is None:
            raise ConfigError(f"job {job_id}: trial {row.id} names arm {row.arm_id}, which the store does not hold")
        spec = trial_spec(job_id, by_name[row.task_name], plan, row.attempt, Path(row.trial_dir))
        specs.append(spec.model_copy(update={"trial_id": row.id, "driver": driver}))
    return specs


def _plan_job(
    ctx: WorkspaceContext, req: RunRequest, arm_plans: list[ArmPlan], tasks: list[Task], paths: list[Path]
) -> str:
    """Write a new job, its arms and every arm x task x attempt as a pending trial, in one transaction."""
    job_id = new_job_id()
    job_dir = ctx.ws.job_dir(job_id)
    by_name = {t.name: t for t in tasks}
    by_arm = {p.arm.id: p for p in arm_plans}
    cells = req.cells if req.cells is not None else [
        (t.name, p.arm.id, req.attempts) for p in arm_plans for t in tasks
    ]
    rows = []
    for task_name, arm_id, attempts in cells:
        t, p = by_name[task_name], by_arm[arm_id]
        for a in range(1, attempts + 1):
            trial_dir = job_dir / f"{t.name}.{p.arm.id}.{a}"
            spec = trial_spec(job_id, t, p, a, trial_dir)
            rows.append(TrialRow(
                id=spec.trial_id, job_id=job_id, task_name=t.name, task_digest=t.digest,
                generation=p.arm.generation, agent=p.arm.agent, attempt=a, status=TrialStatus.PENDING.value,
                trial_dir=str(trial_dir), arm_id=p.arm.id, variant=p.arm.variant, split=t.split,
                harness_config_digest=p.arm.config_digest,
            ))
    first = arm_plans[0].arm
    ctx.store.create_job(
        job_id,
        agent=first.agent if len({p.arm.agent for p in arm_plans}) == 1 else "mixed",
        generation=first.generation,
        harness_config_digest=first.config_digest,
        attempts=req.attempts,
        concurrency=req.concurrency,
        task_paths=[str(p.resolve()) for p in paths],
        tasks_fingerprint=tasks_fingerprint(tasks),
        trials=rows,
        phase=req.phase,  # type: ignore[arg-type]
        parent_job=req.parent_job,
        params=req.params,
        arms=[p.arm for p in arm_plans],
    )
    ctx.store.claim_job(job_id)
    return job_id


@contextmanager
def _stop_signals(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C / SIGTERM set `stop` (the driver winds down within seconds); a second one raises."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _drive(
    ctx: WorkspaceContext,
    job_id: str,
    specs: list[TrialSpec],
    env: TrialEnv,
    req: RunRequest,
    budget: Budget | None,
    progress: Progress,
) -> tuple[str | None, str | None]:
    """Feed the executor and record what comes back; return (stop kind, reason) or (None, None)."""
    store, grading = ctx.store, ctx.contract.grading
    stop_requested = threading.Event()
    name = req.executor or ctx.settings.executor.name
    opts = {"address": ctx.settings.executor.address} if name == "ray" else {}

    def gate(_spec: TrialSpec) -> bool:
        """No trial starts once the job's lease is lost, nor past the budget."""
        if store.lease_lost(job_id) is not None:
            return False
        return budget.try_start() if budget is not None else True

    ex: Executor = EXECUTORS.create(name, env, req.concurrency, gate=gate, **opts)
    stop: str | None = None
    reason: str | None = None
    failure: str | None = None
    consecutive: list[TrialResult] = []

    def record(ev: TrialEvent) -> None:
        nonlocal stop, reason, failure
        if ev.kind == "started":
            store.mark_running(ev.spec.trial_id)
            progress.trial_started(ev.spec)
            return
        if budget is not None:
            cost = budget.settle(ev.result if ev.kind == "finished" else None)
            if cost:
                store.charge_budget(job_id, cost)
        if ev.kind == "failed":
            failure = ev.error or "unknown error"
            return
        if ev.kind != "finished" or ev.result is None:
            return
        store.record_trial(ev.result)
        progress.trial_finished(ev.spec, ev.result)
        if ev.result.error_type is not None and ev.result.error_type.value in BREAKER_TYPES:
            consecutive.append(ev.result)
        elif not is_infra(ev.result.error_type):
            consecutive.clear()
        if len(consecutive) >= grading.infra_circuit_breaker and stop is None:
            last = consecutive[-1]
            stop = "breaker"
            reason = (
                f"stopped after {len(consecutive)} consecutive infra failures "
                f"({last.error_type}: {(last.error_message or '')[:200]}); fix the endpoint or the Docker daemon "
                f"(`rsi doctor`), then `rsi run --resume {job_id}`"
            )

    try:
        with _stop_signals(stop_requested):
            for spec in specs:
                ex.submit(spec)
            try:
                while ex.busy() and stop is None and failure is None:
                    if stop_requested.is_set():
                        raise KeyboardInterrupt
                    if (lost := store.lease_lost(job_id)) is not None:
                        stop, reason = "lease_lost", lost
                        break
                    ev = ex.next_event(timeout=0.5)
                    if ev is not None:
                        record(ev)
            except KeyboardInterrupt:
                stop, reason = "cancelled", f"interrupted; finish it with `rsi run --resume {job_id}`"
            except LeaseLostError as e:  # a write refused before the renewal noticed
                stop, reason = "lease_lost", e.why
            if stop is None and failure is None and ex.blocked() and store.lease_lost(job_id) is None:
                assert budget is not None
                stop = "budget"
                reason = (f"budget spent ({budget.spent:g} of {budget.limit:g} {budget.unit}); continue with "
                          f"`rsi run --resume {job_id} --budget N`")
    finally:
        if stop is None and (lost := store.lease_lost(job_id)) is not None:
            stop, reason = "lease_lost", lost
        # The job's containers are swept by label; once another driver owns the job, only the ones this
        # run started (its driver label): the new owner's carry the same job label.
        driver = specs[0].driver if specs else None
        sweep = stop != "lease_lost"

        def gc() -> None:
            if sweep or driver:
                env.provider.gc(set(), scope={job_id}, driver=None if sweep else driver)

        if stop is not None or failure is not None or ex.busy():
            ex.cancel(grace=10.0)
            with suppress(SandboxError):
                gc()  # anything a straggler made after the cancel
        while (ev := ex.next_event(timeout=0)) is not None:
            if ev.kind != "started" and stop != "lease_lost":
                try:
                    record(ev)
                except LeaseLostError as e:
                    stop, reason, sweep = "lease_lost", e.why, False
        close = getattr(ex, "close", None)
        if close is not None:
            close()
        # Every trial has ended, so none of the job's containers should exist; one whose removal
        # failed (the daemon was unreachable then, e.g. restarting) is removed here. If the daemon
        # is still away, a resume or `rsi sandbox gc` sweeps it.
        with suppress(SandboxError):
            gc()
    if stop == "lease_lost":
        raise LeaseLostError(job_id, reason or "its lease was lost", resume_command(store, job_id))
    if failure is not None:
        log = ctx.ws.logs_dir / f"{job_id}-error.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(failure)
        store.mark_job_interrupted(job_id, "internal error: " + failure.strip().splitlines()[-1][:300])
        raise RsiError(f"job {job_id} stopped on an unexpected error: {failure.strip().splitlines()[-1][:300]} "
                       f"(traceback in {log}); resume with `rsi run --resume {job_id}`")
    return stop, reason


@contextmanager
def _model_endpoint(arm_plans: list[ArmPlan], ctx: WorkspaceContext) -> Iterator[str | None]:
    configs = [p.config for p in arm_plans if p.config is not None]
    if not configs:
        yield None
        return
    for c in configs:  # an external harness must be installed at its pinned version before anything runs
        if c.external is not None:
            from rsi.harness.external.base import check_installed

            check_installed(c.external)
    endpoints = sorted({c.model.endpoint for c in configs})
    if len(endpoints) > 1:
        raise ConfigError(f"the job's harness configs name different model endpoints ({', '.join(endpoints)}); "
                          "run them in separate jobs")
    from rsi.models.adapters import check_adapter_files, ensure_adapters
    from rsi.models.embedded import ensure_server

    gens = [p.generation for p in arm_plans if p.config is not None]
    for g in gens:  # a missing adapter is an error before the job starts, not a trial outcome
        check_adapter_files(g, ctx.ws.root)
    ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
    with ensure_server(endpoints[0], log_path=ctx.ws.logs_dir / "model-server.log") as (url, _started):
        ensure_adapters(url, gens, ctx.ws.root)
        yield url


__all__ = ["JobOutcome", "Progress", "RunRequest", "resume_command", "run_job"]


def resume_command(store: Store, job_id: str) -> str:
    """The command that finishes `job_id`: a phase's trial job (discover, expand, promote, cycle) is finished by
    resuming the outermost phase job above it, a plain `rsi run` job by itself."""
    root = store.get_job(job_id)
    seen = {root.id}
    while root.parent_job and root.parent_job not in seen:
        seen.add(root.parent_job)
        root = store.get_job(root.parent_job)
    kind = root.kind if root.kind in ("discover", "expand", "promote", "cycle") else "run"
    return f"rsi {kind} --resume {root.id}"
