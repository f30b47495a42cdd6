"""Queries and writes over the rsi database. The only place that issues SQL.

In every mode the driver process is the only writer (DESIGN §11): executors return results and
the driver records them here as they arrive. Trial ids are idempotency keys.

`Store` is the single entry class. Its queries live in mixins by subject (queries_trials,
queries_loop, queries_generations); this module holds opening and closing, jobs, and ownership.
Ownership is by file lock (rsi.store.locks), not by pid: a job is live while the process that
claimed it holds `<lock dir>/<job>.lock`, and a SQLite store has one writing driver at a time,
the holder of `<db file>.driver.lock`. On PostgreSQL several drivers write at once and a job is
owned by a lease in its row (rsi.store.lease).
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from rsi.core.arm import Arm
from rsi.core.digest import digest_obj
from rsi.core.errors import ConfigError, NotFoundError
from rsi.store.db import database_url, make_engine, migrate, sqlite_file
from rsi.store.lease import JobLeases
from rsi.store.locks import FileLock, is_locked_by_other, read_holder
from rsi.store.queries_base import check_choice
from rsi.store.queries_diff import DiffQueries
from rsi.store.queries_discover import DiscoverQueries
from rsi.store.queries_expand import ExpandQueries
from rsi.store.queries_generations import GenerationQueries
from rsi.store.queries_loop import LoopQueries, put_arm_in
from rsi.store.queries_promote import PromoteQueries
from rsi.store.queries_trials import HOLDOUT_READERS, READERS, Reader, TrialQueries
from rsi.store.queries_update import UpdateQueries
from rsi.store.tables import JobRow, TrialRow, utcnow

Phase = Literal["discover", "expand", "update", "promote", "run", "cycle"]

__all__ = ["HOLDOUT_READERS", "READERS", "Phase", "Reader", "Store"]


def _default_lock_dir(url: str, db_file: Path | None) -> Path:
    """`<db dir>/locks` for a SQLite file; otherwise a per-database folder in the temp dir.

    The latter only sees jobs claimed on this machine: with several drivers on several hosts
    (PostgreSQL), pass a shared `lock_dir` or use database-side locks.
    """
    if db_file is not None:
        return db_file.parent / "locks"
    return Path(tempfile.gettempdir()) / "rsi-locks" / digest_obj(url)[:12]


class Store(TrialQueries, LoopQueries, GenerationQueries, DiscoverQueries, ExpandQueries, UpdateQueries,
            PromoteQueries, DiffQueries):
    """One database, migrated to head on open; holds the locks it takes until `close`."""

    def __init__(self, url: str, *, lock_dir: Path | None = None) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)
        migrate(self.engine)
        self.db_file: Path | None = sqlite_file(url)
        self.lock_dir: Path = lock_dir or _default_lock_dir(url, self.db_file)
        self._job_locks: dict[str, FileLock] = {}
        self._driver: FileLock | None = None
        # PostgreSQL: several drivers, so a job is owned by a lease in its row (rsi.store.lease)
        self.leases: JobLeases | None = JobLeases(self.engine) if self.engine.dialect.name == "postgresql" else None

    @classmethod
    def for_path(cls, db_path: Path) -> Store:
        """The workspace's store: `db_path` unless RSI_DATABASE_URL points elsewhere.

        A non-SQLite database keeps its job locks beside where the SQLite file would be.
        """
        url = database_url(db_path)
        return cls(url, lock_dir=None if sqlite_file(url) else db_path.parent / "locks")

    def close(self) -> None:
        """Give back every lock this store holds and dispose of the engine."""
        for lock in self._job_locks.values():
            lock.release()
        self._job_locks.clear()
        if self.leases is not None:
            self.leases.close()
        self.release_driver()
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # the driver lock -------------------------------------------------------------------------
    @property
    def driver_lock_path(self) -> Path | None:
        return Path(f"{self.db_file}.driver.lock") if self.db_file is not None else None

    def acquire_driver(self) -> None:
        """Become the one process writing this SQLite store, or refuse with a one-line ConfigError.

        A no-op for other databases (PostgreSQL takes several drivers). Idempotent; released by
        `release_driver` or `close`. Read-only commands never call it.
        """
        path = self.driver_lock_path
        if path is None or (self._driver is not None and self._driver.held):
            return
        lock = FileLock(path)
        if not lock.acquire():
            holder = read_holder(path) or "holder unknown"
            raise ConfigError(
                f"another rsi driver is writing {self.db_file} ({holder}); wait for it, "
                "or point RSI_DATABASE_URL at PostgreSQL to run several drivers at once"
            )
        self._driver = lock

    def release_driver(self) -> None:
        if self._driver is not None:
            self._driver.release()
            self._driver = None

    # jobs ------------------------------------------------------------------------------------
    def create_job(
        self,
        job_id: str,
        *,
        agent: str,
        generation: str | None,
        harness_config_digest: str | None,
        attempts: int,
        concurrency: int,
        task_paths: Sequence[str],
        tasks_fingerprint: str,
        trials: Sequence[TrialRow],
        kind: str = "run",
        phase: Phase | None = None,
        arms: Sequence[Arm] = (),
        parent_job: str | None = None,
        params: dict[str, object] | None = None,
    ) -> JobRow:
        """Create the job, its arms and all its planned trials (pending) in one transaction."""
        if phase is not None:
            check_choice("job phase", phase, get_args(Phase))
        job = JobRow(
            id=job_id,
            kind=kind,
            status="running",
            agent=agent,
            generation=generation,
            harness_config_digest=harness_config_digest,
            attempts=attempts,
            concurrency=concurrency,
            task_paths_json=json.dumps(list(task_paths)),
            tasks_fingerprint=tasks_fingerprint,
            owner_pid=os.getpid(),
            owner_host=socket.gethostname(),
            phase=phase,
            arms_json=json.dumps(list(dict.fromkeys(a.id for a in arms))),
            parent_job=parent_job,
            params_json=json.dumps(params or {}, sort_keys=True),
        )
        for again in (True, False):  # two drivers on PostgreSQL may add the same arm at once: the loser retries
            try:
                with self.session() as s:
                    s.add(job)
                    for arm in {a.id: a for a in arms}.values():
                        put_arm_in(s, arm)
                    s.flush()
                    for t in trials:
                        s.add(t)
                    s.commit()
                break
            except IntegrityError:
                if not again:
                    raise
        return job

    def get_job(self, job_id: str) -> JobRow:
        with self.session() as s:
            row = s.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"unknown job '{job_id}'")
        return row

    def list_jobs(self, limit: int = 50, *, top_level: bool = False) -> list[JobRow]:
        """The newest jobs first; `top_level`: only jobs a user started (no phase's child job)."""
        stmt = select(JobRow)
        if top_level:
            stmt = stmt.where(col(JobRow.parent_job).is_(None))
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(JobRow.created_at).desc()).limit(limit)).all())

    def job_lock_path(self, job_id: str) -> Path:
        return self.lock_dir / f"{re.sub(r'[^A-Za-z0-9._-]', '_', job_id)}.lock"

    def claim_job(self, job_id: str) -> None:
        """Own the job (on start and on resume): take its lock, held until finish_job or close.

        Refuses with ConfigError ("still running") while another process or Store holds it.
        """
        self.get_job(job_id)
        if self.leases is not None:
            holder = self.leases.take(job_id)
            if holder is not None:
                raise ConfigError(f"job {job_id} is still running ({holder}); stop it before resuming")
        else:
            lock = self._job_locks.get(job_id) or FileLock(self.job_lock_path(job_id))
            if not lock.acquire():
                holder = read_holder(lock.path) or "another process"
                raise ConfigError(f"job {job_id} is still running ({holder}); stop it before resuming")
            self._job_locks[job_id] = lock
        with self.session() as s:
            row = s.get(JobRow, job_id)
            assert row is not None
            row.status = "running"
            row.owner_pid = os.getpid()
            row.owner_host = socket.gethostname()
            row.interrupted_reason = None
            row.updated_at = utcnow()
            s.add(row)
            s.commit()

    def finish_job(self, job_id: str, status: str) -> None:
        """Set the job's final status for this run and give up its lock (refused once its lease is lost)."""
        with self.session() as s:
            self._fence(s, job_id)
            row = s.get(JobRow, job_id)
            if row is not None:
                row.status = status
                row.updated_at = utcnow()
                row.owner_pid = None
                if status == "done":
                    row.finished_at = utcnow()
                s.add(row)
                s.commit()
        self._release_job(job_id)

    def mark_job_interrupted(self, job_id: str, reason: str) -> None:
        """Record why a job stopped early (budget spent, Ctrl-C, lost endpoint) and give up its lock.

        Refused (LeaseLostError) once another driver took the job over: the row is the new owner's.
        """
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            self._fence(s, job_id)
            row.status = "interrupted"
            row.interrupted_reason = reason
            row.owner_pid = None
            row.updated_at = utcnow()
            s.add(row)
            s.commit()
        self._release_job(job_id)

    def lease_lost(self, job_id: str) -> str | None:
        """Why this driver lost the job it runs (another driver took it over, or the database was
        away past the lease); None while it owns it. Always None on SQLite (a file lock cannot be lost)."""
        return self.leases.lost(job_id) if self.leases is not None else None

    def live_job_ids(self) -> set[str]:
        """Running jobs whose lock is held now (here or by another process).

        A row left `running` by a killed process is not live: its lock died with it.
        """
        if self.leases is not None:
            return self.leases.live()
        with self.session() as s:
            ids = s.exec(select(JobRow.id).where(JobRow.status == "running")).all()
        return {j for j in ids if j in self._job_locks or is_locked_by_other(self.job_lock_path(j))}

    def _release_job(self, job_id: str) -> None:
        if self.leases is not None:
            self.leases.give_back(job_id)
        lock = self._job_locks.pop(job_id, None)
        if lock is not None:
            lock.release()
