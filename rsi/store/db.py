"""Engine creation and migrations.

SQLite in WAL mode at `<workspace>/.rsi/rsi.db` by default; `RSI_DATABASE_URL` overrides. The
schema is brought to head with alembic on every open, so a missing file becomes a full database.
A file that is there but is not an rsi store (damaged, foreign, from a newer rsi) is refused
before anything is written to it (rsi.store.db_check), and damage met later in a query becomes
the same one-line `StoreError`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext, make_url
from sqlmodel import create_engine

from rsi.store.db_check import ENGINE_FILES, HEAD, REVISIONS, check_sqlite_file, damage_error, is_damage

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def database_url(default_path: Path) -> str:
    return os.environ.get("RSI_DATABASE_URL") or f"sqlite:///{default_path}"


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for an in-memory SQLite or any other database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    if u.database.startswith("file:"):  # URI form; rsi never writes it, so treat it as not-a-file
        return None
    return Path(u.database)


def make_engine(url: str) -> Engine:
    """An engine on `url`; for a SQLite file that exists, only once the file is known to be an rsi store
    (else a `StoreError` naming it and the fix)."""
    db_file = sqlite_file(url)
    if db_file is not None:
        key = str(db_file.resolve())
        if key not in ENGINE_FILES:
            check_sqlite_file(db_file, set(REVISIONS), HEAD)
        db_file.parent.mkdir(parents=True, exist_ok=True)
        ENGINE_FILES.add(key)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}
                           if url.startswith("sqlite") else {})
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    if db_file is not None:
        damaged_file = db_file

        @event.listens_for(engine, "handle_error")
        def _damaged(context: ExceptionContext) -> None:
            if is_damage(context.original_exception):
                raise damage_error(damaged_file, context.original_exception)

    return engine


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config())


def head_revision() -> str | None:
    return _script().get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at (alembic's version table; None for a blank database)."""
    from sqlalchemy import inspect, text

    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    return rows[0][0] if len(rows) == 1 else None


def migrate(engine: Engine, revision: str = "head") -> None:
    """Bring the database schema up to `revision` (idempotent; at head already: one SELECT, no alembic)."""
    if revision in ("head", HEAD) and current_revision(engine) == HEAD:
        return
    from alembic import command

    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the schema back down to `revision` (for tests and for undoing a bad upgrade by hand)."""
    from alembic import command

    cfg = _alembic_config()
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:  # off before the transaction (a no-op inside one): batch mode recreates referenced tables
            conn.exec_driver_sql("PRAGMA foreign_keys = OFF")
            conn.commit()
        with conn.begin():
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
        if sqlite:
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            conn.commit()
