"""What runs on a Ray worker node: one trial from plain data, and the node's own housekeeping.

Nothing here touches the store or a shared filesystem. The driver sends the trial spec, the task
directory's files (a tar, `pack_dir`) and the trial environment's settings (`NodeEnv`); the node
unpacks the task into a scratch dir, runs the trial against *its* Docker daemon (whatever
`DOCKER_HOST` the raylet was started with), and returns the result and the trial dir's files
(size-capped) for the driver to record. Task images are built on the node and cached there by
content digest, as on one machine. This module imports no Ray at import time: the driver side
(rsi.exec.ray_exec) wraps these functions in Ray tasks.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from rsi.core.arm import TrialSpec
from rsi.core.contract import Contract
from rsi.core.errors import RsiError
from rsi.core.model import RsiModel
from rsi.core.trial import ErrorType, TrialResult
from rsi.exec.trial import Cancelled, TrialEnv, run_trial

# What a trial may send back to the driver (trajectory, verifier output, artifacts, logs).
ARTIFACT_CAP = 32 * 1024 * 1024

TrialFn = Callable[[TrialSpec, TrialEnv], TrialResult]


class NodeEnv(RsiModel):
    """The trial environment's settings as data (the live parts are made on the node)."""

    contract: dict[str, object]
    base_image: str
    model_endpoint: str | None = None
    retry_wait_initial: float = 1.0
    artifact_cap: int = ARTIFACT_CAP


class NodeOutcome(RsiModel):
    """What one trial task returns: the result (trial_dir already the driver's) and the trial's files."""

    result: TrialResult
    files: bytes = b""
    dropped: list[str] = []


def pack_dir(root: Path, cap: int | None = None) -> tuple[bytes, list[str]]:
    """The files under `root` as an uncompressed tar; past `cap` bytes of file data, files are left
    out (smallest first are kept) and named in the second value."""
    buf = io.BytesIO()
    dropped: list[str] = []
    files = sorted((p for p in root.rglob("*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: (p.stat().st_size, str(p)))
    total = 0
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in files:
            size = p.stat().st_size
            rel = str(p.relative_to(root))
            if cap is not None and total + size > cap:
                dropped.append(rel)
                continue
            total += size
            tar.add(p, arcname=rel, recursive=False)
    return buf.getvalue(), sorted(dropped)


def unpack_dir(data: bytes, dest: Path) -> None:
    """Extract a `pack_dir` tar into `dest` (made fresh); members are confined to `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if data:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(dest, filter="data")


def node_name() -> str:
    """This node's Ray id (what a trial records as its node); the host name outside Ray."""
    try:
        import ray

        # asking for the runtime context outside Ray would start a local Ray instance (seconds, and it stays)
        if ray.is_initialized():
            return str(ray.get_runtime_context().get_node_id())
    except Exception:  # noqa: BLE001 - outside a Ray worker
        pass
    return socket.gethostname()


def _provider() -> object:
    from rsi.sandbox.registry import get_provider

    return get_provider("docker")


def run_on_node(spec_json: str, task_files: bytes, node_env: NodeEnv, trial_fn: TrialFn | None = None) -> NodeOutcome:
    """Run one trial here. Raises `Cancelled` when the driver cancels it (Ray raises
    KeyboardInterrupt in this thread; every container of the trial is stopped on the way out)."""
    from rsi.harness.builtin import load_agents

    load_agents()  # the agents by name (oracle, nop, harness), as the driver has them
    spec = TrialSpec.model_validate_json(spec_json)
    scratch = Path(tempfile.mkdtemp(prefix="rsi-node-"))
    node = node_name()
    env: TrialEnv | None = None
    try:
        task_dir = scratch / "task" / Path(spec.task_path).name
        unpack_dir(task_files, task_dir)
        trial_dir = scratch / "trial"
        local = spec.model_copy(update={"task_path": str(task_dir), "trial_dir": str(trial_dir)})
        from rsi.sandbox.base import SandboxProvider

        provider: SandboxProvider = _provider()  # type: ignore[assignment]
        contract = Contract.model_validate(node_env.contract)
        env = TrialEnv(provider=provider, contract=contract, base_image=node_env.base_image,
                       model_endpoint=node_env.model_endpoint, retry_wait_initial=node_env.retry_wait_initial)
        if trial_fn is None:
            env.base_image_id = provider.image_id(node_env.base_image)
            if env.base_image_id is None:
                raise RsiError(f"node {node}: base image {node_env.base_image} is missing on its Docker daemon "
                               f"({os.environ.get('DOCKER_HOST', 'the default socket')})")
        try:
            result = (trial_fn or run_trial)(local, env)
        except KeyboardInterrupt:
            env.cancel.set()
            env.stop_all()
            raise Cancelled("job cancelled") from None
        trial_dir.mkdir(parents=True, exist_ok=True)
        files, dropped = pack_dir(trial_dir, node_env.artifact_cap)
        result = result.model_copy(update={"trial_dir": spec.trial_dir, "node": node})
        if dropped:
            result.extra["artifacts_dropped"] = dropped
        return NodeOutcome(result=result, files=files, dropped=dropped)
    finally:
        if env is not None:
            env.stop_all()
        shutil.rmtree(scratch, ignore_errors=True)


def receive(outcome: NodeOutcome) -> TrialResult:
    """On the driver: put the trial's files in its trial dir and return the result to record."""
    trial_dir = Path(outcome.result.trial_dir)
    unpack_dir(outcome.files, trial_dir)
    (trial_dir / "result.json").write_text(outcome.result.model_dump_json(indent=2))
    return outcome.result


def lost_result(spec: TrialSpec, message: str, attempts: list[dict[str, str]]) -> TrialResult:
    """A trial whose every run died with its node: recorded as infra (re-run on resume)."""
    return TrialResult(
        trial_id=spec.trial_id, job_id=spec.job_id, task=spec.task_name, task_digest=spec.task_digest,
        attempt=spec.attempt, agent=spec.arm.agent, generation=spec.arm.generation, arm_id=spec.arm.id,
        variant=spec.arm.variant, trial_dir=spec.trial_dir, error_type=ErrorType.NODE_LOST,
        error_message=message[:500], infra_retries=len(attempts), extra={"infra_attempts": attempts},
    )


# -- node housekeeping (one Ray task per node, pinned to it) --------------------------------------

class NodeReport(RsiModel):
    node: str
    host: str
    docker_host: str
    daemon: str | None = None  # an error; None: reachable
    base_image_id: str | None = None
    endpoint: str | None = None  # an error reaching the model endpoint; None: reachable or not asked
    removed_containers: list[str] = []
    removed_images: list[str] = []


def check_node(base_image: str, endpoint: str | None = None) -> NodeReport:
    """Whether this node's Docker daemon answers, holds the base image, and reaches the model endpoint."""
    rep = NodeReport(node=node_name(), host=socket.gethostname(),
                     docker_host=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        from rsi.sandbox.base import SandboxProvider

        p: SandboxProvider = _provider()  # type: ignore[assignment]
        p.ping()
        rep.base_image_id = p.image_id(base_image) if base_image else None
    except Exception as e:  # noqa: BLE001 - reported to the driver
        rep.daemon = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    if endpoint:
        import httpx

        try:
            httpx.get(endpoint.rstrip("/") + "/models", timeout=5)
        except httpx.HTTPError as e:
            rep.endpoint = f"{endpoint} unreachable from this node: {e}"[:200]
    return rep


def gc_node(live_jobs: list[str], scope: list[str] | None, driver: str | None = None) -> NodeReport:
    """Sweep this node's daemon of rsi containers and snapshots of jobs in `scope` that are not live."""
    rep = check_node("")
    if rep.daemon is None:
        from rsi.sandbox.base import SandboxProvider

        p: SandboxProvider = _provider()  # type: ignore[assignment]
        report = p.gc(set(live_jobs), scope=set(scope) if scope is not None else None, driver=driver)
        rep.removed_containers, rep.removed_images = list(report.containers), list(report.images)
    return rep
