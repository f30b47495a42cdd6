"""rsi's models build their validators on first use (`defer_build`); pydantic's lazy build is not thread-safe, and
trials run on threads. Two threads that first use a model at once must both get that model, never its parent
class (a trial once wrote its trajectory as a bare `_Open` and its job stopped) and never a half-built one."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from pydantic import ConfigDict, Field

from rsi.core.model import RsiModel


class _Open(RsiModel):
    model_config = ConfigDict(extra="allow")


def _fresh() -> tuple[type[RsiModel], type[RsiModel]]:
    """A parent-with-extras / child pair never used yet (each call: new deferred classes)."""

    class Step(_Open):
        n: int = 0

    class Trajectory(_Open):
        steps: list[Step] = Field(default_factory=list)
        name: str = "x"

    return Step, Trajectory


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switch every microsecond, so the first uses really interleave (the race needs that)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_first_use_on_many_threads_at_once_builds_each_model_once_and_right(switch_often: None) -> None:
    wrong: list[str] = []
    for _ in range(200):  # without the lock about 1 round in 100 went wrong here
        step, traj = _fresh()
        start = threading.Barrier(8)
        got: list[str] = []

        def use(k: int, step: type[RsiModel] = step, traj: type[RsiModel] = traj,
                start: threading.Barrier = start, got: list[str] = got) -> None:
            start.wait()
            try:
                made = traj(steps=[step(n=1)]) if k % 2 else traj.model_validate({"steps": [{"n": 1}]})
                got.append(type(made).__name__)
            except Exception as e:  # noqa: BLE001 - a half-built model raises; that is what is tested
                got.append(f"{type(e).__name__}: {e}"[:120])

        threads = [threading.Thread(target=use, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wrong += [g for g in got if g != "Trajectory"]
    assert wrong == []


def test_a_rebuild_still_resolves_names_from_the_models_module() -> None:
    """The lock's extra frame must not change which namespace a forward reference resolves in."""
    step, traj = _fresh()
    assert traj.model_rebuild() is True and traj.model_rebuild() is None  # built once, then complete
    assert type(traj.model_validate({"steps": [{"n": 2}]}).steps[0]).__name__ == "Step"  # type: ignore[attr-defined]
