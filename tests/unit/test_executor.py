"""The executor protocol on the local provider: work as it goes, budgets, cancel without a busy loop."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rsi.core.arm import Arm, TrialSpec, make_trial_id
from rsi.core.budget import Budget
from rsi.core.contract import Contract
from rsi.core.trial import ErrorType, TrialResult, Usage
from rsi.exec.base import TrialEvent
from rsi.exec.local import LocalExecutor
from rsi.exec.trial import Cancelled, TrialEnv
from rsi.sandbox.fake import FakeSandboxProvider

ARM = Arm(agent="oracle", generation="gen-0000")


def _spec(i: int) -> TrialSpec:
    return TrialSpec(trial_id=make_trial_id("job-x", f"t{i}", ARM, 1), job_id="job-x", task_name=f"t{i}",
                     task_digest=f"d{i}", task_path=f"/tasks/t{i}", arm=ARM, attempt=1, trial_dir=f"/tmp/t{i}")


def _result(spec: TrialSpec, **kw: object) -> TrialResult:
    return TrialResult(trial_id=spec.trial_id, job_id=spec.job_id, task=spec.task_name, task_digest=spec.task_digest,
                       attempt=spec.attempt, agent=spec.arm.agent, trial_dir=spec.trial_dir, **kw)  # type: ignore[arg-type]


def _env(tmp_path: Path) -> TrialEnv:
    contract = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}})
    return TrialEnv(provider=FakeSandboxProvider(tmp_path), contract=contract, base_image="b")


def _drain(ex: LocalExecutor, timeout: float = 10) -> list[TrialEvent]:
    events, deadline = [], time.monotonic() + timeout
    while ex.busy() and time.monotonic() < deadline:
        ev = ex.next_event(timeout=0.2)
        if ev is not None:
            events.append(ev)
    return events


def test_specs_and_events_are_plain_data() -> None:
    spec = _spec(1)
    assert TrialSpec.model_validate_json(spec.model_dump_json()) == spec
    ev = TrialEvent(kind="finished", spec=spec, result=_result(spec, passed=True))
    assert TrialEvent.model_validate_json(ev.model_dump_json()) == ev
    assert ARM.id in spec.trial_id and spec.trial_id.endswith(".1")
    assert Arm(agent="oracle", generation="gen-0000", variant="v").id != ARM.id


def test_takes_work_as_results_arrive(tmp_path: Path) -> None:
    ex = LocalExecutor(_env(tmp_path), concurrency=2, trial_fn=lambda s, e: _result(s, passed=True))
    ex.submit(_spec(0))
    finished: list[str] = []
    n = 1
    while ex.busy():
        ev = ex.next_event(timeout=1)
        if ev is not None and ev.kind == "finished":
            finished.append(ev.spec.task_name)
            if n < 4:  # a re-run decided on a result, submitted while the executor runs
                ex.submit(_spec(n))
                n += 1
    assert finished == ["t0", "t1", "t2", "t3"]
    ex.close()


def test_budget_gate_stops_starting_and_release_resumes(tmp_path: Path) -> None:
    budget = Budget(unit="trials", limit=3)
    started: list[str] = []

    def fn(spec: TrialSpec, env: TrialEnv) -> TrialResult:
        started.append(spec.task_name)
        return _result(spec, passed=True)

    ex = LocalExecutor(_env(tmp_path), concurrency=2, gate=lambda s: budget.try_start(), trial_fn=fn)
    for i in range(5):
        ex.submit(_spec(i))
    for ev in _drain(ex):
        if ev.kind == "finished":
            budget.settle(ev.result)
    assert len(started) == 3 and budget.spent == 3 and budget.exhausted
    assert [s.task_name for s in ex.blocked()] == ["t3", "t4"]
    budget.limit = 5  # `--resume JOB --budget 5`
    ex.release()
    for ev in _drain(ex):
        if ev.kind == "finished":
            budget.settle(ev.result)
    assert sorted(started) == ["t0", "t1", "t2", "t3", "t4"] and not ex.blocked()
    ex.close()


def test_infra_failures_are_not_charged_as_trials_but_tokens_are() -> None:
    b = Budget(unit="trials", limit=10)
    assert b.try_start() and b.settle(_result(_spec(0), error_type=ErrorType.SANDBOX_ERROR)) == 0
    t = Budget(unit="tokens", limit=100)
    assert t.try_start() and t.settle(_result(_spec(0), usage=Usage(prompt_tokens=60, completion_tokens=50))) == 110
    assert t.exhausted and not t.try_start()


def test_cancel_with_queued_work_returns_promptly_without_spinning(tmp_path: Path) -> None:
    env = _env(tmp_path)
    release = threading.Event()

    def slow(spec: TrialSpec, e: TrialEnv) -> TrialResult:
        while not e.cancel.wait(0.05):
            pass
        raise Cancelled("job cancelled")

    ex = LocalExecutor(env, concurrency=1, trial_fn=slow)
    for i in range(20):
        ex.submit(_spec(i))
    time.sleep(0.2)
    cpu0 = time.process_time()
    time.sleep(1.0)  # one running, 19 queued: the workers wait, they do not poll
    assert time.process_time() - cpu0 < 0.3
    t0 = time.monotonic()
    left = ex.cancel(grace=5)
    assert time.monotonic() - t0 < 2
    assert len(left) == 19
    kinds = [ev.kind for ev in _drain(ex, timeout=1)]
    assert "cancelled" in kinds and "finished" not in kinds
    release.set()


def test_an_unexpected_error_is_reported_not_swallowed(tmp_path: Path) -> None:
    def boom(spec: TrialSpec, e: TrialEnv) -> TrialResult:
        raise ValueError("bug in trial logic")

    ex = LocalExecutor(_env(tmp_path), trial_fn=boom)
    ex.submit(_spec(0))
    events = [ev for ev in _drain(ex) if ev.kind != "started"]
    assert [ev.kind for ev in events] == ["failed"]
    assert events[0].error is not None and "ValueError: bug in trial logic" in events[0].error
    ex.close()
