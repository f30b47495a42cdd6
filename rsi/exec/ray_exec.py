"""The `ray` executor: one Ray task per trial, on nodes that declare trial slots (DESIGN §11).

A worker node joins with `ray start --address HEAD --resources '{"rsi_slot": N}'`, started with the
environment that names its Docker daemon (`DOCKER_HOST`); each trial task asks for one `rsi_slot`
and no CPU, so the cluster's slots are its concurrency. The driver (this process) keeps at most as
many trials in flight as the cluster has slots, asks the budget gate before each submission, sends
the spec and the task's files as data, and records each result as it comes back (it alone writes
the store). A trial whose node dies is submitted again (on a node that is alive) and its lost run
is kept as an infra attempt `node_lost`; only when every allowed run died is it recorded as
`node_lost` (infra: re-run on resume). `cancel()` cancels the Ray tasks: the worker stops its
containers, and the driver sweeps every node by label afterwards.

Ray is imported only here, and this module only when the `ray` executor is chosen.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rsi.core.arm import TrialSpec
from rsi.core.errors import RsiError
from rsi.exec.base import Gate, TrialEvent
from rsi.exec.ray_node import (
    NodeEnv,
    NodeOutcome,
    NodeReport,
    TrialFn,
    check_node,
    gc_node,
    lost_result,
    pack_dir,
    receive,
    run_on_node,
)
from rsi.exec.trial import Cancelled, TrialEnv
from rsi.sandbox.base import GcReport, HostTree, ImageRef, Sandbox, SandboxError, SandboxSpec

SLOT = "rsi_slot"
START_HINT = (f"start workers with `DOCKER_HOST=... ray start --address HEAD:6379 --resources '{{\"{SLOT}\": 1}}'`")


def connect(address: str | None = None) -> None:
    """Join the Ray cluster at `address` (default: RAY_ADDRESS, else the one this machine runs) as a
    driver; never starts a cluster of its own. A one-line RsiError names the fix."""
    if ray.is_initialized():
        return
    addr = address or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        ray.init(address=addr, logging_level=logging.ERROR, log_to_driver=False, configure_logging=False,
                 namespace="rsi")
    except (ConnectionError, RuntimeError, ValueError) as e:
        text = str(e)
        if "auth" in text.lower() or "token" in text.lower() or _answers(addr):
            raise RsiError(f"cannot join the Ray cluster at {addr}: {text.splitlines()[0][:200]}; it answers, so "
                           "it is up: this driver and the cluster must use the same token auth (RAY_AUTH_MODE, "
                           "RAY_AUTH_TOKEN_PATH; Ray turns it on by itself once ~/.ray/auth_token exists)") from None
        raise RsiError(f"cannot reach the Ray cluster at {addr}: {text.splitlines()[0][:200]}; start it with "
                       f"`ray start --head` and {START_HINT}, or pass --address") from None


def _answers(addr: str) -> bool:
    """Whether something listens at `addr` (HOST:PORT): a cluster that is up but refuses this driver is most
    likely one with token auth on (or off) where this driver has it off (or on)."""
    import socket

    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        return False
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def slot_nodes() -> list[dict[str, Any]]:
    """Alive nodes that declare trial slots."""
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(SLOT, 0) > 0]


def slot_count() -> int:
    return int(sum(n["Resources"][SLOT] for n in slot_nodes()))


def _pinned(fn: Any, node_id: str) -> Any:
    return ray.remote(fn).options(num_cpus=0, max_retries=0,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))


def on_each_node(fn: Any, *args: Any, timeout: float = 120) -> list[NodeReport]:
    """Run `fn(*args)` once on every slot node; a node that does not answer in time is reported so."""
    nodes = slot_nodes()
    refs = {n["NodeID"]: _pinned(fn, n["NodeID"]).remote(*args) for n in nodes}
    out = []
    deadline = time.monotonic() + timeout
    for node_id, ref in refs.items():
        try:
            out.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except (RayError, GetTimeoutError) as e:
            out.append(NodeReport(node=node_id, host="?", docker_host="?",
                                  daemon=f"the node did not answer: {str(e).splitlines()[0][:150]}"))
    return out


class RayNodes:
    """The cluster's slot nodes, as the driver sees its substrate: is every node's daemon there, does
    every one hold the base image, and sweep them all by label. Trials never run through it."""

    name = "ray"

    def __init__(self, address: str | None = None, endpoint: str | None = None) -> None:
        connect(address)
        self.endpoint = endpoint

    def reports(self, base_image: str = "") -> list[NodeReport]:
        return on_each_node(check_node, base_image, self.endpoint)

    def ping(self) -> None:
        if not slot_nodes():
            raise SandboxError(f"the Ray cluster has no node with `{SLOT}` resources; {START_HINT}")
        bad = [r for r in self.reports() if r.daemon is not None]
        if bad:
            raise SandboxError("; ".join(f"node {r.node[:12]} ({r.host}, {r.docker_host}): {r.daemon}" for r in bad))

    def image_id(self, tag: str) -> str | None:
        """The base image's id when every slot node holds it; None (and which nodes lack it) otherwise."""
        reps = self.reports(tag)
        missing = [r for r in reps if r.base_image_id is None]
        if missing:
            names = ", ".join(f"{r.node[:12]} ({r.docker_host})" for r in missing)
            raise RsiError(f"base image {tag} is missing on node(s) {names}; load it there with "
                           f"`docker save {tag} | DOCKER_HOST=<node's daemon> docker load`, "
                           f"or run `rsi sandbox build-base` on the node", exit_code=1)
        return reps[0].base_image_id if reps else None

    def gc(self, live_jobs: set[str], *, scope: set[str] | None = None, driver: str | None = None) -> GcReport:
        report = GcReport()
        for r in on_each_node(gc_node, sorted(live_jobs), sorted(scope) if scope is not None else None, driver):
            if r.daemon is not None:
                raise SandboxError(f"node {r.node[:12]} ({r.docker_host}): {r.daemon}")
            report.containers += r.removed_containers
            report.images += r.removed_images
        return report

    def _on_nodes(self, what: str) -> RsiError:
        return RsiError(f"{what} runs on the cluster's nodes, not on the driver")

    def image_env(self, tag: str) -> dict[str, str]:
        raise self._on_nodes("image_env")

    def image_labels(self, tag: str) -> dict[str, str]:
        raise self._on_nodes("image_labels")

    def image_release(self, tag: str) -> str:
        raise self._on_nodes("image_release")

    def image_packages(self, tag: str) -> dict[str, str]:
        raise self._on_nodes("image_packages")

    def verifier_python(self, tag: str, version: str | None) -> HostTree | str:
        raise self._on_nodes("verifier_python")

    def ensure_image(self, env_dir: Path, env_digest: str, *, build_args: dict[str, str], timeout: float) -> ImageRef:
        raise self._on_nodes("ensure_image")

    def start(self, spec: SandboxSpec) -> Sandbox:
        raise self._on_nodes("start")

    def remove_image(self, tag: str) -> None:
        raise self._on_nodes("remove_image")


@dataclass
class _Flight:
    spec: TrialSpec
    lost: list[dict[str, str]] = field(default_factory=list)


class RayExecutor:
    """The executor protocol (rsi.exec.base) on a Ray cluster. Driven from the driver's thread:
    `next_event` submits what the slots and the gate allow, then waits on the Ray tasks in flight."""

    name = "ray"

    def __init__(
        self,
        env: TrialEnv,
        concurrency: int = 1,  # the cluster's slots decide; kept for the registry's signature
        *,
        gate: Gate | None = None,
        address: str | None = None,
        trial_fn: TrialFn | None = None,
    ) -> None:
        connect(address)
        self.env = env
        self._gate = gate or (lambda _spec: True)
        self._trial_fn = trial_fn
        self._node_env = NodeEnv(contract=env.contract.model_dump(mode="json"), base_image=env.base_image,
                                 model_endpoint=env.model_endpoint, retry_wait_initial=env.retry_wait_initial)
        self._runs = env.contract.grading.infra_retries + 1  # runs a trial gets before it counts as node_lost
        self._queue: deque[TrialSpec] = deque()
        self._blocked: list[TrialSpec] = []
        self._flights: dict[Any, _Flight] = {}
        self._events: deque[TrialEvent] = deque()
        self._files: dict[str, Any] = {}  # task digest -> ObjectRef of its files
        self._stopping = False
        self._slots, self._slots_at = 0, 0.0
        self._remote: Any = ray.remote(run_on_node).options(num_cpus=0, max_retries=0, resources={SLOT: 1})

    # -- protocol

    def submit(self, spec: TrialSpec) -> None:
        if self._stopping:
            raise RuntimeError("executor is cancelled")
        self._queue.append(spec)

    def next_event(self, timeout: float | None = None) -> TrialEvent | None:
        self._fill()
        if self._events:
            return self._events.popleft()
        if not self._flights:
            if self._queue and timeout:  # no slot in the cluster right now: wait for a node to join
                time.sleep(min(timeout, 1.0))
            return None
        ready, _ = ray.wait(list(self._flights), num_returns=1, timeout=timeout)
        for ref in ready:
            self._collect(ref)
        return self._events.popleft() if self._events else None

    def busy(self) -> bool:
        return bool(self._queue or self._flights or self._events)

    def blocked(self) -> list[TrialSpec]:
        return list(self._blocked)

    def release(self) -> None:
        self._queue.extendleft(reversed(self._blocked))
        self._blocked.clear()

    def cancel(self, grace: float = 10.0) -> list[TrialSpec]:
        self._stopping = True
        dropped = list(self._queue) + self._blocked
        self._queue.clear()
        self._blocked.clear()
        for ref in list(self._flights):
            ray.cancel(ref, force=False)  # KeyboardInterrupt in the worker: it stops its containers
        deadline = time.monotonic() + grace
        while self._flights and time.monotonic() < deadline:
            ready, _ = ray.wait(list(self._flights), num_returns=len(self._flights),
                                timeout=max(0.1, deadline - time.monotonic()))
            for ref in ready:
                self._collect(ref)
        stuck = [f.spec for f in self._flights.values()]
        for ref in list(self._flights):  # past the grace: kill the worker process (gc sweeps its containers)
            ray.cancel(ref, force=True)
        self._flights.clear()
        return dropped + stuck

    def close(self) -> None:
        self._stopping = True

    # -- inside

    def _capacity(self) -> int:
        now = time.monotonic()
        if now - self._slots_at > 2.0:
            self._slots, self._slots_at = slot_count(), now
        return self._slots

    def _fill(self) -> None:
        while self._queue and not self._stopping and len(self._flights) < self._capacity():
            spec = self._queue.popleft()
            if not self._gate(spec):
                self._blocked.append(spec)
                continue
            self._launch(_Flight(spec))
            self._events.append(TrialEvent(kind="started", spec=spec))

    def _launch(self, flight: _Flight) -> None:
        spec = flight.spec
        files = self._files.get(spec.task_digest)
        if files is None:
            data, _ = pack_dir(Path(spec.task_path))
            files = self._files[spec.task_digest] = ray.put(data)
        ref = self._remote.remote(spec.model_dump_json(), files, self._node_env, self._trial_fn)
        self._flights[ref] = flight

    def _collect(self, ref: Any) -> None:
        flight = self._flights.pop(ref)
        spec = flight.spec
        try:
            out: NodeOutcome = ray.get(ref)
        except TaskCancelledError:
            self._events.append(TrialEvent(kind="cancelled", spec=spec))
            return
        except RayTaskError as e:
            if self._stopping or isinstance(e.cause, (Cancelled, KeyboardInterrupt)):
                self._events.append(TrialEvent(kind="cancelled", spec=spec))
            else:
                self._events.append(TrialEvent(kind="failed", spec=spec, error=str(e)[-4000:]))
            return
        except RayError as e:  # the worker or its node died under the trial
            if self._stopping:
                self._events.append(TrialEvent(kind="cancelled", spec=spec))
                return
            flight.lost.append({"error_type": "node_lost", "message": str(e).splitlines()[0][:500]})
            if len(flight.lost) < self._runs:
                self._launch(flight)  # Ray schedules it on a node that is alive
            else:
                result = lost_result(spec, f"the trial's node died on each of {len(flight.lost)} runs", flight.lost)
                self._events.append(TrialEvent(kind="finished", spec=spec, result=result))
            return
        except Exception:  # noqa: BLE001 - unpickling or the like: a bug, reported
            self._events.append(TrialEvent(kind="failed", spec=spec, error=traceback.format_exc(limit=20)))
            return
        if flight.lost:
            r = out.result
            r.extra["infra_attempts"] = flight.lost + list(r.extra.get("infra_attempts") or [])
            r.infra_retries += len(flight.lost)
        result = receive(out)
        self._events.append(TrialEvent(kind="finished", spec=spec, result=result))
