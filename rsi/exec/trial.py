"""One trial: build or reuse the image, start a fresh sandbox, let the agent act, grade.

Grading in `separate` mode commits the agent's container to a snapshot image and runs the
task's tests in a fresh container started from it, after wiping `/logs/verifier`, so nothing the
agent left running or wrote there can decide the reward. Every container is removed in
`finally`, on errors and on Ctrl-C alike. Substrate failures (`SandboxError`) are retried with
backoff and, if they persist, recorded as `sandbox_error` (infra), never blamed on the model.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from rsi.core.arm import TrialSpec
from rsi.core.contract import Contract
from rsi.core.digest import merge_digests
from rsi.core.errors import RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import EffectiveLimits, effective_limits
from rsi.core.task import Task, resolve_env
from rsi.core.trial import RETRYABLE, ErrorType, Timings, TrialResult
from rsi.exec.evidence import gather, vouch_record
from rsi.exec.grading import grading_policy
from rsi.exec.tamper import tamper_findings
from rsi.exec.trial_record import (
    collect_artifacts,
    environment_record,
    missing_base_hint,
    save_verifier_output,
    substitutions,
)
from rsi.exec.verify import (
    VerifierRun,
    judge,
    read_reward_files,
    run_shared,
    stage_archive,
    top_entry,
    verifier_script,
    verifier_shim,
)
from rsi.harness.agent import AGENTS, Agent, AgentContext, AgentOutcome
from rsi.sandbox.base import (
    LABEL_DRIVER,
    LABEL_JOB,
    LABEL_KIND,
    LABEL_TRIAL,
    BuildError,
    Sandbox,
    SandboxBroken,
    SandboxError,
    SandboxProvider,
    SandboxSpec,
)
from rsi.store.files import load_task


class Cancelled(RsiError):
    """The job is stopping (Ctrl-C / SIGTERM); the trial stays unfinished and resumes later."""


@dataclass
class TrialPlan:
    """One trial as the worker runs it: the spec with its live parts loaded (task, config, agent)."""

    spec: TrialSpec
    task: Task
    trial_dir: Path
    agent: Agent
    generation: GenerationManifest | None
    harness_config: HarnessConfig | None
    limits: EffectiveLimits
    network_ceiling: bool = False  # whether the contract and the config allow any network

    @property
    def trial_id(self) -> str:
        return self.spec.trial_id

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def attempt(self) -> int:
        return self.spec.attempt


@dataclass
class TrialEnv:
    """What every trial a worker runs shares: the substrate, the contract, the model endpoint."""

    provider: SandboxProvider
    contract: Contract
    base_image: str
    base_image_id: str | None = None
    model_endpoint: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    live: dict[str, Sandbox] = field(default_factory=dict)
    live_lock: threading.Lock = field(default_factory=threading.Lock)
    retry_wait_initial: float = 1.0
    tasks: dict[str, Task] = field(default_factory=dict)  # task digest -> loaded task

    def track(self, sb: Sandbox) -> None:
        with self.live_lock:
            self.live[sb.id] = sb

    def untrack(self, sb: Sandbox) -> None:
        with self.live_lock:
            self.live.pop(sb.id, None)

    def stop_all(self) -> None:
        """Kill every sandbox in flight (Ctrl-C): blocked execs in workers return at once."""
        with self.live_lock:
            boxes = list(self.live.values())
        for sb in boxes:
            with contextlib.suppress(Exception):  # best effort while stopping
                sb.stop()

    def load_task(self, spec: TrialSpec) -> Task:
        task = self.tasks.get(spec.task_digest)
        if task is None:
            task = load_task(Path(spec.task_path))
            if task.digest != spec.task_digest:
                raise RsiError(
                    f"{spec.task_path}: the task changed since job {spec.job_id} was planned "
                    f"(digest {task.digest[:12]}, planned {spec.task_digest[:12]})"
                )
            self.tasks[spec.task_digest] = task
        return task

    def plan(self, spec: TrialSpec) -> TrialPlan:
        """Load what a spec names; a config is validated again against the contract."""
        task = self.load_task(spec)
        config = HarnessConfig.model_validate(spec.config) if spec.config is not None else None
        generation = GenerationManifest.model_validate(spec.generation) if spec.generation is not None else None
        return TrialPlan(
            spec=spec,
            task=task,
            trial_dir=Path(spec.trial_dir),
            agent=AGENTS.create(spec.arm.agent),
            generation=generation,
            harness_config=config,
            limits=effective_limits(task.spec, self.contract, config),
            network_ceiling=effective_limits(None, self.contract, config).network,
        )


def run_labels(plan: TrialPlan, kind: str) -> dict[str, str]:
    """What `rsi sandbox gc` and a run's own sweep find a trial's containers and snapshots by."""
    labels = {LABEL_JOB: plan.job_id, LABEL_TRIAL: plan.trial_id, LABEL_KIND: kind}
    if plan.spec.driver:
        labels[LABEL_DRIVER] = plan.spec.driver
    return labels


def sandbox_spec(plan: TrialPlan, image: str, kind: str) -> SandboxSpec:
    """The effective limits (task, capped by the contract, tightened by the config); the network the
    phase asks for (Harbor's per-phase `network_mode`), if the ceiling allows any; the task's env."""
    lim, spec = plan.limits, plan.task.spec
    phase: Literal["agent", "verifier"] = "verifier" if kind == "verifier" else "agent"
    ceiling = plan.network_ceiling
    env = resolve_env(spec.environment.env, os.environ)
    if phase == "verifier":
        env.update(resolve_env(spec.verifier.env, os.environ))
    return SandboxSpec(
        image=image,
        cpus=lim.cpus,
        memory_mb=lim.memory_mb,
        pids=lim.pids,
        network=ceiling and spec.network(phase) == "public",
        workdir=spec.environment.workdir,
        labels=run_labels(plan, kind),
        env=env,
    )


class _EndpointDown(Exception):
    """A trial whose model endpoint stayed unavailable past the client's own retries: the episode
    is void, so the whole trial is re-run after a wait, as for a substrate failure."""

    def __init__(self, result: TrialResult) -> None:
        super().__init__(result.error_message or "model endpoint unavailable")
        self.result = result


def run_trial(spec: TrialSpec, env: TrialEnv) -> TrialResult:
    """Run one trial to a result, retrying substrate failures and an unavailable model endpoint
    (`grading.infra_retries` times, with backoff). Raises only `Cancelled`.

    Every infra attempt keeps its record (`extra["infra_attempts"]`), also when a later one succeeds.
    """
    plan = env.plan(spec)
    attempts_log: list[dict[str, str]] = []

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        kind = ErrorType.MODEL_UNAVAILABLE if isinstance(exc, _EndpointDown) else ErrorType.SANDBOX_ERROR
        attempts_log.append({"error_type": kind.value, "message": str(exc)[:500]})

    attempts = env.contract.grading.infra_retries + 1
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type((SandboxError, _EndpointDown)),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=env.retry_wait_initial, max=20),
            before_sleep=before_sleep,
            sleep=_cancellable_sleep(env),
            reraise=True,
        ):
            with attempt:
                if env.cancel.is_set():
                    raise Cancelled("job cancelled")
                result = _run_once(plan, env)
                if result.error_type == ErrorType.MODEL_UNAVAILABLE and not env.cancel.is_set():
                    raise _EndpointDown(result)
                result.infra_retries = len(attempts_log)
                result.extra["infra_attempts"] = attempts_log
                return result
    except _EndpointDown as e:  # still down after every retry: recorded as infra (re-run on resume)
        if env.cancel.is_set():
            raise Cancelled("job cancelled") from None
        e.result.infra_retries = len(attempts_log)
        e.result.extra["infra_attempts"] = attempts_log
        return e.result
    except SandboxError as e:
        if env.cancel.is_set():
            raise Cancelled("job cancelled") from None
        r = _result(plan, env, error_type=ErrorType.SANDBOX_ERROR, error_message=_plain(str(e)),
                    infra_retries=len(attempts_log))
        r.extra["infra_attempts"] = attempts_log
        with contextlib.suppress(OSError):  # the evidence on disk too, as for every other outcome
            plan.trial_dir.mkdir(parents=True, exist_ok=True)
            _write_result(plan, r)
        return r
    raise AssertionError("unreachable")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _plain(text: str) -> str:
    """Without terminal colour codes (docker build output carries them)."""
    return _ANSI.sub("", text)


def _cancellable_sleep(env: TrialEnv) -> Callable[[float], None]:
    """Back-off sleeps that end at once when the job is cancelled (Ctrl-C within seconds)."""

    def sleep(seconds: float) -> None:
        if env.cancel.wait(seconds):
            raise Cancelled("job cancelled")

    return sleep


def _result(plan: TrialPlan, env: TrialEnv, **kw: object) -> TrialResult:
    return TrialResult(
        trial_id=plan.trial_id,
        job_id=plan.job_id,
        task=plan.task.name,
        task_digest=plan.task.digest,
        attempt=plan.attempt,
        agent=plan.spec.arm.agent,
        generation=plan.generation.id if plan.generation else plan.spec.arm.generation,
        arm_id=plan.spec.arm.id,
        variant=plan.spec.arm.variant,
        split=plan.task.split,
        trial_dir=str(plan.trial_dir),
        **kw,  # type: ignore[arg-type]
    )


def _run_once(plan: TrialPlan, env: TrialEnv) -> TrialResult:
    task, contract = plan.task, env.contract
    if plan.trial_dir.exists():
        shutil.rmtree(plan.trial_dir)
    plan.trial_dir.mkdir(parents=True)
    timings = Timings()
    t0 = time.monotonic()
    boxes: list[Sandbox] = []
    snapshot: str | None = None
    outcome: AgentOutcome | None = None
    policy = grading_policy(task, contract)
    # What the agent left running (its services) is kept for the verifier, in the agent's own container.
    services = policy.integrity == "snapshot" and contract.grading.agent_services == "kept"
    try:
        try:
            image = env.provider.ensure_image(
                Path(task.path) / "environment",
                merge_digests({"env": task.env_digest, "base": env.base_image_id or env.base_image}),
                build_args={"BASE_IMAGE": env.base_image},
                timeout=task.spec.environment.build_timeout_sec,
            )
        except BuildError as e:
            (plan.trial_dir / "build.log").write_text(e.log or str(e))
            timings.build = timings.total = time.monotonic() - t0
            hint = missing_base_hint(env.provider, task)
            r = _result(plan, env, error_type=ErrorType.ENVIRONMENT_BUILD_FAILED,
                        error_message=f"{e} ({hint})" if hint else str(e), timings=timings, integrity=policy.integrity)
            _write_result(plan, r)
            return r
        timings.build = time.monotonic() - t0

        t = time.monotonic()
        box = env.provider.start(sandbox_spec(plan, image.tag, "trial"))
        boxes.append(box)
        env.track(box)
        timings.start = time.monotonic() - t
        if env.cancel.is_set():
            raise Cancelled("job cancelled")

        t = time.monotonic()
        ctx = AgentContext(
            task=task,
            task_dir=Path(task.path),
            trial_dir=plan.trial_dir,
            trial_id=plan.trial_id,
            contract=contract,
            agent_timeout_sec=plan.limits.agent_timeout_sec,
            command_timeout_sec=plan.limits.command_timeout_sec,
            generation=plan.generation,
            harness_config=plan.harness_config,
            model_endpoint=env.model_endpoint,
            limits=plan.limits,
            variant=plan.spec.arm.variant,
            # a MoL summary hop may run while the sandbox is graded (rsi.harness.deferred): finished below
            extra={"defer_summary": True},
        )
        try:
            outcome = plan.agent.run(box, ctx)
            if env.cancel.is_set():
                raise Cancelled("job cancelled")
            # Freeze first: the changed-paths check and the snapshot see one filesystem, nothing
            # the agent left running acts after the check, and a container the agent's commands
            # killed is noticed here (SandboxBroken), not graded as if it were fine.
            if services:
                box.pause()  # halted, not ended: they go on (in their own container) once the snapshot is taken
            elif policy.integrity != "shared":
                box.freeze()
        except SandboxBroken as e:
            if env.cancel.is_set():
                raise Cancelled("job cancelled") from None
            if e.error_type in RETRYABLE:  # killed from outside, not by the agent: retried as any substrate failure
                raise SandboxError(str(e)) from e
            timings.agent = time.monotonic() - t
            timings.total = time.monotonic() - t0
            r = _result(plan, env, error_type=e.error_type, error_message=str(e), timings=timings,
                        integrity=policy.integrity)
            _write_result(plan, r)
            return r
        timings.agent = time.monotonic() - t
        timings.model_queue = outcome.model_queue_sec
        timings.model, timings.sandbox_exec = outcome.model_sec, outcome.exec_sec
        timings.model_prefill, timings.model_decode = outcome.model_prefill_sec, outcome.model_decode_sec
        if env.cancel.is_set():
            raise Cancelled("job cancelled")

        t = time.monotonic()
        collect_artifacts(box, task, plan.trial_dir)
        changes = box.changes()
        changed = sorted(changes)
        image_env = env.provider.image_env(image.tag)
        path_dirs = image_env.get("PATH", "").split(":")
        python_first = [*image_env.get("PYTHONPATH", "").split(":"),
                        *resolve_env(task.spec.verifier.env, os.environ).get("PYTHONPATH", "").split(":")]
        evidence = gather(box, changes, policy, path_dirs, outcome.exempt_paths)
        findings = tamper_findings(changes, policy, path_dirs=path_dirs, python_first=python_first,
                                   exempt=outcome.exempt_paths, evidence=evidence)
        vtimeout = plan.limits.verifier_timeout_sec
        tests_dir = Path(task.path) / "tests"
        # uv / uvx (and a Python, if the image lacks the one asked for) for a TB 2.x test.sh, offline; recorded
        shim = verifier_shim(tests_dir, image_env, lambda v: env.provider.verifier_python(image.tag, v))
        if policy.integrity == "shared":
            timings.snapshot = time.monotonic() - t
            t = time.monotonic()
            venv = resolve_env(task.spec.verifier.env, os.environ)
            vrun = run_shared(box, tests_dir, policy, vtimeout, venv, contract.grading.reward_files, shim)
        else:
            if policy.integrity == "declared_outputs":
                archives = {i: box.get_archive(p) for i, p in enumerate(policy.reads)}
                reads = {i: a for i, a in archives.items() if a is not None}
                present = {i: name for i, a in reads.items() if (name := top_entry(a)) is not None}
                vimage = image.tag
            else:
                reads, present = {}, {}
                tc = time.monotonic()
                snapshot = box.snapshot(run_labels(plan, "snapshot"))
                timings.commit = time.monotonic() - tc
                vimage = snapshot
            vspec = sandbox_spec(plan, vimage, "verifier")
            if services:  # its services answer the verifier on localhost; nothing of it reaches the verifier's files
                box.resume()
                vspec.network_of = box.id
            else:
                tc = time.monotonic()
                box.stop()
                env.untrack(box)
                timings.agent_remove = time.monotonic() - tc
            vspec.command = verifier_script(policy, present)
            vspec.staged = stage_archive(tests_dir, reads, shim)
            vspec.env = {**(shim.env if shim else {}), **vspec.env}
            timings.snapshot = time.monotonic() - t
            t = time.monotonic()
            vbox = env.provider.start(vspec)
            boxes.append(vbox)
            env.track(vbox)
            timings.verify_start = time.monotonic() - t
            tc = time.monotonic()
            res = vbox.wait(vtimeout)
            timings.verify_exec = time.monotonic() - tc
            vrun = VerifierRun(res, read_reward_files(vbox, contract.grading.reward_files))
            tc = time.monotonic()
            vbox.stop()  # its main process has ended, the reward is read; `finally` stops it again (a no-op)
            timings.verify_remove = time.monotonic() - tc
        timings.verify = time.monotonic() - t
        if outcome.deferred is not None:  # before the verdict: a failed summary hop is infra
            outcome.deferred.finish()
        timings.total = time.monotonic() - t0
        save_verifier_output(plan.trial_dir, vrun)
        verdict = judge(vrun, findings, outcome, contract, vtimeout, ctx.agent_timeout_sec,
                        reference=plan.spec.arm.agent == "oracle")
        r = _result(
            plan,
            env,
            reward=verdict.reward,
            rewards=verdict.rewards,
            passed=verdict.passed,
            error_type=verdict.error_type,
            error_message=verdict.message,
            tampered_paths=[p for p, _ in findings],
            tamper_reasons=[f"{p} {why}" for p, why in findings],
            changed_paths=changed[:500],
            integrity=policy.integrity,
            widened_roots=list(policy.widened),
            verifier_exit_code=None if vrun.result.timed_out else vrun.result.exit_code,
            timings=timings,
            usage=outcome.usage,
            harness_config_digest=outcome.harness_config_digest,
            model_name=outcome.model_name,
            turns=outcome.turns,
        )
        if shim is not None:
            r.extra["verifier_shim"] = shim.record
        if verdict.service_note is not None:
            r.extra["service_unreachable"] = verdict.service_note
        if evidence.records.installed or evidence.unread:
            r.extra["package_manager"] = vouch_record(changes, policy, evidence)
        subs = substitutions(env.provider, task)
        if subs:
            r.extra["base_substitution"] = subs
        r.extra["environment"] = environment_record(env.provider, task, image.tag, env.base_image)
        if services:
            r.extra["agent_services"] = ("kept: the agent's processes ran on in its own container during grading; "
                                         "the verifier ran from the snapshot in that container's network namespace")
        tenv = task.spec.environment
        if tenv.docker_image or tenv.docker_image_archive:
            named = f"docker_image {tenv.docker_image}" if tenv.docker_image else \
                f"docker_image_archive {tenv.docker_image_archive}"
            r.extra["image_source"] = f"built from environment/Dockerfile; {named} was not pulled"
        r.timings.record = time.monotonic() - t0 - timings.total
        _write_result(plan, r)
        return r
    finally:
        if outcome is not None and outcome.deferred is not None:  # every other way out: never left running
            with contextlib.suppress(Exception):
                outcome.deferred.finish()
        for b in boxes:
            try:
                b.stop()
            finally:
                env.untrack(b)
        if snapshot is not None:
            with contextlib.suppress(SandboxError):  # `rsi sandbox gc` sweeps labelled snapshots later
                env.provider.remove_image(snapshot)


def _write_result(plan: TrialPlan, r: TrialResult) -> None:
    (plan.trial_dir / "result.json").write_text(r.model_dump_json(indent=2))
