"""The `ray` executor on a real Ray cluster: a head and two worker nodes started with `ray start`,
each worker with its own dockerd (own socket, data root and bridge), one trial slot each. One
cluster serves the whole module: the executor conformance suite, trials spread over both nodes and
recorded once with their node, a worker's raylet killed mid-job (the lost trials re-run on the other
node, kept as `node_lost` infra attempts; `rsi sandbox gc --executor ray` sweeps both daemons once
the node is back), and a driver killed with `kill -9` whose job `--resume` finishes.

Trials are short oracle tasks on the base image; the CLI runs in subprocesses as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import exec_conformance as conf
from tests.integration.conftest import BASE_IMAGE
from tests.prereq import unavailable
from tests.raycluster import RayCluster
from tests.taskgen import make_tasks

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SLEEP_OK = 'sleep {s}; echo ok > "${{SANDBOX_ROOT:-}}/app/out.txt"\n'


@pytest.fixture(scope="module")
def cluster(docker_ready: None) -> Iterator[RayCluster]:
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("ray is not installed; pip install -e '.[cluster]'")
    if os.geteuid() != 0:
        unavailable("the Ray cluster test starts extra dockerds and bridges: run it as root (CI does)")
    c = RayCluster(workers=2)
    try:
        c.start(BASE_IMAGE)
        import ray

        ray.init(address=c.address, namespace="rsi", log_to_driver=False)
        c.node_ids = c.node_of()  # type: ignore[attr-defined]
        yield c
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        leftovers = {d.index: d.containers() for d in c.daemons if getattr(d, "proc", None) is not None}
        c.stop()
    assert not any(leftovers.values()), f"rsi containers left on the workers' daemons: {leftovers}"


@pytest.fixture(scope="module")
def ws(cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ray-ws") / "ws"
    r = subprocess.run([sys.executable, "-m", "rsi", "init", str(root), "--no-tasks"], capture_output=True,
                       text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    contract = root / "contracts" / "hcp-1.0.yaml"
    contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
    return root


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="200")
    env.pop("RSI_HOME", None)
    return env


def _rsi(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), *args], capture_output=True, text=True,
                          timeout=timeout, env=_env())


def _trials(root: Path, job: str) -> list[dict[str, Any]]:
    with sqlite3.connect(root / ".rsi" / "rsi.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM trials WHERE job_id = ?", (job,))]


def _job(root: Path, job: str | None = None) -> dict[str, Any]:
    with sqlite3.connect(root / ".rsi" / "rsi.db") as db:
        db.row_factory = sqlite3.Row
        q = "SELECT * FROM jobs WHERE id = ?" if job else "SELECT * FROM jobs ORDER BY created_at DESC LIMIT 1"
        return dict(db.execute(q, (job,) if job else ()).fetchone())


def _ray_executor(tmp: Path) -> conf.Make:
    import ray

    from rsi.exec.ray_exec import RayExecutor
    from rsi.exec.trial import TrialEnv
    from rsi.sandbox.fake import FakeSandboxProvider

    ray.cloudpickle.register_pickle_by_value(conf)  # the workers cannot import tests/

    def make(fn: Any, gate: Any) -> RayExecutor:
        env = TrialEnv(provider=FakeSandboxProvider(tmp / "fake"), contract=conf.contract(), base_image="b")
        return RayExecutor(env, gate=gate, trial_fn=fn)

    return make


def test_conformance_on_ray(cluster: RayCluster, tmp_path: Path) -> None:
    make = _ray_executor(tmp_path)
    conf.check_runs_each_trial_once_and_brings_its_files_back(make, tmp_path / "a")
    conf.check_budget_gate_blocks_and_release_resumes(make, tmp_path / "b")
    conf.check_cancel_stops_running_and_queued_trials(make, tmp_path / "c")


def test_doctor_checks_every_node(cluster: RayCluster, ws: Path) -> None:
    r = _rsi(ws, "doctor", "--no-start", "--json", "--executor", "ray", "--address", cluster.address)
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["ray cluster"]["ok"] and "2 slot node(s), 2 trial slot(s)" in checks["ray cluster"]["detail"]
    nodes = [c for n, c in checks.items() if n.startswith("node ") and n.endswith(" docker")]
    assert len(nodes) == 2 and all(c["ok"] for c in nodes)
    assert {d.host for d in cluster.daemons} == {c["detail"].split()[1].rstrip(":") for c in nodes}


def test_a_driver_without_the_clusters_token_is_told_so(cluster: RayCluster, ws: Path, tmp_path: Path) -> None:
    """The cluster runs with token auth (its own token); a driver with auth off gets one line that says the
    cluster is up and the token settings must match, not "start it with `ray start`"."""
    tasks = make_tasks(tmp_path, 1, prefix="a")
    env = {k: v for k, v in _env().items() if not k.startswith("RAY_AUTH")}
    r = subprocess.run([sys.executable, "-m", "rsi", "-w", str(ws), "run", *map(str, tasks), "--agent", "oracle",
                        "--executor", "ray", "--address", cluster.address],
                       capture_output=True, text=True, timeout=300, env={**env, "RAY_AUTH_MODE": "disabled"})
    assert r.returncode == 1, (r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert "it answers, so it is up" in last and "RAY_AUTH_MODE" in last, r.stderr[-2000:]


def test_trials_spread_over_both_nodes_each_recorded_once(cluster: RayCluster, ws: Path, tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, 4, prefix="s", solve=SLEEP_OK.format(s=1))
    r = _rsi(ws, "run", *map(str, tasks), "--agent", "oracle", "--executor", "ray", "--address", cluster.address,
             "--json")
    assert r.returncode == 0, r.stderr
    trials = _trials(ws, _job(ws)["id"])
    assert len(trials) == 4 and len({t["id"] for t in trials}) == 4
    assert all(t["status"] == "done" and t["passed"] for t in trials), trials
    nodes = {cluster.node_ids.get(t["node"]) for t in trials}  # type: ignore[attr-defined]
    assert nodes == {1, 2}, f"trials ran on {[t['node'] for t in trials]}"
    for t in trials:  # the trial's files came back to the driver's trial dir
        d = Path(t["trial_dir"])
        assert json.loads((d / "result.json").read_text())["node"] == t["node"]
        assert (d / "verifier" / "test-stdout.txt").exists()
    assert all(d.containers() == [] for d in cluster.daemons)


def test_node_loss_reruns_lost_trials_on_the_other_node(cluster: RayCluster, ws: Path, tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, 4, prefix="n", solve=SLEEP_OK.format(s=6))
    driver = subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(ws), "run", *map(str, tasks), "--agent",
                               "oracle", "--executor", "ray", "--address", cluster.address], env=_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = cluster.workers[0]
    try:
        deadline = time.monotonic() + 120
        while not victim.daemon.containers():  # a trial is running on worker 1
            assert time.monotonic() < deadline and driver.poll() is None, driver.stderr.read() if driver.stderr else ""
            time.sleep(0.3)
        cluster.kill_worker(victim)
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err
    job = _job(ws)
    assert job["status"] == "done"
    trials = _trials(ws, job["id"])
    assert len(trials) == 4 and all(t["status"] == "done" and t["passed"] for t in trials), trials
    lost = [t for t in trials if "node_lost" in t["infra_attempts_json"]]
    assert lost, "the trial running on the killed node kept no node_lost attempt"
    assert all(cluster.node_ids.get(t["node"]) == 2 for t in lost)  # type: ignore[attr-defined]
    assert all(t["error_type"] is None for t in trials)  # never blamed on the model
    # the dead node left its container behind; once the node is back, gc reaches it
    assert victim.daemon.containers(), "expected the killed node's container to be left on its daemon"
    cluster.start_worker(victim)
    cluster.node_ids.update(cluster.node_of())  # type: ignore[attr-defined]
    _wait_slots(2)
    r = _rsi(ws, "sandbox", "gc", "--executor", "ray", "--address", cluster.address, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["containers"]
    assert all(d.containers() == [] for d in cluster.daemons)


def _wait_slots(n: int, timeout: float = 60) -> None:
    from rsi.exec.ray_exec import slot_count

    deadline = time.monotonic() + timeout
    while slot_count() < n:
        assert time.monotonic() < deadline, "the restarted worker did not join"
        time.sleep(0.5)


def test_resume_after_the_driver_is_killed(cluster: RayCluster, ws: Path, tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, 4, prefix="r", solve=SLEEP_OK.format(s=2))
    with sqlite3.connect(ws / ".rsi" / "rsi.db") as db:
        before = {r[0] for r in db.execute("SELECT id FROM jobs")}
    driver = subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(ws), "run", *map(str, tasks), "--agent",
                               "oracle", "--executor", "ray", "--address", cluster.address], env=_env(), text=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.5)
            job = _job(ws)
            if job["id"] not in before and any(t["status"] == "done" for t in _trials(ws, job["id"])):
                break
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    job_id = _job(ws)["id"]
    assert job_id not in before
    paid = {t["id"]: t["finished_at"] for t in _trials(ws, job_id) if t["status"] == "done"}
    r = _rsi(ws, "run", "--resume", job_id, "--executor", "ray", "--address", cluster.address)
    assert r.returncode == 0, r.stderr
    trials = _trials(ws, job_id)
    assert _job(ws, job_id)["status"] == "done" and len(trials) == 4 and all(t["passed"] for t in trials)
    assert all(t["finished_at"] == paid[t["id"]] for t in trials if t["id"] in paid)  # not paid again
    assert all(d.containers() == [] for d in cluster.daemons)


@pytest.mark.model
def test_cycle_end_to_end_on_the_cluster(cluster: RayCluster, tmp_path: Path) -> None:
    """`rsi cycle --executor ray`, demo-sized: every phase's trials run on the cluster's nodes (SmolLM2 on the
    embedded server of the driver, which the nodes on this machine reach), each recorded with its node."""
    import re

    import yaml

    from tests.integration.test_harness_run import free_port
    from tests.integration.test_update_local import ALWAYS, ANY_FILE
    from tests.taskgen import make_task

    root = tmp_path / "ws"
    env = dict(_env(), RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "rsi", "init", str(root), "--no-tasks"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    contract = root / "contracts" / "hcp-1.0.yaml"
    c = yaml.safe_load(contract.read_text())
    c["promotion"]["trials_per_task"] = 1
    c["promotion"]["suites"] = []
    contract.write_text(yaml.safe_dump(c, sort_keys=False))
    (root / "rsi.yaml").write_text((root / "rsi.yaml").read_text()
                                   + f"executor:\n  name: ray\n  address: '{cluster.address}'\n")
    cfg = root / "harness_configs" / "default.yaml"
    cfg.write_text(re.sub(r"max_turns: \d+\n", "max_turns: 2\n", cfg.read_text(), count=1))
    tasks = root / "tasks"
    make_task(tasks, "say-hello", test=ALWAYS, agent_timeout=300, instruction="Print the word hello with echo.\n")
    make_task(tasks, "touch-ok", test=ANY_FILE, agent_timeout=300,
              instruction="Create the file /app/out.txt containing ok.\n")
    for i, w in enumerate(["apple", "river"]):
        # each its own reference: update refuses a train task equal to a sealed one in environment and reference
        d = make_task(tasks, f"hold-{i}", test=ANY_FILE, agent_timeout=300, family=f"h{i}",
                      instruction=f"Create the file /app/{w}.txt containing the word {w}.\n",
                      solve=f"echo {w} > /app/{w}.txt\n")
        (d / "task.toml").write_text((d / "task.toml").read_text().replace(
            "difficulty = 1\n", 'difficulty = 1\nsplit = "holdout"\n'))
    r = subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), "cycle", "--budget", "16", "--candidates", "1",
                        "-g", "text", "-k", "1", "--proposals", "0", "--steps", "1", "--no-html", "--json"],
                       env=env, capture_output=True, text=True, timeout=1200)
    (tmp_path / "cycle-out.json").write_text(r.stdout)  # what the cycle said, kept with the test's tmp dir
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout)
    assert out["stopped"] is None and out["verdict"] in ("promoted", "rejected"), out
    assert {k: p["status"] for k, p in out["phases"].items()} == dict.fromkeys(
        ("discover", "expand", "update", "promote"), "done"), out["phases"]
    with sqlite3.connect(root / ".rsi" / "rsi.db") as db:
        rows = db.execute("SELECT node, status FROM trials WHERE status = 'done'").fetchall()
    assert rows and all(n in cluster.node_ids for n, _ in rows), rows  # type: ignore[attr-defined]
    assert all(d.containers() == [] for d in cluster.daemons)
