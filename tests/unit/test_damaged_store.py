"""A damaged or foreign `.rsi/rsi.db` is named in one line with the fix (exit 2), never crashed on or written to.

Each case puts a different wrong file where the workspace's store lives and runs the commands a user
would: every one answers with the file, what is wrong with it and how to move it aside, and leaves
the file's bytes as they were. `rsi doctor` reports the same as a failed check.
"""

from __future__ import annotations

import gc
import json
import shlex
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.init import init_workspace
from rsi.store.db import head_revision
from rsi.store.repo import Store
from tests.taskgen import make_task

runner = CliRunner()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one task and a healthy store (gen-0000 and its config recorded), made once."""
    root = tmp_path_factory.mktemp("tpl") / "ws"
    init_workspace(root, starter_tasks=False)
    make_task(root / "tasks", "t1")
    gc.collect()  # init's own store: closed, its WAL checkpointed into rsi.db
    db = root / ".rsi" / "rsi.db"
    assert not Path(f"{db}-wal").exists()
    return root


@pytest.fixture
def ws(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(template, root)
    return root


def _sqlite(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for s in statements:
        conn.execute(s)
    conn.commit()
    conn.close()


def _set_revision(path: Path, rev: str) -> None:
    _sqlite(path, f"UPDATE alembic_version SET version_num = '{rev}'")


def _corrupt_generations(path: Path) -> None:
    """Garbage over the pages of the generations table (every command reads it first); the header and the
    schema stay intact, so only a query finds the damage."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name = 'generations'")]
    conn.close()
    data = bytearray(path.read_bytes())
    for root in roots:
        data[(root - 1) * page_size:root * page_size] = b"\xa5" * page_size
    path.write_bytes(bytes(data))


def _text(p: Path) -> None:
    p.write_text("these are my notes, not a database\n")


def _zero(p: Path) -> None:
    p.write_bytes(b"")


def _other_app(p: Path) -> None:
    p.unlink()
    _sqlite(p, "CREATE TABLE users (id INTEGER, email TEXT)", "INSERT INTO users VALUES (1, 'a@b.c')")


def _other_alembic_app(p: Path) -> None:
    p.unlink()
    _sqlite(p, "CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)",
            "INSERT INTO alembic_version VALUES ('ae1027a6acf')", "CREATE TABLE accounts (id INTEGER)")


def _newer(p: Path) -> None:
    _set_revision(p, "0999")


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[:len(data) // 3])


# name -> (how to damage the workspace's rsi.db, in place; what the one line says is wrong)
CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "text file": (_text, "is not a SQLite database (it starts with text 'these are my notes, not '"),
    "zero-length file": (_zero, "is empty (0 bytes), not an rsi database"),
    "another app's SQLite": (_other_app, "is another application's SQLite database (tables: users), not an rsi store"),
    "another app's alembic": (_other_alembic_app, "is another application's database (its schema revision "
                                                  "'ae1027a6acf' is not one of rsi's)"),
    "newer rsi": (_newer, f"was written by a newer rsi (schema revision '0999'; this rsi knows up to "
                          f"'{head_revision()}'); use the rsi that wrote it, or move it aside"),
    "truncated": (_truncate, "is a truncated SQLite database ("),
    "damaged pages": (_corrupt_generations, "is damaged (SQLite: database disk image is malformed)"),
}

COMMANDS: dict[str, list[str]] = {
    "jobs list": ["jobs", "list"],
    "tasks list": ["tasks", "list"],
    "run": ["run", "{ws}/tasks/t1", "--agent", "oracle"],
    "generations list": ["generations", "list", "--json"],
}


def _damage(ws: Path, case: str) -> tuple[Path, bytes]:
    db = ws / ".rsi" / "rsi.db"
    CASES[case][0](db)
    return db, db.read_bytes()


def _assert_untouched(db: Path, before: bytes) -> None:
    assert db.read_bytes() == before, "rsi wrote to the damaged file"
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size <= 32, "rsi wrote pages for the damaged file into its -wal"


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_store_is_one_line_with_the_fix_and_stays_untouched(ws: Path, case: str, command: str) -> None:
    db, before = _damage(ws, case)
    args = [a.format(ws=ws) for a in COMMANDS[command]]
    r = runner.invoke(app, ["-w", str(ws), *args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {db}: "), r.output
    assert CASES[case][1] in lines[0], lines[0]
    assert f"(`mv {db} {db}.damaged`) and run the command again" in lines[0], lines[0]
    assert "internal error" not in r.output and "Traceback" not in r.output
    _assert_untouched(db, before)


@pytest.mark.parametrize("case", list(CASES))
def test_doctor_reports_a_bad_store_as_a_failed_check_with_the_fix(ws: Path, case: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    class NoDaemon:
        def ping(self) -> None:
            raise RuntimeError("no daemon in unit tests")

    monkeypatch.setattr("rsi.sandbox.registry.get_provider", lambda *_a, **_k: NoDaemon())
    db, before = _damage(ws, case)
    r = runner.invoke(app, ["-w", str(ws), "doctor", "--no-start", "--json"])
    assert r.exit_code == 1, r.output  # doctor's "something is missing", not a crash
    checks = {c["name"]: c for c in json.loads(r.output)}
    assert checks["database"]["ok"] is False
    assert checks["database"]["detail"].startswith(f"{db} ") and CASES[case][1].split(";")[0] in (
        f"{checks['database']['detail']}; {checks['database']['fix']}")
    assert checks["database"]["fix"].endswith("and run the command again: rsi makes a fresh store there from "
                                              "generations/ (the old file's jobs and trials are not carried over)")
    assert f"mv {db} {db}.damaged" in checks["database"]["fix"]
    assert checks["model endpoint"]["ok"] is False and "database" in checks["model endpoint"]["fix"]
    _assert_untouched(db, before)


def test_the_fix_works_and_moves_the_wal_that_belongs_to_the_file(ws: Path) -> None:
    """Doing what the line says (mv, sidecar files included) makes the next command work again."""
    db = ws / ".rsi" / "rsi.db"
    db.write_text("garbage\n")
    Path(f"{db}-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 60)  # a leftover WAL of the damaged file
    (ws / ".rsi" / "rsi.db.damaged").write_text("an earlier one, kept")
    r = runner.invoke(app, ["-w", str(ws), "jobs", "list"])
    assert r.exit_code == 2, r.output
    aside = ws / ".rsi" / "rsi.db.damaged-2"  # the earlier rsi.db.damaged is not overwritten
    cmd = r.output.split("(`", 1)[1].split("`)", 1)[0]
    assert cmd == f"mv {db} {aside} && mv {db}-wal {aside}-wal", cmd
    for part in cmd.split(" && "):
        _mv, src, dst = shlex.split(part)
        Path(src).rename(dst)
    r = runner.invoke(app, ["-w", str(ws), "generations", "list", "--json"])
    assert r.exit_code == 0, r.output
    assert [g["id"] for g in json.loads(r.output)] == ["gen-0000"]  # registered again from generations/
    assert aside.read_text() == "garbage\n"


def test_a_missing_or_empty_database_is_still_made_fresh(tmp_path: Path) -> None:
    """What is not damage: no file yet, or a SQLite database with no tables (migrations fill both)."""
    fresh = tmp_path / "a" / "rsi.db"
    Store(f"sqlite:///{fresh}").close()
    empty = tmp_path / "empty.db"
    _sqlite(empty, "PRAGMA user_version = 7")  # a header and no tables
    assert empty.read_bytes().startswith(b"SQLite format 3\0")
    for path in (fresh, empty):
        with Store(f"sqlite:///{path}") as s:
            assert s.list_generations() == []
