"""What every group of store queries stands on: the engine and a session per unit of work.

`Store` (rsi/store/repo.py) is the single entry class; it is assembled from mixins, one module per
group of tables, each deriving from `StoreBase` so it can open sessions. Each write opens one
session and commits once: one transaction per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from rsi.store.lease import JobLeases
from rsi.store.tables import JobRow


class StoreBase:
    """The engine and its sessions; set up by `Store.__init__`."""

    url: str
    engine: Engine
    leases: JobLeases | None  # PostgreSQL: the job leases this driver holds (rsi.store.lease)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose objects stay readable after commit (rows are handed back to callers)."""
        with Session(self.engine, expire_on_commit=False) as s:
            yield s

    def _tuples(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Plain SQL (named `:params`) in one session, rows as tuples: rsi.store.queries_diff's reads."""
        with self.session() as s:
            return [tuple(r) for r in s.execute(text(sql), params or {}).all()]

    def _fence(self, s: Session, job_id: str) -> None:
        """Raise LeaseLostError when this driver's lease on the job is gone (its row read, and
        locked, in `s`).

        Every write for a running job passes here, so a driver that lost its job to another driver
        records nothing more for it. A no-op on SQLite, where a file lock owns the job.
        """
        if self.leases is None:
            return
        # FOR UPDATE: a driver taking the job over (its UPDATE of this row) waits for this write to
        # commit, and a write that waited for a takeover reads the new owner, so none slips past.
        row = s.get(JobRow, job_id, with_for_update=True, populate_existing=True)
        if row is not None:
            self.leases.check(job_id, row.lease_owner)


def check_choice(what: str, value: Any, allowed: tuple[str, ...]) -> None:
    """Refuse a value outside a fixed vocabulary with a message naming the choices."""
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")
