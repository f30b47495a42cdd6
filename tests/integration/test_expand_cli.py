"""`rsi expand` as a new user runs it: the CLI in a subprocess, real Docker, a real local policy server.

The job is `kill -9`ed in the middle of the config search (a candidate's trial not finished, its
containers up), `rsi sandbox gc` sweeps what the dead process left, and `rsi expand --resume JOB`
finishes it: every planned trial recorded exactly once, no finished trial re-run, the budget's
spent figure equal to the trials recorded, and the outcome (attribution table, coverage against the
best single config, the adopted config file) as the ground truth of benchmarks/policy_server.py
says: `easy` solved by any config, `cold` (and `cold-0`..`cold-2`) only at sampling.temperature=0.2, `never`
by none. Four tasks won at equal attempts is a gain beyond noise (one-sided sign test p = 1/16), so
temperature 0.2 is adopted. Few-shot candidates are off here (tests/integration/test_expand_fewshot_docker.py).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.loop.init import init_workspace
from rsi.sandbox.base import LABEL_JOB
from tests.integration.test_resume import db_rows, rsi, start_rsi, wait_for
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

RULES: dict[str, Any] = {"easy": {}, "cold": rule_for({"temperature": 0.2}), "never": None,
                         **{f"cold-{i}": rule_for({"temperature": 0.2}) for i in range(3)}}


@pytest.fixture
def ws(tmp_path: Path, docker_ready: None) -> Iterator[Path]:
    with serve(Policy(rules=dict(RULES))) as url:
        root = tmp_path / "ws"
        (root / "harness_configs").mkdir(parents=True)
        cfg = CONFIG.format(endpoint=url)
        space = "search_space:\n  sampling.temperature: [0.2]\n  loop.max_turns: [8]\n"
        cfg = cfg[: cfg.index("search_space:")] + space
        (root / "harness_configs" / "default.yaml").write_text(cfg)
        init_workspace(root, starter_tasks=False)
        for name in RULES:
            make_task(root / "tasks", name, solve="sleep 1\n" + 'echo ok > "${SANDBOX_ROOT:-}/app/out.txt"\n')
        yield root


def _children(ws: Path, job: str) -> list[str]:
    return [r[0] for r in db_rows(ws, "SELECT id FROM jobs WHERE parent_job=?", (job,))]


def _trials(ws: Path, job: str) -> list[tuple[Any, ...]]:
    sql = ("SELECT t.id, t.status, t.harness_config_digest, t.agent, t.finished_at, t.task_name, t.attempt, t.job_id "
           "FROM trials t JOIN jobs j ON t.job_id = j.id WHERE j.parent_job=?")
    return db_rows(ws, sql, (job,))


def test_expand_killed_mid_search_then_resumed_from_the_cli(ws: Path) -> None:
    api = docker.from_env().api
    proc = start_rsi(ws, "expand", "--budget", "60", "-k", "1", "--proposals", "0", "--fewshot", "0", "--json")
    job = str(wait_for("the expand job", lambda: (db_rows(ws, "SELECT id FROM jobs WHERE kind='expand'")
                                                   or [[None]])[0][0], proc))
    base = db_rows(ws, "SELECT harness_config_digest FROM generations WHERE id='gen-0000'")[0][0]

    def mid_search() -> bool:
        search = [t for t in _trials(ws, job) if t[3] == "harness" and t[2] != base]
        running = [c for j in _children(ws, job) for c in api.containers(filters={"label": f"{LABEL_JOB}={j}"})]
        return any(t[1] != "done" for t in search) and bool(running)

    wait_for("a search trial under way with its containers up", mid_search, proc, timeout=300)
    done_before = {t[0]: t[4] for t in _trials(ws, job) if t[1] == "done"}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert db_rows(ws, "SELECT status FROM jobs WHERE id=?", (job,)) == [("running",)]

    gc = rsi(ws, "sandbox", "gc", "--json")
    assert gc.returncode == 0, gc.stderr[-2000:]
    for j in _children(ws, job):
        assert not api.containers(all=True, filters={"label": f"{LABEL_JOB}={j}"}), f"gc left {j}'s containers"

    res = rsi(ws, "expand", "--resume", job, "--budget", "60", "--json", timeout=500)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["job_id"] == job and not out["interrupted"]

    trials = _trials(ws, job)
    assert all(t[1] == "done" for t in trials)
    keys = [(t[7], t[5], t[3], t[2], t[6]) for t in trials]  # job, task, agent, config, attempt
    assert len(set(keys)) == len(keys), f"recorded twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    after = {t[0]: t[4] for t in trials}
    assert all(after[t] == f for t, f in done_before.items()), "resume re-ran a finished trial"
    assert out["budget"]["spent"]["all"] == out["trials"] == len(trials) - out["infra_trials"]

    kinds = {a["task"]: a for a in json.loads(rsi(ws, "attribution", "--json").stdout)}
    assert kinds["cold"]["kind"] == "config" and kinds["cold"]["variant"] == "sampling.temperature=0.2"
    assert kinds["never"]["kind"] == "model" and "easy" not in kinds
    assert all(set(a["evidence"]) <= set(after) for a in kinds.values()), "a verdict cites an unknown trial"
    assert out["baseline"]["tasks_solved"] == 1 and out["coverage"]["solved"] == 5
    assert out["best"]["label"] == "sampling.temperature=0.2" and out["best"]["tasks_solved"] == 5
    assert out["best"]["wins"] == 4 and out["best"]["losses"] == 0 and out["best"]["p_value"] < 0.1
    adopted = Path(out["adopted"]["path"])
    assert out["adopted"]["new"] and adopted.parent == ws / "harness_configs"
    data = yaml.safe_load(adopted.read_text())
    assert data["sampling"]["temperature"] == 0.2 and out["adopted"]["digest"] in adopted.read_text()
    check = rsi(ws, "config", "check", str(adopted))
    assert check.returncode == 0, check.stdout + check.stderr

    table = rsi(ws, "expand", "--resume", job, "--budget", "60")  # the finished job renders again, nothing re-run
    assert table.returncode == 0, table.stderr[-2000:]
    assert "coverage" in table.stdout and "best single config" in table.stdout and "adopted" in table.stdout
    assert len(_trials(ws, job)) == len(trials)
