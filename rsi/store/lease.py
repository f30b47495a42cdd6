"""Job ownership on PostgreSQL: a lease in the job's row, renewed while its driver runs.

Several drivers (on several machines) share one PostgreSQL store, so a file lock on one machine
cannot say who owns a job. A driver owns a job while its lease has not run out: it takes the lease
with one conditional UPDATE (free, its own, or expired), renews every `ttl / 3` seconds from a
background thread, and clears it when the job stops. A driver killed with `kill -9` stops renewing,
so its jobs can be resumed `ttl` seconds later. Times are the database's clock (seconds since the
epoch), never a driver's, so drivers on machines whose clocks differ agree.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from contextlib import suppress

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

NOW = "extract(epoch from clock_timestamp())"


def lease_seconds() -> float:
    """How long a lease lasts without renewal (RSI_LEASE_SECONDS, default 30)."""
    return float(os.environ.get("RSI_LEASE_SECONDS", "30"))


class JobLeases:
    """The leases one Store holds, and the thread that renews them."""

    def __init__(self, engine: Engine, ttl: float | None = None) -> None:
        self.engine = engine
        self.ttl = ttl or lease_seconds()
        self.owner = f"pid {os.getpid()} on {socket.gethostname()} ({secrets.token_hex(3)})"
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self, job_id: str) -> str | None:
        """Take (or renew) the job's lease. None when this driver holds it now, else who does."""
        with self.engine.begin() as c:
            got = c.execute(text(
                f"UPDATE jobs SET lease_owner = :me, lease_until = {NOW} + :ttl WHERE id = :id AND "
                f"(lease_owner IS NULL OR lease_owner = :me OR lease_until IS NULL OR lease_until < {NOW})"
            ), {"me": self.owner, "ttl": self.ttl, "id": job_id}).rowcount
            if got != 1:
                row = c.execute(text(f"SELECT lease_owner, lease_until - {NOW} FROM jobs WHERE id = :id"),
                                {"id": job_id}).first()
                if row is None:
                    return "no such job"
                return f"driver {row[0]}, lease {max(0.0, float(row[1] or 0)):.0f}s left"
        with self._lock:
            self._held.add(job_id)
        self._start()
        return None

    def give_back(self, job_id: str) -> None:
        with self._lock:
            self._held.discard(job_id)
        with suppress(SQLAlchemyError), self.engine.begin() as c:
            c.execute(text("UPDATE jobs SET lease_owner = NULL, lease_until = NULL "
                           "WHERE id = :id AND lease_owner = :me"), {"id": job_id, "me": self.owner})

    def live(self) -> set[str]:
        """Running jobs whose lease has not run out (whoever holds it)."""
        with self.engine.connect() as c:
            rows = c.execute(text(f"SELECT id FROM jobs WHERE status = 'running' AND lease_until > {NOW}")).all()
        return {r[0] for r in rows}

    def holds(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._held

    def renew(self) -> None:
        with self._lock:
            held = sorted(self._held)
        if not held:
            return
        with self.engine.begin() as c:
            for job_id in held:
                c.execute(text(f"UPDATE jobs SET lease_until = {NOW} + :ttl WHERE id = :id AND lease_owner = :me"),
                          {"ttl": self.ttl, "id": job_id, "me": self.owner})

    def close(self) -> None:
        with self._lock:
            held = sorted(self._held)
        for job_id in held:
            self.give_back(job_id)
        self._stop.set()

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._beat, name="rsi-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            with suppress(SQLAlchemyError):  # the database away for a moment: the next beat tries again
                self.renew()
