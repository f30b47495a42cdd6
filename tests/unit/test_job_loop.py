"""The job loop on FakeSandboxProvider: results recorded, resume runs only what did not finish.

FakeSandboxProvider runs real bash on the host with the sandbox root as a directory; the trial
runner and the oracle prefix their absolute paths with ${SANDBOX_ROOT:-}, and so do the generated
tasks' scripts, so nothing lands on the host itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.core.arm import TrialSpec
from rsi.core.errors import ConfigError
from rsi.core.trial import ErrorType, TrialResult, is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import JobOutcome, Progress, RunRequest, run_job
from rsi.report.jobs import summarize
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.tables import JobRow, TrialRow
from tests.taskgen import CountingProvider, FlakyProvider, make_task, make_tasks


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[CountingProvider]:
    inner = FakeSandboxProvider(tmp_path / "fake")
    yield CountingProvider(inner)
    assert not inner.live, f"sandboxes left running: {list(inner.live)}"
    assert not inner.snapshots, f"snapshots left behind: {list(inner.snapshots)}"


def _fast_retries(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.01


def _run(ctx: WorkspaceContext, provider: object, **req: object) -> JobOutcome:
    return run_job(ctx, RunRequest(**req), provider=provider, trial_env_hook=_fast_retries)  # type: ignore[arg-type]


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _tid(ctx: WorkspaceContext, job_id: str, task: str, attempt: int = 1) -> str:
    """The id of a job's trial of `task` (one arm) and attempt; ids include the arm."""
    (row,) = [t for t in ctx.store.trials(job_id) if t.task_name == task and t.attempt == attempt]
    return row.id


def _simulate_kill(ctx: WorkspaceContext, job_id: str, trial_ids: list[str], status: str = "pending") -> None:
    """What a kill -9 leaves: the job 'running' under a dead pid, some trials never recorded."""
    with ctx.store.session() as s:
        job = s.get(JobRow, job_id)
        job.status, job.owner_pid, job.finished_at = "running", _dead_pid(), None  # its lock died with it
        s.add(job)
        for tid in trial_ids:
            t = s.get(TrialRow, tid)
            t.status, t.reward, t.passed, t.finished_at = status, None, False, None
            s.add(t)
        s.commit()


def test_oracle_passes_and_nop_fails_and_both_are_recorded(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 2)
    ok = _run(workspace, provider, paths=[tasks], agent="oracle", attempts=2, concurrency=2)
    assert not ok.interrupted and ok.job.status == "done"
    assert [(t.task_name, t.attempt) for t in ok.trials] == [("t00", 1), ("t00", 2), ("t01", 1), ("t01", 2)]
    assert all(t.status == "done" and t.passed and t.reward == 1.0 for t in ok.trials)
    assert all(t.error_type is None for t in ok.trials)
    result = json.loads((Path(ok.trials[0].trial_dir) / "result.json").read_text())
    assert result["passed"] is True and result["trial_id"] == ok.trials[0].id
    assert (Path(ok.trials[0].trial_dir) / "verifier" / "reward.txt").read_text().strip() == "1"

    bad = _run(workspace, provider, paths=[tasks], agent="nop", attempts=1, concurrency=2)
    assert bad.job.status == "done"
    assert [(t.passed, t.reward, t.error_type) for t in bad.trials] == [(False, 0.0, None)] * 2
    stored = {r.id: r for r in workspace.store.trials(bad.job.id)}
    assert all(not r.passed and r.status == "done" for r in stored.values())
    assert summarize(bad.job, bad.trials).pass_at_1 == 0.0
    assert summarize(ok.job, ok.trials).pass_at_1 == 1.0


def test_failing_solution_and_missing_reward_are_recorded(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "wrong", solve='echo nope > "${SANDBOX_ROOT:-}/app/out.txt"\n')
    make_task(tasks, "silent", test="true\n")
    out = {t.task_name: t for t in _run(workspace, provider, paths=[tasks], agent="oracle").trials}
    assert (out["wrong"].passed, out["wrong"].reward, out["wrong"].error_type) == (False, 0.0, None)
    assert (out["silent"].passed, out["silent"].reward) == (False, None)
    assert out["silent"].error_type == ErrorType.REWARD_MISSING.value


def test_resume_reruns_only_unfinished_trials(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 4)
    first = _run(workspace, provider, paths=[tasks], agent="oracle", concurrency=2)
    job = first.job.id
    finished_before = {t.id: t.finished_at for t in first.trials}
    lost = [first.trials[1].id, first.trials[3].id]
    _simulate_kill(workspace, job, lost[:1], "pending")
    _simulate_kill(workspace, job, lost[1:], "running")  # was in flight when killed

    provider.starts = 0
    again = _run(workspace, provider, paths=[], agent="oracle", resume=job)
    assert provider.starts == 2 * len(lost), "resume must start sandboxes only for unfinished trials"
    assert again.job.id == job and again.job.status == "done" and not again.interrupted
    assert len(again.trials) == 4 and all(t.status == "done" and t.passed for t in again.trials)
    for t in again.trials:
        if t.id not in lost:
            assert t.finished_at == finished_before[t.id], f"{t.id} was re-run"


class _InterruptAfter(Progress):
    """Raises KeyboardInterrupt (Ctrl-C) in the driver once `n` trials finished."""

    def __init__(self, n: int) -> None:
        self.n = n

    def trial_finished(self, spec: TrialSpec, result: TrialResult) -> None:
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt


def test_ctrl_c_stops_the_job_and_resume_finishes_it(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 5)
    out = run_job(workspace, RunRequest(paths=[tasks], agent="oracle", concurrency=1), _InterruptAfter(1),
                  provider=provider)  # type: ignore[arg-type]
    assert out.interrupted and out.job.status == "interrupted"
    done = [t for t in out.trials if t.status == "done"]
    assert 1 <= len(done) < 5
    assert not provider.inner.live, "Ctrl-C must stop every sandbox"
    assert workspace.store.live_job_ids() == set()

    again = _run(workspace, provider, paths=[], agent="oracle", resume=out.job.id)
    assert again.job.status == "done"
    assert len(again.trials) == 5 and all(t.status == "done" and t.passed for t in again.trials)


def test_resume_refuses_another_agent(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 2)
    job = _run(workspace, provider, paths=[tasks], agent="oracle").job.id
    _simulate_kill(workspace, job, [_tid(workspace, job, "t01")])
    provider.starts = 0
    with pytest.raises(ConfigError, match="agent 'oracle', not 'nop'") as e:
        _run(workspace, provider, paths=[], agent="nop", resume=job)
    assert e.value.exit_code == 2
    assert provider.starts == 0
    assert [t.status for t in workspace.store.unfinished_trials(job)] == ["pending"]


def test_resume_refuses_another_generation(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 1)
    job = _run(workspace, provider, paths=[tasks], agent="oracle").job.id
    _simulate_kill(workspace, job, [_tid(workspace, job, "t00")])
    gen0 = workspace.store.get_generation("gen-0000")
    workspace.store.put_generation(gen0.model_copy(update={"id": "gen-0001", "parent": "gen-0000"}))
    with pytest.raises(ConfigError, match="generation gen-0000, not gen-0001"):
        _run(workspace, provider, paths=[], agent="oracle", resume=job, generation="gen-0001")
    assert len(workspace.store.unfinished_trials(job)) == 1


def test_resume_refuses_changed_task(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    (t0,) = make_tasks(tasks, 1)
    job = _run(workspace, provider, paths=[tasks], agent="oracle").job.id
    _simulate_kill(workspace, job, [_tid(workspace, job, "t00")])
    (t0 / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(ConfigError, match="digests changed"):
        _run(workspace, provider, paths=[], agent="oracle", resume=job)
    assert len(workspace.store.unfinished_trials(job)) == 1


def test_resume_refuses_a_job_whose_owner_is_alive(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 1)
    job = _run(workspace, provider, paths=[tasks], agent="oracle").job.id
    _simulate_kill(workspace, job, [_tid(workspace, job, "t00")])
    # Another process owns the job: it holds the job's lock file (what a live `rsi run` does).
    lock = workspace.store.lock_dir / f"{job}.lock"
    owner = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(lock)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="still running"):
            _run(workspace, provider, paths=[], agent="oracle", resume=job)
    finally:
        owner.kill()
        owner.wait()
    assert workspace.store.get_job(job).status != "done"


def test_sandbox_error_is_retried_then_recorded_as_infra(workspace: WorkspaceContext, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 1)
    flaky = FlakyProvider(FakeSandboxProvider(tmp_path / "fake1"), failures=1)
    t = _run(workspace, flaky, paths=[tasks], agent="oracle").trials[0]
    assert (t.passed, t.infra_retries, t.error_type) == (True, 1, None)

    broken = FlakyProvider(FakeSandboxProvider(tmp_path / "fake2"), failures=-1)
    out = _run(workspace, broken, paths=[tasks], agent="oracle")
    t = out.trials[0]
    assert (t.passed, t.error_type) == (False, ErrorType.SANDBOX_ERROR.value)
    assert t.infra_retries == workspace.contract.grading.infra_retries
    assert is_infra(t.error_type)
    s = summarize(out.job, out.trials)
    assert s.infra_errors == 1 and s.tasks[0].graded == 0, "an infra error must not count against the model"


def test_unreachable_substrate_refuses_before_writing_anything(workspace: WorkspaceContext, tmp_path: Path) -> None:
    from rsi.sandbox.base import SandboxError

    class Down(FakeSandboxProvider):
        def ping(self) -> None:
            raise SandboxError("the Docker daemon does not answer")

    tasks = make_tasks(tmp_path / "tasks", 1)
    with pytest.raises(SandboxError):
        run_job(workspace, RunRequest(paths=tasks, agent="oracle"), provider=Down(tmp_path / "fake"))
    assert workspace.store.list_jobs() == []


def test_two_generations_side_by_side_in_one_job(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 2)
    gen0 = workspace.store.get_generation("gen-0000")
    workspace.store.put_generation(gen0.model_copy(update={"id": "gen-0001", "parent": "gen-0000"}))
    out = _run(workspace, provider, paths=[tasks], agent="oracle", attempts=2, generations=["gen-0000", "gen-0001"])
    assert out.job.status == "done" and len(out.trials) == 8
    arms = {t.arm_id for t in out.trials}
    assert len(arms) == 2 and len({t.id for t in out.trials}) == 8, "trial ids must include the arm"
    s = summarize(out.job, out.trials)
    assert sorted(a.label for a in s.arms) == ["oracle gen-0000", "oracle gen-0001"]
    assert all(a.trials == 4 and a.pass_at_1 == 1.0 for a in s.arms)
    assert {a.id for a in workspace.store.arms_of_job(out.job.id)} == arms


def test_the_circuit_breaker_interrupts_instead_of_failing_every_trial(
    workspace: WorkspaceContext, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 6)
    down = FlakyProvider(FakeSandboxProvider(tmp_path / "fake1"), failures=-1)
    out = _run(workspace, down, paths=[tasks], agent="oracle")
    assert out.interrupted and out.stop == "breaker" and out.job.status == "interrupted"
    assert "consecutive infra failures" in (out.job.interrupted_reason or "")
    done = [t for t in out.trials if t.status == "done"]
    # the breaker trips at the threshold; the executor's worker runs ahead of the recording loop, so on a
    # loaded machine more (instantly failing) trials may finish before the stop lands, never every one
    breaker = workspace.contract.grading.infra_circuit_breaker
    assert breaker <= len(done) < 6, len(done)
    assert all(t.error_type == ErrorType.SANDBOX_ERROR.value for t in done)
    assert sum(t.status == "pending" for t in out.trials) == 6 - len(done)

    healthy = CountingProvider(FakeSandboxProvider(tmp_path / "fake2"))
    again = _run(workspace, healthy, paths=[], resume=out.job.id)
    assert again.job.status == "done" and all(t.passed for t in again.trials)
    rerun = workspace.store.get_trial(done[0].id)
    assert "sandbox_error" in rerun.infra_attempts_json, "an infra-failed trial's attempt stays on record"


def test_a_budget_stops_the_job_cleanly_and_resume_with_more_continues(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 4)
    out = _run(workspace, provider, paths=[tasks], agent="oracle", budget=2, budget_unit="trials")
    assert out.stop == "budget" and out.job.status == "interrupted"
    assert sum(t.status == "done" for t in out.trials) == 2
    row = workspace.store.get_budget(out.job.id)
    assert row is not None and (row.limit, row.spent) == (2, 2)
    again = _run(workspace, provider, paths=[], resume=out.job.id, budget=4)
    assert again.job.status == "done" and sum(t.status == "done" for t in again.trials) == 4
    assert workspace.store.get_budget(out.job.id).spent == 4  # type: ignore[union-attr]


def test_an_unexpected_error_ends_the_job_interrupted_with_one_line(
    workspace: WorkspaceContext, tmp_path: Path
) -> None:
    from rsi.core.errors import RsiError

    class Buggy(FakeSandboxProvider):
        def start(self, spec):  # type: ignore[no-untyped-def]
            raise ValueError("a bug, not a daemon hiccup")

    tasks = tmp_path / "tasks"
    make_tasks(tasks, 2)
    with pytest.raises(RsiError) as e:
        _run(workspace, Buggy(tmp_path / "fake"), paths=[tasks], agent="oracle")
    assert "ValueError: a bug, not a daemon hiccup" in str(e.value) and "\n" not in str(e.value)
    (job,) = workspace.store.list_jobs()
    assert job.status == "interrupted" and "internal error" in (job.interrupted_reason or "")


def test_holdout_tasks_run_but_are_marked_and_sealed(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "train-task")
    sealed = make_task(tasks, "sealed-task")
    toml = (sealed / "task.toml").read_text().replace('family = "test"', 'family = "test"\nsplit = "holdout"')
    (sealed / "task.toml").write_text(toml)
    out = _run(workspace, provider, paths=[tasks], agent="oracle")
    assert {t.task_name: t.split for t in out.trials} == {"train-task": "train", "sealed-task": "holdout"}
    assert summarize(out.job, out.trials).holdout_tasks == 1
    seen = {t.task_name for t in workspace.store.outcomes("expand")}
    assert seen == {"train-task"}, "the holdout is sealed from the loop"
    assert {t.task_name for t in workspace.store.outcomes("promote")} == {"train-task", "sealed-task"}


def test_a_second_driver_on_one_sqlite_file_is_refused_with_the_advice(
    workspace: WorkspaceContext, provider: CountingProvider, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 1)
    lock = workspace.store.driver_lock_path
    assert lock is not None
    other = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", str(lock)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="another rsi driver.*PostgreSQL"):
            _run(workspace, provider, paths=[tasks], agent="oracle")
        assert workspace.store.list_jobs() == [], "a refused driver writes nothing"
    finally:
        other.kill()
        other.wait()
    assert _run(workspace, provider, paths=[tasks], agent="oracle").job.status == "done"
