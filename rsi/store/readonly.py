"""The store opened read-only, for `rsi view`: a SQLite `mode=ro` URI, no migration, no locks.

A viewer must never change what it shows, nor block a running job: the connection is read-only at
the SQLite level (any write raises), so it cannot migrate, lock or touch a row. A store at an older
schema than this rsi is refused with the fix (any writing command, e.g. `rsi jobs list`, migrates
it); one that is damaged or foreign with the same one-line `StoreError` every command gives.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext
from sqlmodel import create_engine

from rsi.core.errors import StoreError
from rsi.store.db import HEAD, REVISIONS, current_revision, database_url, sqlite_file
from rsi.store.db_check import check_sqlite_file, damage_error, is_damage
from rsi.store.queries_view import ViewQueries
from rsi.store.repo import Store


def read_only_url(db_file: Path) -> str:
    """The SQLAlchemy URL that opens `db_file` read-only (SQLite URI filename, `mode=ro`)."""
    return f"sqlite:///file:{quote(str(db_file.resolve()))}?mode=ro&uri=true"


def read_only_engine(db_file: Path) -> Engine:
    """An engine on `db_file` that cannot write: every connection is a `mode=ro` SQLite connection."""
    check_sqlite_file(db_file, set(REVISIONS), HEAD)
    engine = create_engine(read_only_url(db_file), connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA query_only=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "handle_error")
    def _damaged(context: ExceptionContext) -> None:
        if is_damage(context.original_exception):
            raise damage_error(db_file, context.original_exception)

    head = HEAD
    have = current_revision(engine)
    if have != head:
        engine.dispose()
        raise StoreError(str(db_file), f"it is at schema {have or 'none'} and this rsi reads {head}",
                         "run any rsi command that opens it for writing (e.g. `rsi jobs list`) once to upgrade it, "
                         "then `rsi view` again")
    return engine


class ReadOnlyStore(ViewQueries, Store):
    """Every read of `Store` plus the viewer's own queries, on a read-only connection.

    Writes fail inside SQLite ("attempt to write a readonly database"); `acquire_driver` and job
    locks are never taken.
    """

    def __init__(self, db_file: Path) -> None:  # noqa: D107 - no Store.__init__: it migrates
        self.url = read_only_url(db_file)
        self.engine = read_only_engine(db_file)
        self.db_file = db_file
        self.lock_dir = db_file.parent / "locks"
        self._job_locks = {}
        self._driver = None
        self.leases = None  # a read-only store owns no job

    def close(self) -> None:
        """Dispose of the engine (a read-only store holds no lock, lease or driver role)."""
        self.engine.dispose()

    @classmethod
    def for_workspace_db(cls, db_path: Path) -> ReadOnlyStore:
        """The workspace's store, read-only (`RSI_DATABASE_URL` when it names a SQLite file)."""
        url = database_url(db_path)
        db_file = sqlite_file(url)
        if db_file is None:
            raise StoreError(url, "`rsi view` reads a SQLite store and this is not a SQLite file",
                             "unset RSI_DATABASE_URL to view the workspace's own .rsi/rsi.db")
        if not db_file.is_file():
            raise StoreError(str(db_file), "there is no store here yet",
                             "run a command in this workspace first (e.g. `rsi demo` or `rsi run`)")
        return cls(db_file)


__all__ = ["ReadOnlyStore", "read_only_engine", "read_only_url"]
