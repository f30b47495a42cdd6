"""The store: trial ids are idempotency keys, and ownership is a file lock, not a pid.

Locks are tested two ways: two Store objects in one process (flock locks belong to an open file,
so they conflict like two drivers), and a subprocess that holds the lock and is then killed -9.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import func, select

from rsi.core.errors import ConfigError
from rsi.core.trial import ErrorType, Timings, TrialResult, TrialStatus
from rsi.store.locks import FileLock, is_locked_by_other, read_holder
from rsi.store.repo import Store
from rsi.store.tables import JobRow, TrialRow


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'db' / 'rsi.db'}"


def _store(tmp_path: Path) -> Store:
    return Store(_url(tmp_path))


def _job(store: Store, job_id: str = "job-1", n: int = 2) -> list[TrialRow]:
    rows = [
        TrialRow(id=f"{job_id}.t{i}.1", job_id=job_id, task_name=f"t{i}", task_digest=f"d{i}", agent="oracle",
                 attempt=1, status=TrialStatus.PENDING.value, trial_dir=f"/tmp/{job_id}/t{i}.1")
        for i in range(n)
    ]
    store.create_job(job_id, agent="oracle", generation="gen-0000", harness_config_digest=None, attempts=1,
                     concurrency=1, task_paths=["/tmp/tasks"], tasks_fingerprint="fp", trials=rows)
    return rows


@contextmanager
def _holder(code: str) -> Iterator[subprocess.Popen[str]]:
    """A python subprocess that runs `code`, prints 'ready' and sleeps until killed."""
    script = textwrap.dedent(code) + "\nimport sys, time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", f"holder did not start (rc={p.poll()})"
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def _kill9(p: subprocess.Popen[str]) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


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
    base: dict[str, Any] = dict(trial_id="job-1.t0.1", job_id="job-1", task="t0", task_digest="d0", attempt=1,
                                agent="oracle", trial_dir="/tmp/job-1/t0.1")
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


# file locks --------------------------------------------------------------------------------------
def test_file_lock_is_exclusive_across_objects_and_frees_on_release(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "x.lock"
    assert not is_locked_by_other(path), "a missing lock file is not locked"
    assert not path.exists(), "probing must not create the file"
    a, b = FileLock(path), FileLock(path)
    assert a.acquire(note="pid 1 on here")
    assert a.acquire(), "re-acquiring a held lock is a no-op"
    assert not b.acquire()
    assert is_locked_by_other(path)
    assert read_holder(path) == "pid 1 on here"
    a.release()
    assert not is_locked_by_other(path) and read_holder(path) == ""
    assert b.acquire()
    b.release()


def test_file_lock_held_by_a_subprocess_dies_with_it(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with _holder(f"from pathlib import Path\nfrom rsi.store.locks import FileLock\n"
                 f"lock = FileLock(Path({str(path)!r}))\nassert lock.acquire()\n") as p:
        assert is_locked_by_other(path)
        assert not FileLock(path).acquire()
        assert f"pid {p.pid}" in read_holder(path)
        _kill9(p)
    assert not is_locked_by_other(path), "kill -9 must free the lock"
    assert FileLock(path).acquire()


# job ownership -----------------------------------------------------------------------------------
def test_live_job_ids_follow_the_job_lock_not_the_pid(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for j in ("alive", "dead", "finished"):
        _job(store, j, n=1)
    store.claim_job("alive")
    store.claim_job("finished")
    store.finish_job("finished", "done")
    with store.session() as s:  # a row left running with a pid that is alive but is not the owner
        dead = s.get(JobRow, "dead")
        assert dead is not None
        dead.owner_pid = os.getpid()
        s.add(dead)
        s.commit()
    assert store.live_job_ids() == {"alive"}
    assert store.get_job("alive").owner_pid == os.getpid()
    other = _store(tmp_path)
    assert other.live_job_ids() == {"alive"}, "another Store sees the lock"
    store.close()
    assert other.live_job_ids() == set(), "a closed store's jobs are resumable"


def test_claim_job_refuses_a_job_claimed_by_another_store(tmp_path: Path) -> None:
    a, b = _store(tmp_path), _store(tmp_path)
    _job(a, "j", n=1)
    a.claim_job("j")
    a.claim_job("j")  # its own claim again: fine
    with pytest.raises(ConfigError, match="job j is still running .*pid"):
        b.claim_job("j")
    a.mark_job_interrupted("j", "budget spent")
    job = b.get_job("j")
    assert (job.status, job.interrupted_reason) == ("interrupted", "budget spent")
    b.claim_job("j")
    assert b.get_job("j").interrupted_reason is None and b.live_job_ids() == {"j"}
    with pytest.raises(ConfigError, match="still running"):
        a.claim_job("j")


def test_a_job_claimed_by_a_killed_subprocess_is_not_live(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _job(store, "j", n=1)
    code = f"from rsi.store.repo import Store\ns = Store({_url(tmp_path)!r})\ns.claim_job('j')\n"
    with _holder(code) as p:
        assert store.live_job_ids() == {"j"}
        with pytest.raises(ConfigError, match="still running"):
            store.claim_job("j")
        _kill9(p)
    assert store.get_job("j").status == "running", "the killed process left the row running"
    assert store.live_job_ids() == set()
    store.claim_job("j")
    assert store.live_job_ids() == {"j"}


# the driver lock ---------------------------------------------------------------------------------
def test_second_driver_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    a, b = _store(tmp_path), _store(tmp_path)
    a.acquire_driver()
    a.acquire_driver()  # idempotent
    with pytest.raises(ConfigError) as e:
        b.acquire_driver()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"another rsi driver is writing {tmp_path / 'db' / 'rsi.db'} (pid ")
    assert "RSI_DATABASE_URL" in msg and "PostgreSQL" in msg
    b.live_job_ids()  # reading needs no driver lock
    a.close()
    b.acquire_driver()
    b.close()


def test_driver_lock_held_by_a_subprocess(tmp_path: Path) -> None:
    _store(tmp_path).close()
    code = f"from rsi.store.repo import Store\ns = Store({_url(tmp_path)!r})\ns.acquire_driver()\n"
    store = _store(tmp_path)
    with _holder(code) as p:
        with pytest.raises(ConfigError, match=f"another rsi driver .*pid {p.pid}"):
            store.acquire_driver()
        _kill9(p)
    store.acquire_driver()
    store.close()


def test_driver_lock_is_a_no_op_without_a_sqlite_file() -> None:
    a, b = Store("sqlite://"), Store("sqlite://")
    assert a.driver_lock_path is None
    a.acquire_driver()
    b.acquire_driver()
    a.close()
    b.close()
