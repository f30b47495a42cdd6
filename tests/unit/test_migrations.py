"""Migrations build exactly the SQLModel tables, from a blank file and from revision 0001 with rows in it."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel

from rsi.core.generation import GenerationState
from rsi.store.db import current_revision, downgrade, head_revision, make_engine, migrate
from rsi.store.repo import Store

MANIFEST = (
    '{"schema_version": 1, "id": "gen-0000", "parent": null, "state": "promoted", "contract": "1.0.0",'
    ' "base_model": {"id": "base", "digest": null}, "adapters": {},'
    ' "harness_config": {"name": "default", "digest": "cfg0"}, "provenance": {}, "metrics": {}}'
)


def _schema_diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(mc, SQLModel.metadata))


def _rows_at_0001(engine: Engine) -> None:
    """What a workspace written before 0002 holds: one generation, task, job and finished trial."""
    now = "2024-01-01 00:00:00.000000"
    with engine.begin() as c:
        c.execute(text(
            "INSERT INTO generations (id, parent, state, contract, base_model_id, harness_config_name,"
            " harness_config_digest, serve_name, manifest_json, created_at)"
            " VALUES ('gen-0000', NULL, 'promoted', '1.0.0', 'base', 'default', 'cfg0', 'base', :m, :now)"
        ), {"m": MANIFEST, "now": now})
        c.execute(text(
            "INSERT INTO tasks (digest, name, path, family, split, difficulty, state, created_at)"
            " VALUES ('d0', 't0', '/tasks/t0', 'fam', 'train', 1, 'active', :now)"
        ), {"now": now})
        c.execute(text(
            "INSERT INTO jobs (id, kind, status, agent, generation, harness_config_digest, attempts, concurrency,"
            " task_paths_json, tasks_fingerprint, owner_pid, owner_host, created_at, updated_at, finished_at)"
            " VALUES ('job-old', 'run', 'done', 'oracle', 'gen-0000', NULL, 1, 1, '[]', 'fp', NULL, NULL,"
            " :now, :now, :now)"
        ), {"now": now})
        c.execute(text(
            "INSERT INTO trials (id, job_id, task_name, task_digest, generation, agent, attempt, status, reward,"
            " passed, error_type, error_message, infra_retries, t_build, t_agent, t_verify, t_total, prompt_tokens,"
            " completion_tokens, cached_tokens, harness_config_digest, model_name, trial_dir, started_at,"
            " finished_at) VALUES ('job-old.t0.1', 'job-old', 't0', 'd0', 'gen-0000', 'oracle', 1, 'done', 1.0,"
            " 1, NULL, NULL, 0, 1.0, 2.0, 3.0, 6.0, 0, 0, 0, NULL, NULL, '/tmp/t0.1', :now, :now)"
        ), {"now": now})


def test_migrations_from_blank_db_equal_the_tables(tmp_path: Path) -> None:
    db = tmp_path / "blank.db"
    assert not db.exists()
    store = Store(f"sqlite:///{db}")
    assert current_revision(store.engine) == head_revision() == "0008"
    assert _schema_diff(store.engine) == [], "migrations and rsi/store/tables.py disagree"
    store.close()


def test_upgrade_from_0001_keeps_rows_and_fills_defaults(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    migrate(engine, "0001")
    assert current_revision(engine) == "0001"
    _rows_at_0001(engine)
    migrate(engine)
    assert current_revision(engine) == "0008"
    assert _schema_diff(engine) == [], "an upgraded database must equal a fresh one"
    engine.dispose()

    store = Store(url)
    t = store.get_trial("job-old.t0")
    assert (t.status, t.reward, t.passed, t.t_total) == ("done", 1.0, True, 6.0)
    assert (t.split, t.arm_id, t.variant, t.integrity, t.verifier_exit_code) == ("train", None, None, None, None)
    assert (t.turns, t.t_queue, t.t_snapshot) == (0, 0.0, 0.0)
    assert (t.rewards, t.changed_paths, t.tampered_paths, t.tamper_reasons, t.widened_roots, t.infra_attempts) == (
        {}, [], [], [], [], []
    )
    job = store.get_job("job-old")
    assert (job.status, job.phase, job.arm_ids, job.interrupted_reason) == ("done", None, [], None)
    assert (job.parent_job, job.params) == (None, {})
    task = store.task_rows()[0]
    assert (task.generator, task.probe_trials, task.probe_pass_rate, task.state) == (None, 0, None, "active")
    assert store.get_generation("gen-0000").state == GenerationState.PROMOTED
    assert [x.id for x in store.outcomes("expand", agent="oracle")] == ["job-old.t0.1"]
    assert store.arms_of_job("job-old") == []
    # the new tables work on the upgraded file, and the old generation row can take events
    store.set_generation_state("gen-0000", "superseded", "test")
    assert [(e.from_state, e.to_state) for e in store.generation_events("gen-0000")] == [("promoted", "superseded")]
    store.close()


def test_downgrade_to_0001_and_back_keeps_the_old_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rt.db'}"
    engine = make_engine(url)
    migrate(engine, "0001")
    _rows_at_0001(engine)
    migrate(engine)
    downgrade(engine, "0001")
    assert current_revision(engine) == "0001"
    with engine.connect() as c:
        cols = {r[1] for r in c.execute(text("PRAGMA table_info(trials)"))}
        tables = {r[0] for r in c.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))}
        assert c.execute(text("SELECT count(*) FROM trials")).scalar() == 1
    assert "split" not in cols and "infra_attempts_json" not in cols
    assert "budgets" not in tables and "attributions" not in tables
    assert "candidates" not in tables and "curriculum" not in tables
    migrate(engine)
    assert _schema_diff(engine) == []
    engine.dispose()


def test_known_revisions_are_alembics() -> None:
    """rsi.store.db.REVISIONS (the list an open at head checks without alembic) is every migration, in order:
    a new migration not added there would be taken for a database from a newer rsi."""
    from rsi.store.db import HEAD, REVISIONS, _script

    walked = [s.revision for s in _script().walk_revisions()]  # newest first
    assert list(REVISIONS) == walked[::-1]
    assert head_revision() == HEAD


def test_open_at_head_does_not_import_alembic(tmp_path) -> None:
    """A second open of a store already at head reads its revision with one SELECT (no alembic import)."""
    import subprocess
    import sys

    db = tmp_path / "rsi.db"
    Store(f"sqlite:///{db}").close()
    code = (f"import sys; from rsi.store.repo import Store; s = Store('sqlite:///{db}'); "
            "print(any(m == 'alembic' or m.startswith('alembic.') for m in sys.modules)); s.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
