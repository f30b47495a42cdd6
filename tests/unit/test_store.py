"""The store: migrations build exactly the SQLModel schema, trial ids are idempotency keys, job liveness."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel, func, select

from rsi.core.trial import ErrorType, Timings, TrialResult, TrialStatus
from rsi.store.db import current_revision, head_revision
from rsi.store.repo import Store
from rsi.store.tables import JobRow, TrialRow


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'db' / 'rsi.db'}")


def _job(store: Store, job_id: str = "job-1", n: int = 2) -> list[TrialRow]:
    rows = [
        TrialRow(id=f"{job_id}.t{i}.1", job_id=job_id, task_name=f"t{i}", task_digest=f"d{i}", agent="oracle",
                 attempt=1, status=TrialStatus.PENDING.value, trial_dir=f"/tmp/{job_id}/t{i}.1")
        for i in range(n)
    ]
    store.create_job(job_id, agent="oracle", generation="gen-0000", harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=["/tmp/tasks"], tasks_fingerprint="fp", trials=rows)
    return rows


def test_migrations_from_blank_db_equal_the_tables(tmp_path: Path) -> None:
    db = tmp_path / "blank.db"
    assert not db.exists()
    store = Store(f"sqlite:///{db}")
    assert current_revision(store.engine) == head_revision() is not None
    with store.engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(mc, SQLModel.metadata)
    assert diff == [], f"migrations and rsi/store/tables.py disagree: {diff}"
    store.close()


def test_reopening_a_migrated_db_keeps_its_rows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _job(store)
    store.close()
    again = _store(tmp_path)
    assert [t.id for t in again.trials("job-1")] == ["job-1.t0.1", "job-1.t1.1"]


def test_create_job_writes_job_and_pending_trials(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _job(store, n=3)
    assert store.get_job("job-1").status == "running"
    assert [t.status for t in store.unfinished_trials("job-1")] == ["pending"] * 3


def test_record_trial_is_idempotent(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _job(store)
    base = dict(trial_id="job-1.t0.1", job_id="job-1", task="t0", task_digest="d0", attempt=1, agent="oracle",
                trial_dir="/tmp/job-1/t0.1")
    store.record_trial(TrialResult(**base, reward=0.0, error_type=ErrorType.SANDBOX_ERROR, infra_retries=2))
    store.record_trial(TrialResult(**base, reward=1.0, passed=True, timings=Timings(total=3.0)))
    store.record_trial(TrialResult(**base, reward=1.0, passed=True, timings=Timings(total=3.0)))
    with store.session() as s:
        n = s.exec(select(func.count()).select_from(TrialRow).where(TrialRow.id == "job-1.t0.1")).one()
    assert n == 1
    row = store.get_trial("job-1.t0.1")
    assert (row.status, row.reward, row.passed, row.error_type, row.infra_retries, row.t_total) == (
        "done", 1.0, True, None, 0, 3.0
    )
    assert [t.id for t in store.unfinished_trials("job-1")] == ["job-1.t1.1"]


def test_record_unknown_trial_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _job(store)
    with pytest.raises(Exception, match="unknown trial"):
        store.record_trial(TrialResult(trial_id="nope", job_id="job-1", task="t0", task_digest="d0",
                                       attempt=1, agent="oracle", trial_dir="/tmp/x"))


def test_live_job_ids_follow_the_owner_process(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for j in ("alive", "dead", "elsewhere", "finished"):
        _job(store, j, n=1)
    store.claim_job("alive")  # this process
    with store.session() as s:
        dead = s.get(JobRow, "dead")
        dead.owner_pid = _dead_pid()
        s.add(dead)
        other = s.get(JobRow, "elsewhere")
        other.owner_host = "some-other-host.invalid"
        other.owner_pid = 1
        s.add(other)
        s.commit()
    store.finish_job("finished", "done")
    live = store.live_job_ids()
    assert "alive" in live and store.get_job("alive").owner_pid == os.getpid()
    assert "dead" not in live, "a job whose owner pid is gone must be resumable"
    assert "elsewhere" in live, "a job owned on another host cannot be judged dead from here"
    assert "finished" not in live
