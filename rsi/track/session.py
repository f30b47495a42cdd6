"""Sending to the chosen trackers without ever holding up the loop.

Every call is queued and made on one background thread, in order, for each tracker in turn; the trackers
themselves are built there too (importing mlflow or wandb takes seconds). A tracker that raises is reported once
(`warn`) and dropped for the rest of the session: the loop never sees the exception. `close()` waits for the
queue to drain, at most `timeout` seconds, then gives up (the thread is a daemon)."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsi.core.settings import TrackingSettings
from rsi.track.base import RunRecord, Tracker
from rsi.track.registry import TRACKERS, check

log = logging.getLogger("rsi.track")

_STOP = object()


@dataclass
class _Slot:
    name: str
    factory: Callable[[], Tracker]
    tracker: Tracker | None = None
    failed: str | None = None


class TrackingSession:
    """The trackers of one command. `run(...)` reports a whole run (start, params, metrics, tags, artifacts,
    end); `start`/`record`/`end` report one in parts (a cycle's run stays open while its phases nest under it)."""

    def __init__(self, factories: dict[str, Callable[[], Tracker]], warn: Callable[[str], None] | None = None,
                 timeout: float = 120.0) -> None:
        self.slots = [_Slot(n, f) for n, f in factories.items()]
        self.warn = warn or (lambda text: log.warning(text))
        self.timeout = timeout
        self.open_runs: list[str] = []
        self._q: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="rsi-tracking", daemon=True)
        self._thread.start()

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.slots]

    def failures(self) -> dict[str, str]:
        """Tracker name -> why it was dropped (read after close())."""
        return {s.name: s.failed for s in self.slots if s.failed}

    # -- the worker -----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is _STOP:
                    return
                method, args = item
                for slot in self.slots:
                    self._call(slot, method, args)
            finally:
                self._q.task_done()

    def _call(self, slot: _Slot, method: str, args: tuple[Any, ...]) -> None:
        if slot.failed:
            return
        try:
            if slot.tracker is None:
                slot.tracker = slot.factory()
            getattr(slot.tracker, method)(*args)
        except Exception as e:  # noqa: BLE001 - a tracker never fails the loop
            slot.failed = f"{type(e).__name__}: {e}"
            self.warn(f"tracker {slot.name} failed ({slot.failed}); the run goes on without it")
            if slot.tracker is not None:
                with contextlib.suppress(Exception):
                    slot.tracker.close()

    def _put(self, method: str, *args: Any) -> None:
        self._q.put((method, args))

    # -- what callers send ----------------------------------------------------------------------
    def start(self, key: str, name: str, parent: str | None = None, tags: dict[str, str] | None = None) -> None:
        self.open_runs.append(key)
        self._put("start_run", key, name, parent, dict(tags or {}))

    def record(self, key: str, rec: RunRecord) -> None:
        if rec.params:
            self._put("log_params", key, dict(rec.params))
        if rec.metrics:
            self._put("log_metrics", key, {k: list(v) for k, v in rec.metrics.items()})
        if rec.tags:
            self._put("set_tags", key, dict(rec.tags))
        for path in rec.artifacts:
            self.artifact(key, path)

    def artifact(self, key: str, path: Path) -> None:
        if Path(path).is_file():
            self._put("log_artifact", key, Path(path))

    def end(self, key: str, status: str = "FINISHED") -> None:
        if key in self.open_runs:
            self.open_runs.remove(key)
            self._put("end_run", key, status)

    def run(self, key: str, name: str, rec: RunRecord, parent: str | None = None, status: str = "FINISHED") -> None:
        self.start(key, name, parent, rec.tags)
        self.record(key, rec)
        self.end(key, status)

    def close(self) -> None:
        """End the runs still open, close every tracker, and wait (at most `timeout` s) for all of it."""
        for key in reversed(list(self.open_runs)):
            self.end(key)
        self._put("close")
        self._q.put(_STOP)
        self._thread.join(self.timeout)
        if self._thread.is_alive():
            self.warn(f"trackers still busy after {self.timeout:g} s; left behind ({', '.join(self.names)})")


def open_session(names: list[str], settings: TrackingSettings, root: Path,
                 warn: Callable[[str], None] | None = None, source: str = "--report-to") -> TrackingSession | None:
    """A session sending to `names` (checked first: an unknown name or a missing extra is a one-line error);
    None when no tracker is named."""
    if not names:
        return None
    check(names, source)
    factories: dict[str, Callable[[], Tracker]] = {}
    for name in names:
        factory = TRACKERS.get(name)
        factories[name] = lambda f=factory: f(settings, root)  # type: ignore[misc]
    return TrackingSession(factories, warn)


__all__ = ["TrackingSession", "open_session"]
