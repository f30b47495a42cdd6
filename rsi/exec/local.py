"""The `local` executor: N trials at a time on threads of this process.

Workers are daemon threads that block on a condition variable (no polling), take the next queued
spec the gate allows, run it and post events to a queue the driver reads. `cancel()` sets the
environment's cancel flag, kills every sandbox in flight (blocked execs return at once) and waits a
bounded time for workers to unwind; a worker stuck in a model call cannot keep the process alive.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable

from rsi.core.arm import TrialSpec
from rsi.core.registry import Registry
from rsi.core.trial import TrialResult
from rsi.exec.base import Executor, Gate, TrialEvent
from rsi.exec.trial import Cancelled, TrialEnv, run_trial
from rsi.sandbox.base import SandboxProvider

TrialFn = Callable[[TrialSpec, TrialEnv], TrialResult]


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        env: TrialEnv,
        concurrency: int = 1,
        *,
        gate: Gate | None = None,
        trial_fn: TrialFn = run_trial,
    ) -> None:
        self.env = env
        self.concurrency = max(1, concurrency)
        self._gate = gate or (lambda _spec: True)
        self._trial_fn = trial_fn
        self._cv = threading.Condition()
        self._queue: deque[TrialSpec] = deque()
        self._blocked: list[TrialSpec] = []
        self._running: dict[str, TrialSpec] = {}
        self._events: queue.Queue[TrialEvent] = queue.Queue()
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._worker, name=f"rsi-trial-{i}", daemon=True) for i in range(self.concurrency)
        ]
        for t in self._threads:
            t.start()

    # -- protocol

    def submit(self, spec: TrialSpec) -> None:
        with self._cv:
            if self._stopping:
                raise RuntimeError("executor is cancelled")
            self._queue.append(spec)
            self._cv.notify()

    def next_event(self, timeout: float | None = None) -> TrialEvent | None:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None

    def busy(self) -> bool:
        with self._cv:
            return bool(self._queue or self._running) or not self._events.empty()

    def blocked(self) -> list[TrialSpec]:
        with self._cv:
            return list(self._blocked)

    def release(self) -> None:
        with self._cv:
            self._queue.extendleft(reversed(self._blocked))
            self._blocked.clear()
            self._cv.notify_all()

    def cancel(self, grace: float = 10.0) -> list[TrialSpec]:
        with self._cv:
            self._stopping = True
            dropped = list(self._queue) + self._blocked
            self._queue.clear()
            self._blocked.clear()
            self._cv.notify_all()
        self.env.cancel.set()
        self.env.stop_all()
        deadline = time.monotonic() + grace
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._cv:
            stuck = list(self._running.values())
        return dropped + stuck

    def close(self) -> None:
        """Stop the idle workers (after the last event was read)."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()

    # -- workers

    def _take(self) -> TrialSpec | None:
        with self._cv:
            while True:
                if self._stopping:
                    return None
                while self._queue:
                    spec = self._queue.popleft()
                    if self._gate(spec):
                        self._running[spec.trial_id] = spec
                        return spec
                    self._blocked.append(spec)
                self._cv.wait()

    def _worker(self) -> None:
        while True:
            spec = self._take()
            if spec is None:
                return
            self._events.put(TrialEvent(kind="started", spec=spec))
            try:
                result = self._trial_fn(spec, self.env)
                event = TrialEvent(kind="finished", spec=spec, result=result)
            except Cancelled:
                event = TrialEvent(kind="cancelled", spec=spec)
            except BaseException:  # noqa: BLE001 - a bug in trial logic: reported, never swallowed
                event = TrialEvent(kind="failed", spec=spec, error=traceback.format_exc(limit=20))
            with self._cv:  # event first, then not running: busy() never misses the last event
                self._events.put(event)
                self._running.pop(spec.trial_id, None)


def _ray(env: TrialEnv, concurrency: int = 1, **kw: object) -> Executor:
    from rsi.exec.ray_exec import RayExecutor  # Ray is imported only when chosen

    return RayExecutor(env, concurrency, **kw)  # type: ignore[arg-type]


EXECUTORS: Registry[Executor] = Registry("executor")
EXECUTORS.add("local", LocalExecutor)
EXECUTORS.add("ray", _ray)


def driver_provider(executor: str, sandbox: str, address: str | None = None) -> SandboxProvider:
    """What the driver checks and sweeps before and after a job: the local sandbox provider, or for
    `ray` every slot node of the cluster (each through its own Docker daemon)."""
    EXECUTORS.get(executor)  # an unknown name lists the known ones
    if executor == "ray":
        from rsi.exec.ray_exec import RayNodes

        return RayNodes(address)
    from rsi.sandbox.registry import get_provider

    return get_provider(sandbox)
