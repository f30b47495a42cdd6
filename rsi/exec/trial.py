"""One trial: build or reuse the image, start a fresh sandbox, let the agent act, grade.

Grading in `separate` mode commits the agent's container to a snapshot image and runs the
task's tests in a fresh container started from it, after wiping `/logs/verifier`, so nothing the
agent left running or wrote there can decide the reward. Every container is removed in
`finally`, on errors and on Ctrl-C alike. Substrate failures (`SandboxError`) are retried with
backoff and, if they persist, recorded as `sandbox_error` (infra), never blamed on the model.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from rsi.core.contract import Contract
from rsi.core.digest import merge_digests
from rsi.core.errors import RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.task import Task
from rsi.core.trial import ErrorType, Timings, TrialResult
from rsi.exec.grading import RewardError, parse_reward, tampered_paths
from rsi.harness.agent import Agent, AgentContext, AgentOutcome
from rsi.sandbox.base import (
    LABEL_JOB,
    LABEL_KIND,
    LABEL_TRIAL,
    BuildError,
    Sandbox,
    SandboxError,
    SandboxProvider,
    SandboxSpec,
)

VERIFIER_DIR = "/logs/verifier"


class Cancelled(RsiError):
    """The job is stopping (Ctrl-C / SIGTERM); the trial stays unfinished and resumes later."""


@dataclass
class TrialPlan:
    trial_id: str
    job_id: str
    task: Task
    attempt: int
    trial_dir: Path


@dataclass
class TrialEnv:
    """What every trial of a job shares."""

    provider: SandboxProvider
    contract: Contract
    agent: Agent
    base_image: str
    base_image_id: str | None = None
    generation: GenerationManifest | None = None
    harness_config: HarnessConfig | None = None
    model_endpoint: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    live: dict[str, Sandbox] = field(default_factory=dict)
    live_lock: threading.Lock = field(default_factory=threading.Lock)
    retry_wait_initial: float = 1.0

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


def _min(*vals: float | int | None) -> float:
    return min(v for v in vals if v is not None)


def sandbox_spec(task: Task, env: TrialEnv, image: str, kind: str, plan: TrialPlan) -> SandboxSpec:
    """Task limits capped by the contract (and tightened by the harness config, if any)."""
    e, lim = task.spec.environment, env.contract.limits.sandbox
    cl = env.harness_config.limits if env.harness_config else None
    network = e.network_mode != "none" and lim.network and (cl is None or cl.network is not False)
    return SandboxSpec(
        image=image,
        cpus=_min(e.cpus, lim.cpus, cl.cpus if cl else None),
        memory_mb=int(_min(e.memory_mb, lim.memory_mb, cl.memory_mb if cl else None)),
        pids=int(_min(e.pids, lim.pids, cl.pids if cl else None)),
        network=network,
        workdir=e.workdir,
        labels={LABEL_JOB: plan.job_id, LABEL_TRIAL: plan.trial_id, LABEL_KIND: kind},
    )


def agent_timeout(task: Task, env: TrialEnv) -> float:
    cl = env.harness_config.limits if env.harness_config else None
    return _min(task.spec.agent.timeout_sec, env.contract.limits.agent_timeout_sec,
                cl.agent_timeout_sec if cl else None)


def verifier_timeout(task: Task, env: TrialEnv) -> float:
    cl = env.harness_config.limits if env.harness_config else None
    return _min(task.spec.verifier.timeout_sec, env.contract.limits.verifier_timeout_sec,
                cl.verifier_timeout_sec if cl else None)


def run_trial(plan: TrialPlan, env: TrialEnv) -> TrialResult:
    """Run one trial to a result, retrying substrate failures. Raises only `Cancelled`."""
    retries = 0

    def before_sleep(state: RetryCallState) -> None:
        nonlocal retries
        retries += 1

    attempts = env.contract.grading.infra_retries + 1
    try:
        for attempt in Retrying(
            retry=retry_if_exception_type(SandboxError),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=env.retry_wait_initial, max=20),
            before_sleep=before_sleep,
            reraise=True,
        ):
            with attempt:
                if env.cancel.is_set():
                    raise Cancelled("job cancelled")
                result = _run_once(plan, env)
                result.infra_retries = retries
                return result
    except SandboxError as e:
        if env.cancel.is_set():
            raise Cancelled("job cancelled") from None
        return _result(plan, env, error_type=ErrorType.SANDBOX_ERROR, error_message=str(e), infra_retries=retries)
    raise AssertionError("unreachable")


def _result(plan: TrialPlan, env: TrialEnv, **kw: object) -> TrialResult:
    return TrialResult(
        trial_id=plan.trial_id,
        job_id=plan.job_id,
        task=plan.task.name,
        task_digest=plan.task.digest,
        attempt=plan.attempt,
        agent=env.agent.name,
        generation=env.generation.id if env.generation else None,
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
            r = _result(plan, env, error_type=ErrorType.ENVIRONMENT_BUILD_FAILED, error_message=str(e),
                        timings=timings)
            _write_result(plan, r)
            return r
        timings.build = time.monotonic() - t0

        t = time.monotonic()
        box = env.provider.start(sandbox_spec(task, env, image.tag, "trial", plan))
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
            agent_timeout_sec=agent_timeout(task, env),
            command_timeout_sec=_min(
                contract.limits.command_timeout_sec,
                env.harness_config.limits.command_timeout_sec if env.harness_config else None,
            ),
            generation=env.generation,
            harness_config=env.harness_config,
            model_endpoint=env.model_endpoint,
        )
        outcome: AgentOutcome = env.agent.run(box, ctx)
        timings.agent = time.monotonic() - t
        if env.cancel.is_set():
            raise Cancelled("job cancelled")

        t = time.monotonic()
        changed = box.changed_paths()
        protected = task.spec.protected_paths(contract.grading.protected_paths)
        tampered = tampered_paths(changed, protected, contract.grading.tamper_ignore)
        if contract.grading.verifier_mode == "separate":
            snapshot = box.snapshot({LABEL_JOB: plan.job_id, LABEL_TRIAL: plan.trial_id, LABEL_KIND: "snapshot"})
            box.stop()
            env.untrack(box)
            vbox = env.provider.start(sandbox_spec(task, env, snapshot, "verifier", plan))
            boxes.append(vbox)
            env.track(vbox)
        else:
            vbox = box
        timings.snapshot = time.monotonic() - t

        t = time.monotonic()
        reward, rewards, v_error, v_message = _verify(vbox, plan, env)
        timings.verify = time.monotonic() - t
        timings.total = time.monotonic() - t0

        error_type, message = v_error, v_message
        if error_type is None and tampered:
            error_type = ErrorType.TAMPER_DETECTED
            message = "the agent changed protected paths: " + ", ".join(tampered[:10])
        if error_type is None and outcome.error_type is not None:
            error_type, message = outcome.error_type, outcome.error_message
        if error_type is None and outcome.timed_out:
            error_type, message = ErrorType.AGENT_TIMEOUT, f"agent exceeded {ctx.agent_timeout_sec:g}s"
        passed = (
            reward is not None
            and reward >= contract.grading.pass_threshold
            and error_type not in {ErrorType.TAMPER_DETECTED, ErrorType.REWARD_INVALID, ErrorType.REWARD_MISSING,
                                   ErrorType.VERIFIER_TIMEOUT, ErrorType.MODEL_UNAVAILABLE}
        )
        r = _result(
            plan,
            env,
            reward=reward,
            rewards=rewards,
            passed=passed,
            error_type=error_type,
            error_message=message,
            tampered_paths=tampered,
            changed_paths=changed[:500],
            timings=timings,
            usage=outcome.usage,
            harness_config_digest=outcome.harness_config_digest,
            model_name=outcome.model_name,
            extra={"turns": outcome.turns},
        )
        _write_result(plan, r)
        return r
    finally:
        for b in boxes:
            try:
                b.stop()
            finally:
                env.untrack(b)
        if snapshot is not None:
            with contextlib.suppress(SandboxError):  # `rsi sandbox gc` sweeps labelled snapshots later
                env.provider.remove_image(snapshot)


def _verify(
    vbox: Sandbox, plan: TrialPlan, env: TrialEnv
) -> tuple[float | None, dict[str, float], ErrorType | None, str | None]:
    task, grading = plan.task, env.contract.grading
    root = "${SANDBOX_ROOT:-}"  # empty in a container; see sandbox/base.py
    wipe = vbox.exec(
        f'rm -rf "{root}/tests" "{root}{VERIFIER_DIR}" && mkdir -p "{root}{VERIFIER_DIR}" "{root}/tests"', timeout=60
    )
    if not wipe.ok:
        raise SandboxError(f"could not prepare the verifier sandbox: {wipe.stderr.strip()[:200]}")
    vbox.put_dir(Path(task.path) / "tests", "/tests")
    timeout = verifier_timeout(task, env)
    res = vbox.exec(f'bash "{root}/tests/test.sh"', timeout=timeout, workdir=task.spec.environment.workdir,
                    env=task.spec.verifier.env or None)
    vdir = plan.trial_dir / "verifier"
    vdir.mkdir(exist_ok=True)
    (vdir / "test-stdout.txt").write_text(res.stdout)
    (vdir / "test-stderr.txt").write_text(res.stderr)
    files = {name: vbox.get_file(f"{VERIFIER_DIR}/{name}") for name in grading.reward_files}
    for name, data in files.items():
        if data is not None:
            (vdir / name).write_bytes(data)
    if res.timed_out:
        return None, {}, ErrorType.VERIFIER_TIMEOUT, f"tests/test.sh exceeded {timeout:g}s"
    try:
        reward, rewards = parse_reward(files, grading.reward_key)
    except RewardError as e:
        return None, {}, e.error_type, str(e)
    return reward, rewards, None, None


def _write_result(plan: TrialPlan, r: TrialResult) -> None:
    (plan.trial_dir / "result.json").write_text(r.model_dump_json(indent=2))
