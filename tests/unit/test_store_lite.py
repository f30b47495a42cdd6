"""The light reader `rsi diff` reads through (rsi.store.lite): the same answers as the store, without the ORM,
and never used where the full store must open the database."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rsi.core.errors import NotFoundError, StoreError
from rsi.loop.context import WorkspaceContext
from rsi.report.diff import build_diff
from rsi.store.lite import LiteReader, open_lite
from rsi.store.queries_rates import RateScope
from tests.unit.test_diff_report import ws  # noqa: F401 - the fixture: gen-0001 promoted over gen-0000

REPO = Path(__file__).resolve().parents[2]


def _reads(r: object, g0: str, g1: str, d0: str, d1: str, digests: list[str]) -> dict[str, object]:
    return {
        "cells0": sorted(r.task_cells(g0, d0, "better"), key=json.dumps),  # type: ignore[attr-defined]
        "cells1": sorted(r.task_cells(g1, d1, "better"), key=json.dumps),  # type: ignore[attr-defined]
        "cells_other_agent": r.task_cells(g1, d1, agent="nobody"),  # type: ignore[attr-defined]
        "trial_ids": r.task_trial_ids(g1, d1, digests, "better"),  # type: ignore[attr-defined]
        "usage": r.phase_usage([g0, g1]),  # type: ignore[attr-defined]
        "families": r.task_families(),  # type: ignore[attr-defined]
        "kinds0": r.attribution_kinds(g0),  # type: ignore[attr-defined]
        "kinds1": r.attribution_kinds(g1),  # type: ignore[attr-defined]
        "verdict": r.promote_verdict(g1, g0),  # type: ignore[attr-defined]
        "no_verdict": r.promote_verdict(g0, g1),  # type: ignore[attr-defined]
        "manifest": r.generation_manifest(g1).model_dump(mode="json"),  # type: ignore[attr-defined]
        "config": r.config_yaml(d1),  # type: ignore[attr-defined]
        "no_config": r.config_yaml("0" * 64),  # type: ignore[attr-defined]
        "tally": r.pass_tally(RateScope(parts=None), generation=g1).as_json(),  # type: ignore[attr-defined]
        "model_agents": sorted(r.model_agents()),  # type: ignore[attr-defined]
    }


def test_the_light_reader_answers_as_the_store_does(ws: WorkspaceContext) -> None:  # noqa: F811
    g0, g1 = ws.generation("gen-0000"), ws.generation("gen-0001")
    d0, d1 = g0.harness_config.digest, g1.harness_config.digest
    digests = [c["digest"] for c in ws.store.task_cells(g1.id, d1, "better")]
    lite = open_lite(ws.ws.db_path)
    assert isinstance(lite, LiteReader)
    try:
        got, want = _reads(lite, g0.id, g1.id, d0, d1, digests), _reads(ws.store, g0.id, g1.id, d0, d1, digests)
        assert got == want
        assert want["cells1"] and want["trial_ids"] and want["usage"] and want["verdict"] and want["kinds1"]
        with pytest.raises(NotFoundError, match="unknown generation 'gen-0042'; known: gen-0000, gen-0001"):
            lite.generation_manifest("gen-0042")
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            lite._tuples("DELETE FROM trials")
        assert lite._tuples("SELECT COUNT(*) FROM trials")[0][0] > 0
    finally:
        lite.close()


def test_a_fresh_context_reports_through_the_light_reader_and_the_report_is_the_same(
        ws: WorkspaceContext) -> None:  # noqa: F811
    want = build_diff(ws, "gen-0000", "gen-0001", agent="better").as_json()
    fresh = WorkspaceContext.open(ws.ws.root)
    assert isinstance(fresh.reader, LiteReader) and "store" not in fresh.__dict__
    got = build_diff(fresh, "gen-0000", "gen-0001", agent="better").as_json()
    fresh.reader.close()  # type: ignore[attr-defined]
    assert got == want and got["flips"]["fixed"] > 0 and got["gate"]
    assert ws.reader is ws.store  # a context whose store is open reads through it


def _at(db: Path, sql: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("case", ["older schema", "no generation", "database url", "no file"])
def test_the_full_store_opens_what_the_reader_must_not(ws: WorkspaceContext, case: str,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = ws.ws.db_path
    ws.store.close()
    if case == "older schema":  # the store migrates it: the reader never reads an old schema
        _at(db, "UPDATE alembic_version SET version_num = '0007'")
    elif case == "no generation":  # the store registers generations/ on a fresh clone
        _at(db, "DELETE FROM generations")
    elif case == "database url":  # PostgreSQL (or any URL): the store's engine
        monkeypatch.setenv("RSI_DATABASE_URL", f"sqlite:///{tmp_path / 'other.db'}")
    else:
        db = tmp_path / "missing" / "rsi.db"
    assert open_lite(db) is None
    assert not (tmp_path / "missing").exists()


def test_a_damaged_file_is_the_stores_one_line_error(tmp_path: Path) -> None:
    db = tmp_path / "rsi.db"
    db.write_bytes(b"not a database, just text\n" * 10)
    with pytest.raises(StoreError, match="is not a SQLite database") as e:
        open_lite(db)
    assert str(db) in str(e.value) and db.read_bytes().startswith(b"not a database")


def test_rsi_diff_imports_no_orm(ws: WorkspaceContext) -> None:  # noqa: F811
    """`rsi diff` on a store at head never imports SQLAlchemy or SQLModel (~0.7 s of its 2 s budget)."""
    ws.store.close()
    code = ("import sys\nfrom rsi.cli.app import main\nsys.argv = ['rsi', '-w', sys.argv[1], 'diff', 'gen-0000', "
            "'gen-0001', '-f', 'json']\ntry:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'sqlmodel', 'alembic')),"
            " file=sys.stderr)\n")
    cp = subprocess.run([sys.executable, "-c", code, str(ws.ws.root)], capture_output=True, text=True,
                        cwd=REPO, env={**os.environ, "COLUMNS": "120"}, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(cp.stdout)["b"] == "gen-0001"
