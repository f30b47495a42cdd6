"""The real thing end to end: SmolLM2 on the embedded server acting in real Docker sandboxes.

`rsi run <family> --agent harness -k 4` through the CLI, as a user runs it: the run starts the
embedded server itself (nothing answers on the port beforehand) and stops it afterwards. A dead
endpoint must give `model_unavailable` (infra) trials, never model failures.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rsi.harness.atif import load_trajectory
from rsi.models.embedded import DEFAULT_MODEL_ID

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
FAMILY = "file-ops"  # the easiest starter family


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rsi(*args: str, env: dict[str, str], cwd: Path, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def family_tasks(ws: Path, family: str, split: str = "train") -> list[Path]:
    out = []
    for d in sorted((ws / "tasks").iterdir()):
        toml = (d / "task.toml").read_text()
        if f'family = "{family}"' in toml and f'split = "{split}"' in toml:
            out.append(d)
    return out


@pytest.fixture
def ws(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = dict(os.environ, RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"
    r = rsi("init", str(root), env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return root, env


def test_small_model_acts_in_real_sandboxes(ws: tuple[Path, dict[str, str]]) -> None:
    root, env = ws
    tasks = family_tasks(root, FAMILY)
    assert len(tasks) >= 3
    r = rsi("run", *map(str, tasks), "--agent", "harness", "-k", "4", "-n", "2", "--json", env=env, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    trials = out["trials"]
    assert len(trials) == 4 * len(tasks)
    assert {t["task"] for t in trials} == {p.name for p in tasks}
    for t in trials:
        assert t["status"] == "done"
        # the model answered: no infra error, real tokens, a graded reward
        assert t["error_type"] not in {"model_unavailable", "sandbox_error", "model_config_error"}, t
        assert t["reward"] in (0.0, 1.0), t
        assert t["tokens"]["prompt"] > 0 and t["tokens"]["completion"] > 0, t
        assert t["model_name"] == DEFAULT_MODEL_ID
        assert t["harness_config_digest"]
        traj = load_trajectory(Path(t["trial_dir"]) / "trajectory.json")
        agent_steps = [s for s in traj.steps if s.source == "agent"]
        assert agent_steps, "the trajectory records the model's turns"
        # every later turn's prompt extends the one before: the server's prefix cache supplies it,
        # the harness records it per call and the trials table sums it
        later = [s.metrics.cached_tokens or 0 for s in agent_steps[1:] if s.metrics]
        assert all(c > 0 for c in later), later
        assert t["tokens"]["cached"] == sum(s.metrics.cached_tokens or 0 for s in agent_steps if s.metrics)
        # the stop rule: a reply ends where its first fenced block closes
        for s in agent_steps:
            assert str(s.message or "").count("```") <= 2, s.message
        assert traj.agent.model_name == DEFAULT_MODEL_ID
    # the server the run started is gone again
    port = int(env["RSI_MODEL_PORT"])
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, "the embedded server was left running"
    # a trial is readable in the terminal
    show = rsi("trials", "show", trials[0]["id"], env=env, cwd=root, timeout=120)
    assert show.returncode == 0, show.stderr
    assert "agent" in show.stdout.lower()


def test_dead_endpoint_is_infra_not_model(ws: tuple[Path, dict[str, str]]) -> None:
    root, env = ws
    cfg_path = root / "harness_configs" / "default.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["model"]["endpoint"] = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    # re-register gen-0000 for the edited config (a fresh workspace with this config)
    (root / "generations" / "gen-0000.yaml").unlink()
    shutil.rmtree(root / ".rsi")
    assert rsi("init", str(root), env=env, cwd=root).returncode == 0
    task = family_tasks(root, FAMILY)[0]
    r = rsi("run", str(task), "--agent", "harness", "-k", "2", "--json", env=env, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert [t["error_type"] for t in out["trials"]] == ["model_unavailable", "model_unavailable"]
    assert not any(t["passed"] for t in out["trials"])
    assert out["infra_errors"] == 2
