"""Is the file at the store's path an rsi database? Checked before rsi writes a byte to it.

A damaged or foreign file (a text file, a zero-length file, a truncated database, some other
application's SQLite database, a store from a newer rsi) is refused with a `StoreError` that
names the file and the fix, instead of being "migrated" into half-written state or failing
deep inside SQLAlchemy. The check reads the 100-byte SQLite header and the schema through a
read-only connection (`immutable=1`, which takes no locks and makes no -wal/-shm files; plain
`mode=ro` when a -wal file holds committed pages the main file lacks).

Damage found later, inside pages the check does not read, is turned into the same error by
`damage_error` (the engine's `handle_error` hook, rsi.store.db).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from urllib.parse import quote

from rsi.core.errors import StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100
# tables every rsi schema revision has had since 0001: an alembic-managed database without them is not rsi's
RSI_TABLES = frozenset({"generations", "jobs", "trials"})
# SQLite's result codes for "this is not a database" and "this database is damaged"
DAMAGE_CODES = ("SQLITE_NOTADB", "SQLITE_CORRUPT")
DAMAGE_TEXT = ("file is not a database", "database disk image is malformed")
# Every migration's revision, oldest first (a unit test holds it equal to alembic's own walk of migrations/).
# Known here, an open of a database already at head checks it with one SELECT and never imports alembic,
# which with its script parsing cost every command ~0.4 s (`rsi diff` has 2 s in all); here rather than in
# rsi.store.db so that a reader without SQLAlchemy (rsi.store.lite) knows them too.
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008")
HEAD = REVISIONS[-1]
# SQLite files this process has opened an engine (or rsi.store.lite a connection) on. The damage check
# reads the file's header with a plain descriptor, and closing any descriptor of a file drops every POSIX
# lock this process holds on it: done while an engine of this process held the database, it dropped
# SQLite's locks, so another process closing its connection checkpointed and deleted the -wal file that
# engine was still writing into (data lost). A file is therefore checked once per process, before its
# first engine, never under a live one.
ENGINE_FILES: set[str] = set()
# A file rsi is creating this instant is 0 bytes until its first connection writes the header
# (microseconds); a 0-byte file that stays so this long is not one.
ZERO_SETTLE_SEC = 0.5


def _aside(path: Path) -> Path:
    """A name beside `path` that nothing has yet: `rsi.db.damaged`, else `rsi.db.damaged-2`, ..."""
    n = 1
    while True:
        cand = path.with_name(f"{path.name}.damaged" + (f"-{n}" if n > 1 else ""))
        if not any(Path(f"{cand}{s}").exists() for s in ("", "-wal", "-shm")):
            return cand
        n += 1


def move_aside_fix(path: Path) -> str:
    """The fix for a store rsi cannot use: the shell command that moves it aside (with its -wal file when that
    holds pages: they belong to it, and SQLite would replay them into a fresh file; a -shm is only an index
    SQLite rebuilds), and what the next command then does."""
    aside = _aside(path)
    moves = [f"mv {path} {aside}"] + ([f"mv {path}-wal {aside}-wal"] if _wal_has_frames(path) else [])
    return (f"move it aside (`{' && '.join(moves)}`) and run the command again: rsi makes a fresh store there "
            "from generations/ (the old file's jobs and trials are not carried over)")


def _settled_size(path: Path) -> int:
    size = path.stat().st_size
    deadline = time.monotonic() + ZERO_SETTLE_SEC
    while size == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        size = path.stat().st_size
    return size


def _describe_start(head: bytes) -> str:
    if not head:
        return "nothing"
    try:
        text = head[:24].decode("utf-8")
    except UnicodeDecodeError:
        return f"bytes {head[:8].hex(' ')}"
    if text.replace("\n", "").replace("\r", "").replace("\t", "").isprintable():
        return f"text {text!r}"
    return f"bytes {head[:8].hex(' ')}"


def _header_problem(path: Path, size: int, head: bytes) -> str | None:
    """What the SQLite header says is wrong with the file, or None."""
    if len(head) < HEADER_BYTES or not head.startswith(SQLITE_MAGIC):
        if head.startswith(SQLITE_MAGIC):
            return f"is a truncated SQLite database ({size} bytes, shorter than its own header)"
        return f"is not a SQLite database (it starts with {_describe_start(head)})"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # the in-header page count is valid when the change counter equals version-valid-for; a -wal with
    # frames in it may hold pages the main file has not been extended to yet (a checkpoint cut short)
    counted = pages > 0 and head[24:28] == head[92:96]
    if counted and size < pages * page_size and not _wal_has_frames(path):
        return f"is a truncated SQLite database ({size} of its {pages * page_size} bytes)"
    return None


def _wal_has_frames(path: Path) -> bool:
    wal = Path(f"{path}-wal")
    return wal.is_file() and wal.stat().st_size > 32  # the WAL header is 32 bytes


def _schema(path: Path, locked: bool = False) -> tuple[set[str], list[str]]:
    """The file's table names and its alembic revision(s), read without writing anything. `locked`: through
    SQLite's locks (`mode=ro`), so a writer's checkpoint cannot be read half-done."""
    mode = "mode=ro" if locked or _wal_has_frames(path) else "immutable=1"
    conn = sqlite3.connect(f"file:{quote(str(path))}?{mode}", uri=True, timeout=30)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        revs = ([str(r[0]) for r in conn.execute("SELECT version_num FROM alembic_version")]
                if "alembic_version" in tables else [])
    finally:
        conn.close()
    return {t for t in tables if not t.startswith("sqlite_")}, revs


def is_damage(exc: BaseException) -> bool:
    """A SQLite error that means the file is not a database or is damaged (not "locked", not a bad query)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    if name:
        return name.startswith(DAMAGE_CODES)
    return any(t in str(exc) for t in DAMAGE_TEXT)


def damage_error(path: Path, exc: BaseException) -> StoreError:
    return StoreError(str(path), f"is damaged (SQLite: {exc})", move_aside_fix(path))


def revision_problem(revs: list[str], tables: set[str], known: Collection[str],
                     head: str | None) -> tuple[str, str] | None:
    """What is wrong with a schema (its tables and alembic revisions) for this rsi, and the start of the
    fix; None when it is rsi's at a revision this rsi knows, or still empty (migrations fill it)."""
    if not tables:
        return None
    if "alembic_version" not in tables:
        names = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        return f"is another application's SQLite database (tables: {names}), not an rsi store", ""
    if len(revs) != 1:
        return f"has {len(revs)} schema revisions in its alembic_version table (an rsi store has one)", ""
    rev = revs[0]
    if rev not in known:
        if tables >= RSI_TABLES:
            return (f"was written by a newer rsi (schema revision {rev!r}; this rsi knows up to {head!r})",
                    "use the rsi that wrote it, or ")
        return f"is another application's database (its schema revision {rev!r} is not one of rsi's)", ""
    if not tables >= RSI_TABLES:
        missing = ", ".join(sorted(RSI_TABLES - tables))
        return f"is not an rsi store (schema revision {rev!r}, but no {missing} table)", ""
    return None


def check_sqlite_file(path: Path, known: Collection[str], head: str | None) -> None:
    """Refuse, with a `StoreError`, a file at `path` that rsi must not open as its store. A missing file is fine
    (rsi creates it); so is an empty SQLite database."""
    if not path.exists():
        return
    if not path.is_file():
        raise StoreError(str(path), "is not a file", move_aside_fix(path))
    size = _settled_size(path)
    if size == 0:
        raise StoreError(str(path), "is empty (0 bytes), not an rsi database", move_aside_fix(path))
    try:
        with open(path, "rb") as f:
            head_bytes = f.read(HEADER_BYTES)
    except OSError as e:
        raise StoreError(str(path), f"cannot be read ({e.strerror or e})",
                         "give this user read and write access to it and to its directory") from None
    problem = _header_problem(path, size, head_bytes)
    if problem:
        raise StoreError(str(path), problem, move_aside_fix(path))
    try:
        try:
            tables, revs = _schema(path)
        except sqlite3.DatabaseError as e:
            if not is_damage(e):
                raise
            tables, revs = _schema(path, locked=True)  # not a writer caught mid-checkpoint: damage for sure
    except sqlite3.DatabaseError as e:
        if is_damage(e):
            raise damage_error(path, e) from None
        raise
    bad = revision_problem(revs, tables, known, head)
    if bad is not None:
        problem, fix = bad
        raise StoreError(str(path), problem, fix + move_aside_fix(path))
