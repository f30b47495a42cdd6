"""A driver that loses its job's lease stops (rsi.store.lease, rsi.loop.run).

The lease's SQL runs on SQLite too (the database's clock has a SQLite form), so these tests give a
SQLite store a `JobLeases`, as a PostgreSQL store has, and take the lease away by writing the row
the way another driver would. tests/integration/test_postgres.py does the same on a real server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from rsi.core.arm import TrialSpec
from rsi.core.trial import TrialResult
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import Progress, RunRequest, run_job
from rsi.sandbox.base import LABEL_DRIVER, LABEL_JOB, SandboxSpec
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.lease import JobLeases, LeaseLostError
from rsi.store.repo import Store
from rsi.store.tables import TrialRow
from tests.taskgen import R, make_tasks

SLOW_OK = f'sleep 0.3; echo ok > "{R}/app/out.txt"\n'


def _job(store: Store, job_id: str = "job-1", trials: int = 2) -> str:
    rows = [TrialRow(id=f"{job_id}.t{i}", job_id=job_id, task_name=f"t{i}", task_digest="d", agent="oracle",
                     attempt=1, status="pending", trial_dir="/tmp/x") for i in range(trials)]
    store.create_job(job_id, agent="oracle", generation=None, harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=[], tasks_fingerprint="f", trials=rows)
    return job_id


def _steal(store: Store, job_id: str, owner: str = "pid 1 on elsewhere (abc123)") -> None:
    """What a second driver does once this one's lease ran out: take the row's lease."""
    with store.engine.begin() as c:
        c.execute(text("UPDATE jobs SET lease_owner = :o, lease_until = lease_until + 1000 WHERE id = :id"),
                  {"o": owner, "id": job_id})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rsi.db'}")
    s.leases = JobLeases(s.engine, ttl=30)
    yield s
    s.close()


def test_renewal_that_finds_the_lease_taken_marks_it_lost_and_every_write_is_refused(store: Store) -> None:
    job_id = _job(store)
    store.claim_job(job_id)
    assert store.leases is not None and store.leases.holds(job_id)
    store.leases.renew()
    assert store.lease_lost(job_id) is None

    _steal(store, job_id)
    store.leases.renew()
    why = store.lease_lost(job_id)
    assert why is not None and "another driver took it over" in why and "elsewhere" in why
    assert not store.leases.holds(job_id)
    for write in (lambda: store.mark_running(f"{job_id}.t0"),
                  lambda: store.record_infra_attempt(f"{job_id}.t0", "sandbox_error", "x"),
                  lambda: store.finish_job(job_id, "done"),
                  lambda: store.mark_job_interrupted(job_id, "x")):
        with pytest.raises(LeaseLostError, match=f"job {job_id} stopped: another driver took it over"):
            write()
    store.leases.give_back(job_id)  # a lost lease is the new owner's: giving back leaves it alone
    row = store.get_job(job_id)
    assert row.status == "running" and row.lease_owner == "pid 1 on elsewhere (abc123)"
    assert all(t.status == "pending" and not t.infra_attempts for t in store.trials(job_id))


def test_a_write_finds_the_lease_taken_before_renewal_does(store: Store) -> None:
    job_id = _job(store)
    store.claim_job(job_id)
    _steal(store, job_id)
    with pytest.raises(LeaseLostError) as e:
        store.mark_running(f"{job_id}.t0")
    assert "--resume" in str(e.value) and "\n" not in str(e.value)
    assert store.lease_lost(job_id) is not None
    assert store.get_trial(f"{job_id}.t0").status == "pending"


def test_transient_database_errors_are_retried_within_the_lease(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = _job(store)
    store.claim_job(job_id)
    leases = store.leases
    assert leases is not None
    real, calls = leases.renew, []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("UPDATE jobs", {}, Exception("connection refused"))
        real()

    monkeypatch.setattr(leases, "renew", flaky)
    leases.renew_or_give_up()
    assert len(calls) == 3 and store.lease_lost(job_id) is None and leases.holds(job_id)


def test_a_database_away_past_the_lease_loses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(f"sqlite:///{tmp_path / 'rsi.db'}")
    leases = store.leases = JobLeases(store.engine, ttl=0.6)
    try:
        job_id = _job(store)
        store.claim_job(job_id)

        def down() -> None:
            raise OperationalError("UPDATE jobs", {}, Exception("could not connect to server"))

        monkeypatch.setattr(leases, "renew", down)
        leases.renew_or_give_up()  # retries until the lease would have run out, then gives up
        why = store.lease_lost(job_id)
        assert why is not None and "unreachable for longer than the lease" in why
        with pytest.raises(LeaseLostError, match="unreachable"):
            store.mark_running(f"{job_id}.t0")
    finally:
        store.close()


class _StealAfter(Progress):
    """Another driver takes the job over once `n` trials have finished here."""

    def __init__(self, store: Store, n: int) -> None:
        self.store, self.n, self.finished = store, n, 0
        self.job_id = ""
        self.stolen = threading.Event()

    def start(self, total: int, done: int, job_id: str) -> None:
        self.job_id = job_id

    def trial_finished(self, spec: TrialSpec, result: TrialResult) -> None:
        self.finished += 1
        if self.finished == self.n:
            _steal(self.store, self.job_id)
            self.stolen.set()
            if self.provider is not None:  # a container of ours left behind, and one of the new owner's trials
                image = next(iter(self.provider.images))
                self.ours = self.provider.start(SandboxSpec(image=image, labels={
                    LABEL_JOB: self.job_id, LABEL_DRIVER: spec.driver or ""})).id
                self.theirs = self.provider.start(SandboxSpec(image=image, labels={
                    LABEL_JOB: self.job_id, LABEL_DRIVER: "the-new-owner"})).id

    provider: FakeSandboxProvider | None = None
    ours = theirs = ""


def test_a_driver_whose_job_is_taken_over_stops_and_records_nothing_more(
    workspace: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path
) -> None:
    store = workspace.store
    store.leases = JobLeases(store.engine, ttl=3)
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 8, solve=SLOW_OK)
    progress = _StealAfter(store, 2)
    progress.provider = provider
    with pytest.raises(LeaseLostError) as e:
        run_job(workspace, RunRequest(paths=[tasks], agent="oracle", concurrency=2), progress, provider=provider)
    job_id = progress.job_id
    msg = str(e.value)
    assert msg.startswith(f"job {job_id} stopped: another driver took it over")
    assert f"`rsi run --resume {job_id}` from the driver that owns it" in msg and "\n" not in msg
    # nothing recorded after the steal: the two finished trials only; the row is the new owner's
    trials = store.trials(job_id)
    assert sum(t.status == "done" for t in trials) == 2
    job = store.get_job(job_id)
    assert job.status == "running" and job.lease_owner == "pid 1 on elsewhere (abc123)"
    # the trials in flight are cancelled and what this driver started is swept; the new owner's trial is left
    assert progress.ours and set(provider.live) == {progress.theirs}, provider.live
    provider.live[progress.theirs].stop()  # the new owner's to remove


def test_a_driver_whose_database_stays_away_stops_with_that_reason(
    workspace: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path
) -> None:
    store = workspace.store
    leases = store.leases = JobLeases(store.engine, ttl=1.5)
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 20, solve=SLOW_OK)
    progress = _StealAfter(store, 10**6)

    class _Away(Progress):
        def start(self, total: int, done: int, job_id: str) -> None:
            progress.start(total, done, job_id)

        def trial_finished(self, spec: TrialSpec, result: TrialResult) -> None:
            def down() -> None:  # renewal cannot reach the database from now on
                raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))
            leases.renew = down  # type: ignore[method-assign]

    with pytest.raises(LeaseLostError, match="unreachable for longer than the lease"):
        run_job(workspace, RunRequest(paths=[tasks], agent="oracle", concurrency=1), _Away(), provider=provider)
    trials = store.trials(progress.job_id)
    assert 1 <= sum(t.status == "done" for t in trials) < 20
    assert not provider.live


def test_a_sqlite_store_never_reports_a_lost_lease(workspace: WorkspaceContext) -> None:
    assert workspace.store.leases is None and workspace.store.lease_lost("job-x") is None


def test_rsi_run_exits_non_zero_with_one_line_when_the_lease_is_lost(
    workspace: WorkspaceContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    import rsi.loop.run
    from rsi.cli.app import app

    def lost(*_a: object, **_k: object) -> None:
        raise LeaseLostError("job-9", "another driver took it over (driver pid 7 on b, lease 29s left)")

    monkeypatch.setattr(rsi.loop.run, "run_job", lost)
    r = CliRunner().invoke(app, ["-w", str(workspace.ws.root), "run", str(tmp_path), "--agent", "oracle"],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 1
    (line,) = r.output.strip().splitlines()
    assert line.startswith("error: job job-9 stopped: another driver took it over")
    assert line.endswith("`rsi run --resume job-9` from the driver that owns it finishes it")


def test_the_lost_lease_error_names_the_phase_to_resume(store: Store) -> None:
    """A trial job of a phase is finished by resuming the outermost phase job above it, not the trial job."""
    from rsi.loop.run import resume_command

    store.create_job("cyc-1", agent="harness", generation=None, harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=[], tasks_fingerprint="f", trials=[], kind="cycle")
    store.create_job("exp-1", agent="harness", generation=None, harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=[], tasks_fingerprint="f", trials=[], kind="expand",
                     parent_job="cyc-1")
    store.create_job("job-2", agent="harness", generation=None, harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=[], tasks_fingerprint="f", trials=[], parent_job="exp-1")
    _job(store, "job-3")
    assert resume_command(store, "job-2") == "rsi cycle --resume cyc-1"
    assert resume_command(store, "job-3") == "rsi run --resume job-3"
    msg = str(LeaseLostError("job-2", "another driver took it over", resume_command(store, "job-2")))
    assert "`rsi cycle --resume cyc-1` from the driver that owns it finishes it" in msg
