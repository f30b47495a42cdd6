"""`rsi run`: an ad-hoc job of every task x K attempts, N at a time, resumable.

The job and all its planned trials are written to the store before the first trial starts, so
a `kill -9` loses at most the trials in flight; `--resume JOB` sweeps the job's leftover
containers and runs only the trials that did not finish, each recorded exactly once.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rsi.core.digest import digest_obj
from rsi.core.errors import ConfigError, InputError, RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.task import Task
from rsi.core.trial import TrialResult, TrialStatus
from rsi.exec.local import EXECUTORS
from rsi.exec.trial import TrialEnv, TrialPlan
from rsi.harness.agent import AGENTS
from rsi.harness.builtin import load_agents
from rsi.loop.context import WorkspaceContext
from rsi.sandbox.base import SandboxProvider
from rsi.store.files import load_tasks
from rsi.store.tables import JobRow, TrialRow


@dataclass
class RunRequest:
    paths: list[Path]
    agent: str | None = None  # default: the resumed job's agent, else "oracle"
    attempts: int = 1
    concurrency: int = 1
    generation: str | None = None
    resume: str | None = None
    executor: str = "local"


@dataclass
class JobOutcome:
    job: JobRow
    trials: list[TrialRow]
    tasks: list[Task]
    interrupted: bool = False


class Progress:
    """What the CLI hooks into: a total, then one call per finished trial."""

    def start(self, total: int, done: int, job_id: str) -> None: ...

    def trial_started(self, plan: TrialPlan) -> None: ...

    def trial_finished(self, plan: TrialPlan, result: TrialResult) -> None: ...


def new_job_id() -> str:
    return f"job-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def tasks_fingerprint(tasks: list[Task]) -> str:
    return digest_obj(sorted((t.name, t.digest) for t in tasks))


def trial_id(job_id: str, task: str, attempt: int) -> str:
    return f"{job_id}.{task}.{attempt}"


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
    progress = progress or Progress()
    if req.attempts < 1:
        raise InputError("--attempts", None, "must be at least 1")
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    store = ctx.store
    contract = ctx.contract

    existing: JobRow | None = None
    if req.resume:
        existing = store.get_job(req.resume)
        paths = req.paths or [Path(p) for p in json.loads(existing.task_paths_json)]
    else:
        if not req.paths:
            raise InputError("PATH", None, "give at least one task directory")
        paths = req.paths
    agent_name = req.agent or (existing.agent if existing else "oracle")
    agent = AGENTS.create(agent_name)
    tasks = load_tasks(paths)
    generation: GenerationManifest = ctx.generation(req.generation or (existing.generation if existing else None))
    config: HarnessConfig | None = ctx.harness_config_for(generation) if agent_name == "harness" else None
    fingerprint = tasks_fingerprint(tasks)
    # The substrate must answer before anything is written: a refused job leaves no rows behind.
    from rsi.sandbox.base_image import resolve_base_image
    from rsi.sandbox.registry import get_provider

    provider = provider or get_provider(ctx.settings.sandbox.provider)
    provider.ping()
    base_image = resolve_base_image(ctx.settings.sandbox.base_image)
    base_id = provider.image_id(base_image)
    if base_id is None:
        raise RsiError(f"base image {base_image} is missing; build it with `rsi sandbox build-base`", exit_code=1)

    if existing is not None:
        _check_resumable(existing, agent_name, generation, fingerprint, store.live_job_ids())

    # Likewise the model endpoint: a server that will not start leaves no job behind.
    with _model_endpoint(config, ctx) as endpoint:
        store.put_tasks(tasks)

        if existing is None:
            job_id = _plan_job(ctx, req, agent_name, generation, config, tasks, paths)
        else:
            job_id = existing.id
            # Sweep this job's leftovers from the dead run, and only this job's: other jobs on the same
            # daemon (other workspaces) are not ours to judge and may be running.
            provider.gc(set(), scope={job_id})
        store.claim_job(job_id)

        by_name = {t.name: t for t in tasks}
        pending = store.unfinished_trials(job_id)
        plans = [
            TrialPlan(
                trial_id=r.id, job_id=job_id, task=by_name[r.task_name], attempt=r.attempt, trial_dir=Path(r.trial_dir)
            )
            for r in pending
        ]
        total = len(store.trials(job_id))
        progress.start(total, total - len(plans), job_id)

        interrupted = False
        env = TrialEnv(
            provider=provider,
            contract=contract,
            agent=agent,
            base_image=base_image,
            base_image_id=base_id,
            generation=generation,
            harness_config=config,
            model_endpoint=endpoint,
        )
        if trial_env_hook:
            trial_env_hook(env)

        def on_start(plan: TrialPlan) -> None:
            store.mark_running(plan.trial_id)
            progress.trial_started(plan)

        def on_result(plan: TrialPlan, result: TrialResult) -> None:
            store.record_trial(result)
            progress.trial_finished(plan, result)

        try:
            EXECUTORS.create(req.executor, req.concurrency).run(plans, env, on_start=on_start, on_result=on_result)
        except KeyboardInterrupt:
            interrupted = True
    left = store.unfinished_trials(job_id)
    store.finish_job(job_id, "interrupted" if (interrupted or left) else "done")
    return JobOutcome(job=store.get_job(job_id), trials=store.trials(job_id), tasks=tasks, interrupted=interrupted)



def _plan_job(
    ctx: WorkspaceContext,
    req: RunRequest,
    agent: str,
    generation: GenerationManifest,
    config: HarnessConfig | None,
    tasks: list[Task],
    paths: list[Path],
) -> str:
    """Write a new job and every task x attempt as a pending trial, in one transaction."""
    job_id = new_job_id()
    rows = [
        TrialRow(
            id=trial_id(job_id, t.name, a),
            job_id=job_id,
            task_name=t.name,
            task_digest=t.digest,
            generation=generation.id,
            agent=agent,
            attempt=a,
            status=TrialStatus.PENDING.value,
            trial_dir=str(ctx.ws.job_dir(job_id) / f"{t.name}.{a}"),
        )
        for t in tasks
        for a in range(1, req.attempts + 1)
    ]
    ctx.store.create_job(
        job_id,
        agent=agent,
        generation=generation.id,
        harness_config_digest=config.digest() if config else None,
        attempts=req.attempts,
        concurrency=req.concurrency,
        task_paths=[str(p.resolve()) for p in paths],
        tasks_fingerprint=tasks_fingerprint(tasks),
        trials=rows,
    )
    return job_id

def _check_resumable(
    job: JobRow, agent: str, generation: GenerationManifest, fingerprint: str, live: set[str]
) -> None:
    if job.id in live:
        raise ConfigError(f"job {job.id} is still running (pid {job.owner_pid}); stop it before resuming")
    if job.agent != agent:
        raise ConfigError(f"--resume {job.id}: the job ran agent '{job.agent}', not '{agent}'")
    if job.generation != generation.id:
        raise ConfigError(f"--resume {job.id}: the job ran generation {job.generation}, not {generation.id}")
    if job.tasks_fingerprint != fingerprint:
        raise ConfigError(f"--resume {job.id}: the tasks' contents differ from the job's (digests changed)")


@contextmanager
def _model_endpoint(config: HarnessConfig | None, ctx: WorkspaceContext) -> Iterator[str | None]:
    if config is None:
        with nullcontext():
            yield None
        return
    from rsi.models.embedded import ensure_server

    ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
    with ensure_server(config.model.endpoint, log_path=ctx.ws.logs_dir / "model-server.log") as (url, _started):
        yield url
