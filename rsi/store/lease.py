"""Job ownership on PostgreSQL: a lease in the job's row, renewed while its driver runs.

Several drivers (on several machines) share one PostgreSQL store, so a file lock on one machine
cannot say who owns a job. A driver owns a job while its lease has not run out: it takes the lease
with one conditional UPDATE (free, its own, or expired), renews every `ttl / 3` seconds from a
background thread, and clears it when the job stops. A driver killed with `kill -9` stops renewing,
so its jobs can be resumed `ttl` seconds later. Times are the database's clock (seconds since the
epoch), never a driver's, so drivers on machines whose clocks differ agree.

A driver can also lose a lease while it runs: it stalled (or the database was away) past `ttl`
and another driver took the job over, or the database stayed unreachable for longer than `ttl`, so
another driver may have. Renewal notices (a transient database error is retried with tenacity
until the lease would have run out), and `lost(job)` then says why; the driver stops the job and
records nothing more for it (the store refuses its writes, `LeaseLostError`).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from contextlib import suppress

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from rsi.core.errors import RsiError

# The database's clock, in seconds since the epoch. SQLite's form lets the unit tests run leases
# on a SQLite file; a real SQLite store owns jobs by file lock (rsi.store.locks), never by lease.
_NOW = {
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}


def lease_seconds() -> float:
    """How long a lease lasts without renewal (RSI_LEASE_SECONDS, default 30)."""
    return float(os.environ.get("RSI_LEASE_SECONDS", "30"))


class LeaseLostError(RsiError):
    """This driver no longer owns a job it was running; it stopped and recorded nothing more.

    One line naming the job, why (another driver took it over, or the store was unreachable for
    longer than the lease) and the way on: `--resume` from the driver that owns it finishes it.
    """

    exit_code = 1

    def __init__(self, job_id: str, why: str, resume: str | None = None) -> None:
        self.job_id = job_id
        self.why = why
        # a phase's trial job is finished by resuming the phase (the caller names it), a plain run by itself
        self.resume = resume or f"rsi run --resume {job_id}"
        super().__init__(
            f"job {job_id} stopped: {why}; this driver recorded nothing more for it, and "
            f"`{self.resume}` from the driver that owns it finishes it"
        )


class JobLeases:
    """The leases one Store holds, the thread that renews them, and the ones it lost."""

    def __init__(self, engine: Engine, ttl: float | None = None) -> None:
        self.engine = engine
        self.ttl = ttl or lease_seconds()
        self.now = _NOW.get(engine.dialect.name, _NOW["postgresql"])
        self.owner = f"pid {os.getpid()} on {socket.gethostname()} ({secrets.token_hex(3)})"
        self._held: set[str] = set()
        self._lost: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed_at = time.monotonic()  # when the last renewal that reached the database began

    def take(self, job_id: str) -> str | None:
        """Take (or renew) the job's lease. None when this driver holds it now, else who does."""
        with self.engine.begin() as c:
            got = c.execute(text(
                f"UPDATE jobs SET lease_owner = :me, lease_until = {self.now} + :ttl WHERE id = :id AND "
                f"(lease_owner IS NULL OR lease_owner = :me OR lease_until IS NULL OR lease_until < {self.now})"
            ), {"me": self.owner, "ttl": self.ttl, "id": job_id}).rowcount
            if got != 1:
                return self._holder(c, job_id)
        with self._lock:
            self._held.add(job_id)
            self._lost.pop(job_id, None)
        self._start()
        return None

    def give_back(self, job_id: str) -> None:
        """Clear the job's lease if this driver still holds it (a lost one is left to its new owner)."""
        with self._lock:
            self._held.discard(job_id)
        with suppress(SQLAlchemyError), self.engine.begin() as c:
            c.execute(text("UPDATE jobs SET lease_owner = NULL, lease_until = NULL "
                           "WHERE id = :id AND lease_owner = :me"), {"id": job_id, "me": self.owner})

    def live(self) -> set[str]:
        """Running jobs whose lease has not run out (whoever holds it)."""
        with self.engine.connect() as c:
            rows = c.execute(text(f"SELECT id FROM jobs WHERE status = 'running' AND lease_until > {self.now}")).all()
        return {r[0] for r in rows}

    def holds(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._held

    def lost(self, job_id: str) -> str | None:
        """Why this driver lost the job's lease while running it; None while it holds it (or never did)."""
        with self._lock:
            return self._lost.get(job_id)

    def mark_lost(self, job_id: str, why: str) -> None:
        """Record that the job is no longer this driver's: renewal stops and its writes are refused."""
        with self._lock:
            if job_id in self._held:
                self._held.discard(job_id)
                self._lost[job_id] = why

    def check(self, job_id: str, lease_owner: str | None) -> None:
        """Raise LeaseLostError unless this driver still owns the job (`lease_owner`: the row's, as just read).

        The store calls it inside each write for a job, so a driver whose lease was taken records
        nothing more even before its renewal notices.
        """
        if not self.holds(job_id) and self.lost(job_id) is None:
            return  # a job this driver does not run here (e.g. an old row repaired): not a lease matter
        if self.holds(job_id) and lease_owner != self.owner:
            self.mark_lost(job_id, f"another driver took it over (driver {lease_owner or 'none'})")
        why = self.lost(job_id)
        if why is not None:
            raise LeaseLostError(job_id, why)

    def renew(self) -> None:
        """Extend every held lease by `ttl`; a lease no longer this driver's is marked lost.

        Raises SQLAlchemyError when the database does not answer (the beat retries).
        """
        began = time.monotonic()
        with self._lock:
            held = sorted(self._held)
        if not held:
            self._renewed_at = began  # nothing to lose: a lease taken from now on is measured from here
            return
        gone: dict[str, str] = {}
        with self.engine.begin() as c:
            for job_id in held:
                got = c.execute(
                    text(f"UPDATE jobs SET lease_until = {self.now} + :ttl WHERE id = :id AND lease_owner = :me"),
                    {"ttl": self.ttl, "id": job_id, "me": self.owner},
                ).rowcount
                if got != 1:
                    gone[job_id] = f"another driver took it over ({self._holder(c, job_id)})"
        self._renewed_at = began
        for job_id, why in gone.items():
            self.mark_lost(job_id, why)

    def renew_or_give_up(self) -> None:
        """Renew, retrying transient database errors until the leases would have run out; past
        that, mark every held job lost (another driver may own it now)."""
        left = self._renewed_at + self.ttl - time.monotonic()
        try:
            for attempt in Retrying(
                stop=stop_after_delay(max(0.0, left)),
                wait=wait_exponential(multiplier=0.2, max=max(0.5, self.ttl / 10)),
                retry=retry_if_exception_type(SQLAlchemyError),
                reraise=True,
            ):
                with attempt:
                    self.renew()
        except SQLAlchemyError as e:
            if time.monotonic() - self._renewed_at < self.ttl:
                return  # gave up early (no time was left to wait): the next beat tries again
            why = (f"the store was unreachable for longer than the lease ({self.ttl:g} s), so another driver "
                   f"may own it now ({str(e).splitlines()[0][:120]})")
            with self._lock:
                held = sorted(self._held)
            for job_id in held:
                self.mark_lost(job_id, why)

    def close(self) -> None:
        with self._lock:
            held = sorted(self._held)
        for job_id in held:
            self.give_back(job_id)
        self._stop.set()

    def _holder(self, c: Connection, job_id: str) -> str:
        row = c.execute(text(f"SELECT lease_owner, lease_until - {self.now} FROM jobs WHERE id = :id"),
                        {"id": job_id}).first()
        if row is None:
            return "no such job"
        return f"driver {row[0]}, lease {max(0.0, float(row[1] or 0)):.0f}s left"

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._renewed_at = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="rsi-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            self.renew_or_give_up()
