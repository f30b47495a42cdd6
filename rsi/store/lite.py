"""A light reader of the store for reports: a plain `sqlite3` connection, no SQLAlchemy or SQLModel imported.

`rsi diff` reads a handful of aggregates; importing the ORM to run them cost ~0.7 s of its 2 s. When the
workspace database is a SQLite file already at this rsi's schema, `open_lite` gives a `LiteReader` that runs
the very same SQL (rsi.store.queries_diff) through the standard library. In every other case it gives None
and the caller opens the full `Store`, which migrates an old schema, registers generations on a fresh
clone, or talks to PostgreSQL (`RSI_DATABASE_URL`): what the reader leaves to the store is never guessed.

The file is checked as every open checks it (rsi.store.db_check: damaged or foreign files are refused with
the one-line `StoreError`), the connection is `query_only` (it cannot write a byte), and damage met in a
query becomes the same error.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from rsi.store.db_check import ENGINE_FILES, HEAD, REVISIONS, check_sqlite_file, damage_error, is_damage
from rsi.store.queries_diff import DiffQueries


class LiteReader(DiffQueries):
    """`rsi diff`'s reads (rsi.store.queries_diff) on one `sqlite3` connection that cannot write."""

    def __init__(self, db_file: Path, conn: sqlite3.Connection) -> None:
        self.db_file = db_file
        self.conn = conn

    def _tuples(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        try:
            return list(self.conn.execute(sql, params or {}).fetchall())
        except sqlite3.DatabaseError as e:
            if is_damage(e):
                raise damage_error(self.db_file, e) from None
            raise

    def close(self) -> None:
        self.conn.close()


def open_lite(db_file: Path) -> LiteReader | None:
    """A `LiteReader` on `db_file` when it is a SQLite rsi store at this rsi's schema holding generations;
    None when the full store must open it instead (no file yet, an older schema to migrate, no generation
    registered, `RSI_DATABASE_URL` set). Raises the store's `StoreError` for a damaged or foreign file."""
    if os.environ.get("RSI_DATABASE_URL") or not db_file.is_file():
        return None
    key = str(db_file.resolve())
    if key not in ENGINE_FILES:  # never under a live connection of this process (see ENGINE_FILES)
        check_sqlite_file(db_file, set(REVISIONS), HEAD)
    ENGINE_FILES.add(key)
    conn = sqlite3.connect(str(db_file), timeout=30, check_same_thread=False)
    reader = LiteReader(db_file, conn)
    try:
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        tables = {r[0] for r in reader._tuples("SELECT name FROM sqlite_master WHERE type = 'table'")}
        revs = [r[0] for r in reader._tuples("SELECT version_num FROM alembic_version")] \
            if "alembic_version" in tables else []
        if revs != [HEAD] or not reader._tuples("SELECT 1 FROM generations LIMIT 1"):
            reader.close()
            return None
    except BaseException:
        reader.close()
        raise
    return reader


__all__ = ["LiteReader", "open_lite"]
