"""The tracker interface: runs (a cycle, a nested run per phase) that take params, stepped metrics, tags and
artifacts. Plain data in, so a tracker needs nothing from the loop; `FakeTracker` records what it was given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

Param = str | int | float | bool
Point = tuple[int, float]  # (step, value)


@dataclass
class RunRecord:
    """What one run (a cycle, or one of its phases) reports: params once, metrics as (step, value) points."""

    params: dict[str, Param] = field(default_factory=dict)
    metrics: dict[str, list[Point]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)

    def metric(self, name: str, value: float | int | bool | None, step: int = 0) -> None:
        """Add one point; None (a figure not measured) is left out, never written as 0."""
        if value is None:
            return
        self.metrics.setdefault(name, []).append((step, float(value)))

    def curve(self, name: str, values: Sequence[float | int | None], start: int = 1) -> None:
        """A per-step series (training loss, KL): step i is the i-th value, counted from `start`."""
        for i, v in enumerate(values, start):
            self.metric(name, v, i)


class Tracker(Protocol):
    """One backend. `key` names a run in this session (the cycle job id, or `<cycle>/<phase>`); `parent` the key
    of the run it nests under. Calls come from one thread, in order."""

    name: str

    def start_run(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> None: ...

    def log_params(self, key: str, params: dict[str, Param]) -> None: ...

    def log_metrics(self, key: str, metrics: dict[str, list[Point]]) -> None: ...

    def set_tags(self, key: str, tags: dict[str, str]) -> None: ...

    def log_artifact(self, key: str, path: Path) -> None: ...

    def end_run(self, key: str, status: str) -> None: ...

    def close(self) -> None: ...


@dataclass
class FakeTracker:
    """Records every call as (method, key, payload); `fail_on` names a method that raises (a tracker that breaks
    mid-run), `delay` seconds each call sleeps (a slow one)."""

    name: str = "fake"
    calls: list[tuple[str, str, object]] = field(default_factory=list)
    fail_on: str | None = None
    delay: float = 0.0
    closed: bool = False

    def _call(self, method: str, key: str, payload: object) -> None:
        if self.delay:
            import time

            time.sleep(self.delay)
        if method == self.fail_on:
            raise RuntimeError(f"{self.name}: {method} failed (on purpose)")
        self.calls.append((method, key, payload))

    def start_run(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> None:
        self._call("start_run", key, {"name": name, "parent": parent, "tags": dict(tags)})

    def log_params(self, key: str, params: dict[str, Param]) -> None:
        self._call("log_params", key, dict(params))

    def log_metrics(self, key: str, metrics: dict[str, list[Point]]) -> None:
        self._call("log_metrics", key, {k: list(v) for k, v in metrics.items()})

    def set_tags(self, key: str, tags: dict[str, str]) -> None:
        self._call("set_tags", key, dict(tags))

    def log_artifact(self, key: str, path: Path) -> None:
        self._call("log_artifact", key, path)

    def end_run(self, key: str, status: str) -> None:
        self._call("end_run", key, status)

    def close(self) -> None:
        self.closed = True

    # what a test asks
    def of(self, method: str, key: str | None = None) -> list[object]:
        return [p for m, k, p in self.calls if m == method and (key is None or k == key)]

    def merged(self, method: str, key: str) -> dict[str, object]:
        out: dict[str, object] = {}
        for p in self.of(method, key):
            out.update(p)  # type: ignore[call-overload]
        return out


__all__ = ["FakeTracker", "Param", "Point", "RunRecord", "Tracker"]
