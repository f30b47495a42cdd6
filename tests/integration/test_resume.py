"""`rsi run` survives a kill -9 and a Ctrl-C: resume finishes every trial once, nothing is left running.

The job runs as a real `python -m rsi` subprocess; the test watches its SQLite file (read-only)
and the daemon's rsi-labelled containers to pick the moment to kill it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from rsi.loop.init import init_workspace
from rsi.sandbox.base import LABEL_JOB, LABEL_KIND, LABEL_TRIAL, SandboxSpec
from rsi.sandbox.docker import DockerSandboxProvider
from tests.integration.conftest import BASE_IMAGE, TEST_JOB_PREFIX
from tests.taskgen import SOLVE_OK, make_tasks

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SLOW_SOLVE = "sleep 2\n" + SOLVE_OK


def rsi(ws: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", "-w", str(ws), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def start_rsi(ws: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(ws), *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def db_rows(ws: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:  # type: ignore[type-arg]
    db = ws / ".rsi" / "rsi.db"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
            return list(conn.execute(sql, params))
    except sqlite3.Error:
        return []  # not created or not migrated yet


def job_containers(api: docker.APIClient, job: str) -> list[dict]:  # type: ignore[type-arg]
    return list(api.containers(all=True, filters={"label": f"{LABEL_JOB}={job}"}))


def wait_for(
    what: str, cond: Callable[[], object], proc: subprocess.Popen[str], timeout: float = 120
) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"rsi exited {proc.returncode} before {what}:\n{out[-2000:]}\n{err[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    return root


@pytest.fixture
def api() -> docker.APIClient:
    return DockerSandboxProvider().api


@pytest.fixture
def bystander() -> Iterator[str]:
    """A running container of another workspace's job: nothing in this test may remove it."""
    provider = DockerSandboxProvider()
    job = f"{TEST_JOB_PREFIX}bystander-{os.getpid()}"
    sb = provider.start(SandboxSpec(image=BASE_IMAGE, labels={LABEL_JOB: job, LABEL_TRIAL: f"{job}.x.1",
                                                              LABEL_KIND: "trial"}))
    yield sb.id
    sb.stop()


def test_kill_9_then_resume_runs_every_trial_once(
    ws: Path, tmp_path: Path, api: docker.APIClient, bystander: str
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 6, solve=SLOW_SOLVE)
    proc = start_rsi(ws, "run", str(tasks), "--agent", "oracle", "-n", "2", "--json")
    job = str(wait_for("the job row", lambda: (db_rows(ws, "SELECT id FROM jobs") or [[None]])[0][0], proc))

    def midway() -> bool:
        sql = "SELECT status, count(*) FROM trials WHERE job_id=? GROUP BY status"
        status = dict(db_rows(ws, sql, (job,)))
        return status.get("done", 0) >= 1 and status.get("pending", 0) >= 1 and bool(job_containers(api, job))

    wait_for("one trial done, others not, containers up", midway, proc)
    sql = "SELECT id, finished_at FROM trials WHERE job_id=? AND status='done'"
    done_before = dict(db_rows(ws, sql, (job,)))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert job_containers(api, job), "kill -9 should have left the job's containers behind"
    assert db_rows(ws, "SELECT status FROM jobs WHERE id=?", (job,)) == [("running",)]

    res = rsi(ws, "run", "--resume", job, "-n", "2", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["job"] == job and out["status"] == "done" and len(out["trials"]) == 6
    rows = db_rows(ws, "SELECT task_name, attempt, count(*), min(status), max(status), min(passed) "
                       "FROM trials WHERE job_id=? GROUP BY task_name, attempt", (job,))
    assert sorted((r[0], r[1]) for r in rows) == [(f"t{i:02d}", 1) for i in range(6)]
    assert all(r[2] == 1 and r[3] == r[4] == "done" and r[5] == 1 for r in rows), rows
    after = dict(db_rows(ws, "SELECT id, finished_at FROM trials WHERE job_id=?", (job,)))
    assert all(after[t] == f for t, f in done_before.items()), "resume re-ran a trial that had finished"
    assert db_rows(ws, "SELECT status FROM jobs WHERE id=?", (job,)) == [("done",)]
    assert not job_containers(api, job), "resume must sweep the dead run's containers"
    assert api.inspect_container(bystander)["State"]["Running"], "resume removed another job's container"

    gc = rsi(ws, "sandbox", "gc", "--json")
    assert gc.returncode == 0, gc.stderr
    assert not api.containers(all=True, filters={"label": f"{LABEL_JOB}={job}"})
    assert api.inspect_container(bystander)["State"]["Running"], "gc removed another workspace's container"


def test_ctrl_c_leaves_no_containers_and_says_how_to_resume(
    ws: Path, tmp_path: Path, api: docker.APIClient
) -> None:
    tasks = tmp_path / "tasks"
    make_tasks(tasks, 4, solve="sleep 30\n" + SOLVE_OK)
    proc = start_rsi(ws, "run", str(tasks), "--agent", "oracle", "-n", "2")
    job = str(wait_for("the job row", lambda: (db_rows(ws, "SELECT id FROM jobs") or [[None]])[0][0], proc))
    wait_for("two trial containers", lambda: len(job_containers(api, job)) >= 2, proc)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - t0 < 30, "Ctrl-C waited for the agents instead of stopping them"
    assert f"rsi run --resume {job}" in err
    assert not job_containers(api, job), "Ctrl-C left containers behind"
    assert not api.images(filters={"label": f"{LABEL_JOB}={job}"}), "Ctrl-C left snapshot images behind"
    assert db_rows(ws, "SELECT status FROM jobs WHERE id=?", (job,)) == [("interrupted",)]
    assert db_rows(ws, "SELECT count(*) FROM trials WHERE job_id=? AND status='done'", (job,)) == [(0,)]

    refused = rsi(ws, "run", "--resume", job, "--agent", "nop")
    assert refused.returncode == 2
    errors = [ln for ln in refused.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "agent 'oracle', not 'nop'" in errors[0], refused.stderr
    assert db_rows(ws, "SELECT status FROM jobs WHERE id=?", (job,)) == [("interrupted",)]
