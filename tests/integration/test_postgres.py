"""A real PostgreSQL server (Debian packages), started by the test set-up: migrations from a blank
database, two drivers running two jobs at once on one store, and a job's row lease (a resume is
refused while another live driver holds the job, and allowed once a `kill -9`ed driver's lease ran out).

The drivers are separate processes on the fake sandbox (the store is what is under test here; the
Ray tests run trials in Docker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

from rsi.core.errors import ConfigError
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import RunRequest, run_job
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.db import current_revision, downgrade, head_revision, migrate
from rsi.store.repo import Store
from tests.pgserver import PgServer, pg_bin
from tests.prereq import unavailable
from tests.taskgen import make_tasks

REPO = Path(__file__).resolve().parents[2]
SLOW_OK = 'sleep {s}; echo ok > "${{SANDBOX_ROOT:-}}/app/out.txt"\n'

DRIVER = """
import sys
from pathlib import Path
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import RunRequest, run_job
from rsi.sandbox.fake import FakeSandboxProvider
ws, fake, *tasks = sys.argv[1:]
ctx = WorkspaceContext.open(Path(ws))
resume = tasks[0][len("--resume="):] if tasks[0].startswith("--resume=") else None
req = RunRequest(paths=[] if resume else [Path(t) for t in tasks], agent="oracle", resume=resume)
out = run_job(ctx, req, provider=FakeSandboxProvider(Path(fake)))
print(out.job.id, out.job.status, flush=True)
"""


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    bindir = pg_bin()
    if bindir is None:
        unavailable("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb); apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed; pip install -e '.[cluster]'")
    server = PgServer(bindir).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_workspace(pg: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    from rsi.loop.init import init_workspace

    url = pg.new_database()
    monkeypatch.setenv("RSI_DATABASE_URL", url)
    monkeypatch.setenv("RSI_LEASE_SECONDS", "4")
    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    contract = root / "contracts" / "hcp-1.0.yaml"
    contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
    yield root, url


def _driver(root: Path, fake: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(root), str(fake), *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))


def _running_jobs(url: str) -> list[str]:
    with Store(url) as s:
        return [j.id for j in s.list_jobs() if j.status == "running"]


def _wait_for(cond, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _same_type(_ctx, _icol, _mcol, inspected: sa.types.TypeEngine, declared: sa.types.TypeEngine) -> bool | None:  # type: ignore[no-untyped-def]
    """Types compared as on SQLite; rsi's UTCDateTime (a TypeDecorator over DateTime) is PostgreSQL's
    TIMESTAMP, which alembic would otherwise report as a change."""
    impl = getattr(declared, "impl", declared)
    if isinstance(impl, sa.DateTime) and isinstance(inspected, sa.DateTime):
        return False
    return None


def test_migrations_from_blank_on_postgres(pg: PgServer) -> None:
    url = pg.new_database()
    store = Store(url)
    assert store.engine.dialect.name == "postgresql"
    assert current_revision(store.engine) == head_revision()
    with store.engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": _same_type})
        diff = list(compare_metadata(mc, SQLModel.metadata))
    assert diff == [], "migrations and rsi/store/tables.py disagree on PostgreSQL"
    downgrade(store.engine, "0001")
    assert current_revision(store.engine) == "0001"
    migrate(store.engine)
    assert current_revision(store.engine) == head_revision()
    store.close()


def test_two_drivers_run_two_jobs_at_once_and_a_held_job_is_not_resumed(
        pg_workspace: tuple[Path, str], tmp_path: Path) -> None:
    root, url = pg_workspace
    a = make_tasks(tmp_path / "a", 3, prefix="a", solve=SLOW_OK.format(s=1))
    b = make_tasks(tmp_path / "b", 3, prefix="b", solve=SLOW_OK.format(s=1))
    d1 = _driver(root, tmp_path / "fake1", *map(str, a))
    d2 = _driver(root, tmp_path / "fake2", *map(str, b))
    try:
        _wait_for(lambda: len(_running_jobs(url)) == 2)
        held = _running_jobs(url)[0]
        ctx = WorkspaceContext.open(root)
        with pytest.raises(ConfigError, match="still running"):
            run_job(ctx, RunRequest(paths=[], resume=held), provider=FakeSandboxProvider(tmp_path / "fake3"))
        ctx.store.close()
        outs = [d.communicate(timeout=120) for d in (d1, d2)]
    finally:
        for d in (d1, d2):
            if d.poll() is None:
                d.kill()
    assert d1.returncode == 0 and d2.returncode == 0, outs
    with Store(url) as s:
        jobs = s.list_jobs()
        assert sorted(j.status for j in jobs) == ["done", "done"]
        for j in jobs:
            trials = s.trials(j.id)
            assert len(trials) == 3 and all(t.passed and t.status == "done" for t in trials)
            assert j.lease_owner is None
        assert s.live_job_ids() == set()


def test_resume_after_kill_9_waits_for_the_lease_then_finishes(
        pg_workspace: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, url = pg_workspace
    monkeypatch.setenv("RSI_LEASE_SECONDS", "9")  # outlasts starting the second driver on a busy machine
    tasks = make_tasks(tmp_path / "t", 4, prefix="k", solve=SLOW_OK.format(s=1))
    d = _driver(root, tmp_path / "fake1", *map(str, tasks))
    try:
        def one_done() -> bool:
            with Store(url) as s:
                jobs = s.list_jobs()
                return bool(jobs) and any(t.status == "done" for t in s.trials(jobs[0].id))

        _wait_for(one_done)
        d.send_signal(signal.SIGKILL)
        d.wait(timeout=30)
    finally:
        if d.poll() is None:
            d.kill()
    with Store(url) as s:
        job = s.list_jobs()[0]
        done_before = {t.id: t.finished_at for t in s.trials(job.id) if t.status == "done"}
        assert job.status == "running" and job.id in s.live_job_ids()  # its lease has not run out yet
    ctx = WorkspaceContext.open(root)
    with pytest.raises(ConfigError, match="still running"):
        run_job(ctx, RunRequest(paths=[], resume=job.id), provider=FakeSandboxProvider(tmp_path / "fake3"))
    ctx.store.close()
    with Store(url) as s:
        _wait_for(lambda: job.id not in s.live_job_ids(), timeout=30)  # the dead driver's lease runs out
    again = _driver(root, tmp_path / "fake2", f"--resume={job.id}")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    with Store(url) as s:
        trials = s.trials(job.id)
        assert s.get_job(job.id).status == "done" and len(trials) == 4 and all(t.passed for t in trials)
        for t in trials:  # finished trials were not paid again
            if t.id in done_before:
                assert t.finished_at == done_before[t.id]


WRITES_LOG = (  # each UPDATE of trials and jobs, with the writer's application_name (PGAPPNAME)
    "CREATE TABLE writes_log (tbl text, row_id text, app text, lease_owner text, at timestamptz)",
    """CREATE FUNCTION log_write() RETURNS trigger AS $$
BEGIN
  INSERT INTO writes_log VALUES (TG_TABLE_NAME, NEW.id, current_setting('application_name'),
    to_jsonb(NEW) ->> 'lease_owner', clock_timestamp());  -- (NULL for trials: a row with no such field)
  RETURN NEW;
END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER trials_log AFTER UPDATE ON trials FOR EACH ROW EXECUTE FUNCTION log_write()",
    "CREATE TRIGGER jobs_log AFTER UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION log_write()",
)


def test_a_driver_whose_lease_is_taken_over_stops_and_writes_nothing_more(
        pg_workspace: tuple[Path, str], tmp_path: Path) -> None:
    """Driver 1's lease is expired in the database and driver 2 resumes the job: driver 1 stops with the
    one-line error, and every committed write after driver 2 took the job is driver 2's (a trigger logs
    each UPDATE of `trials` and `jobs` with the writer's application_name)."""
    root, url = pg_workspace
    with sa.create_engine(url).begin() as c:
        for statement in WRITES_LOG:
            c.execute(sa.text(statement))
    tasks = make_tasks(tmp_path / "t", 12, prefix="s", solve=SLOW_OK.format(s=3))  # outlasts starting driver 2
    # driver 1 renews every 30 s, so the expired lease stays expired until driver 2 has taken it
    d1 = subprocess.Popen([sys.executable, "-c", DRIVER, str(root), str(tmp_path / "fake1"), *map(str, tasks)],
                          cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={**os.environ, "RSI_LEASE_SECONDS": "90", "PGAPPNAME": "driver1"})
    d2: subprocess.Popen[str] | None = None
    try:
        def one_done() -> bool:
            if d1.poll() is not None:  # driver 1 ended before running a trial: say why
                raise AssertionError(f"driver 1 exited {d1.returncode}: {d1.communicate()}")
            with Store(url) as s:
                jobs = s.list_jobs()
                return bool(jobs) and any(t.status == "done" for t in s.trials(jobs[0].id))

        _wait_for(one_done)
        with Store(url) as s:
            job_id = s.list_jobs()[0].id
            with s.engine.begin() as c:  # driver 1's lease runs out (as if it had stalled past it)
                c.execute(sa.text("UPDATE jobs SET lease_until = 0 WHERE id = :id"), {"id": job_id})
        d2 = subprocess.Popen([sys.executable, "-c", DRIVER, str(root), str(tmp_path / "fake2"), f"--resume={job_id}"],
                              cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, "PGAPPNAME": "driver2"})
        out1, err1 = d1.communicate(timeout=120)
        out2, err2 = d2.communicate(timeout=180)
    finally:
        for d in (d1, d2):
            if d is not None and d.poll() is None:
                d.kill()
    assert d1.returncode == 1, (out1, err1)
    last = err1.strip().splitlines()[-1]
    assert f"job {job_id} stopped: another driver took it over" in last, err1
    assert f"`rsi run --resume {job_id}` from the driver that owns it finishes it" in last
    assert d2.returncode == 0, err2
    with Store(url) as s:
        trials = s.trials(job_id)
        job = s.get_job(job_id)
        assert job.status == "done" and job.lease_owner is None
        assert len(trials) == 12 and all(t.status == "done" and t.passed for t in trials)
    with sa.create_engine(url).connect() as c:
        log = c.execute(sa.text("SELECT tbl, row_id, app, lease_owner, at FROM writes_log ORDER BY at")).all()
    taken = min(at for tbl, _id, app, owner, at in log if tbl == "jobs" and app == "driver2" and owner)
    late = [(tbl, rid) for tbl, rid, app, _o, at in log if app == "driver1" and at > taken]
    assert late == [], f"driver 1 wrote after driver 2 took the job over: {late}"
    assert any(app == "driver1" and tbl == "trials" for tbl, _r, app, _o, _a in log)  # it did run trials before


def test_the_diff_reads_run_on_postgres(pg_workspace: tuple[Path, str], tmp_path: Path) -> None:
    """`rsi diff`'s reads are plain SQL (rsi.store.queries_diff) that SQLite and PostgreSQL both run; with
    RSI_DATABASE_URL set, reports read through the store, never through the SQLite-only reader."""
    from rsi.core.generation import GenerationState
    from rsi.report.diff import build_diff

    root, _url = pg_workspace
    tasks = make_tasks(tmp_path / "t", 3, prefix="d", solve=SLOW_OK.format(s=0))
    ctx = WorkspaceContext.open(root)
    out = run_job(ctx, RunRequest(paths=tasks, agent="oracle", generation="gen-0000"),
                  provider=FakeSandboxProvider(tmp_path / "fake"))
    try:
        assert ctx.reader is ctx.store
        store = ctx.store
        g0 = store.generation_manifest("gen-0000")
        trial = store.trials(out.job.id)[0]
        cells = store.task_cells("gen-0000", trial.harness_config_digest, "oracle")
        assert sorted((c["trials"], c["passes"], c["infra"]) for c in cells) == [(1, 1, 0)] * 3
        links = store.task_trial_ids("gen-0000", trial.harness_config_digest, [c["digest"] for c in cells], "oracle")
        assert sorted(len(v) for v in links.values()) == [1, 1, 1] and all(v[0]["passed"] for v in links.values())
        assert [(u["generation"], u["trials"]) for u in store.phase_usage(["gen-0000"])] == [("gen-0000", 3)]
        store.put_generation(g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000",
                                                   "state": GenerationState.CANDIDATE}))
        report = build_diff(ctx, "gen-0000", "gen-0001", agent="oracle")
        assert report.spend and report.config["same"] and not report.gate
        assert store.config_yaml(g0.harness_config.digest) and store.task_families() is not None
    finally:
        ctx.store.close()
