"""One submitted engine request (`Job`) and the errors the engine answers requests with."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rsi.core.errors import RsiError
from rsi.models.server.decode import GenRequest, GenResult


class EngineError(RsiError):
    """A request the engine refuses; `status` is the HTTP code the server answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Cancelled(EngineError):
    def __init__(self) -> None:
        super().__init__("request cancelled", status=499)


class Job:
    """One submitted request: wait for it, stream it, or cancel it."""

    def __init__(self, request: GenRequest, on_delta: Callable[[str], object] | None = None) -> None:
        self.request = request
        self.on_delta = on_delta
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.result: GenResult | None = None
        self.error: BaseException | None = None
        self.queued_at = time.monotonic()
        self._callbacks: list[Callable[[Job], object]] = []
        self._cb_lock = threading.Lock()
        self.wake: Callable[[], None] = lambda: None

    def cancel(self) -> None:
        """Give the request up: it leaves the queue or the batch at once and its answer is Cancelled."""
        self.cancelled.set()
        self.wake()

    def add_done_callback(self, fn: Callable[[Job], object]) -> None:
        with self._cb_lock:
            if not self.done.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def _resolve(self, result: GenResult | None = None, error: BaseException | None = None) -> None:
        with self._cb_lock:
            if self.done.is_set():
                return
            self.result, self.error = result, error
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)

    def wait(self, timeout: float | None = None) -> GenResult:
        if not self.done.wait(timeout):
            raise TimeoutError("generation did not finish in time")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


__all__ = ["Cancelled", "EngineError", "Job"]
