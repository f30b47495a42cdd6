"""One conformance suite for every executor (rsi.exec.base): run against `local` in the unit tests
and against `ray` on a real cluster in tests/integration/test_ray_cluster.py.

`make(trial_fn, gate)` returns a fresh executor. The trial functions here run wherever the executor
runs trials (on a Ray worker they are shipped by value), so they share no memory with the test: they
write into the trial dir, and what they did is read from the events and from the files that came
back to the driver's trial dir.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsi.core.arm import Arm, TrialSpec, make_trial_id
from rsi.core.budget import Budget
from rsi.core.contract import Contract
from rsi.core.trial import TrialResult
from rsi.exec.base import Executor, Gate, TrialEvent
from rsi.exec.trial import Cancelled, TrialEnv

ARM = Arm(agent="oracle", generation="gen-0000")
Make = Callable[[Callable[[TrialSpec, TrialEnv], TrialResult], Gate | None], Any]


def contract() -> Contract:
    return Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}})


def spec(root: Path, i: int, job: str = "job-conf") -> TrialSpec:
    task = root / "tasks" / f"t{i}"
    task.mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text(f"task {i}\n")
    return TrialSpec(trial_id=make_trial_id(job, f"t{i}", ARM, 1), job_id=job, task_name=f"t{i}",
                     task_digest=f"d{i}", task_path=str(task), arm=ARM, attempt=1,
                     trial_dir=str(root / "trials" / f"t{i}"))


def result(s: TrialSpec, **kw: Any) -> TrialResult:
    return TrialResult(trial_id=s.trial_id, job_id=s.job_id, task=s.task_name, task_digest=s.task_digest,
                       attempt=s.attempt, agent=s.arm.agent, trial_dir=s.trial_dir, **kw)


def quick(s: TrialSpec, env: TrialEnv) -> TrialResult:
    """Reads the task's files where the executor put them, writes a file into the trial dir."""
    instruction = (Path(s.task_path) / "instruction.md").read_text()
    Path(s.trial_dir).mkdir(parents=True, exist_ok=True)
    (Path(s.trial_dir) / "out.txt").write_text(f"saw {instruction.strip()}")
    time.sleep(0.2)
    return result(s, passed=True, reward=1.0)


def slow(s: TrialSpec, env: TrialEnv) -> TrialResult:
    """Runs until cancelled."""
    while not env.cancel.wait(0.05):
        pass
    raise Cancelled("job cancelled")


def drain(ex: Executor, timeout: float = 60) -> list[TrialEvent]:
    events: list[TrialEvent] = []
    deadline = time.monotonic() + timeout
    while ex.busy() and time.monotonic() < deadline:
        ev = ex.next_event(timeout=0.2)
        if ev is not None:
            events.append(ev)
    assert not ex.busy(), "executor still busy"
    return events


def check_runs_each_trial_once_and_brings_its_files_back(make: Make, root: Path) -> None:
    ex = make(quick, None)
    specs = [spec(root, i) for i in range(4)]
    for s in specs[:2]:
        ex.submit(s)
    events, extra = [], specs[2:]
    deadline = time.monotonic() + 120
    while ex.busy() and time.monotonic() < deadline:
        ev = ex.next_event(timeout=0.2)
        if ev is None:
            continue
        events.append(ev)
        if ev.kind == "finished" and extra:  # work submitted while the executor runs
            ex.submit(extra.pop(0))
    finished = [e for e in events if e.kind == "finished"]
    assert sorted(e.spec.trial_id for e in finished) == sorted(s.trial_id for s in specs)
    assert sorted(e.spec.trial_id for e in events if e.kind == "started") == sorted(s.trial_id for s in specs)
    for e in finished:
        assert e.result is not None and e.result.passed and e.result.trial_dir == e.spec.trial_dir
        assert (Path(e.spec.trial_dir) / "out.txt").read_text() == f"saw task {e.spec.task_name[1:]}"
    ex.close()


def check_budget_gate_blocks_and_release_resumes(make: Make, root: Path) -> None:
    budget = Budget(unit="trials", limit=3)
    ex = make(quick, lambda _s: budget.try_start())
    for i in range(5):
        ex.submit(spec(root, i))
    for ev in drain(ex):
        if ev.kind == "finished":
            budget.settle(ev.result)
    assert budget.spent == 3 and len(ex.blocked()) == 2
    budget.limit = 5
    ex.release()
    done = [ev for ev in drain(ex) if ev.kind == "finished"]
    assert len(done) == 2 and not ex.blocked()
    ex.close()


def check_cancel_stops_running_and_queued_trials(make: Make, root: Path) -> None:
    ex = make(slow, None)
    specs = [spec(root, i) for i in range(6)]
    for s in specs:
        ex.submit(s)
    started: list[TrialEvent] = []
    deadline = time.monotonic() + 60
    while len(started) < 2 and time.monotonic() < deadline:
        ev = ex.next_event(timeout=0.2)
        if ev is not None and ev.kind == "started":
            started.append(ev)
    time.sleep(1.0)
    t0 = time.monotonic()
    left = ex.cancel(grace=15)
    assert time.monotonic() - t0 < 16
    ended = [ev for ev in iter(lambda: ex.next_event(timeout=0), None) if ev.kind in ("cancelled", "finished")]
    assert not [e for e in ended if e.kind == "finished"]
    assert {s.trial_id for s in left} | {e.spec.trial_id for e in ended} == {s.trial_id for s in specs}
    assert not ex.busy()
