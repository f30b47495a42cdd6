"""Your own model as a first-class choice: `rsi init DIR --model NAME --endpoint URL` makes gen-0000 the model an
OpenAI-compatible server serves, and `rsi run` talks to that server (never starting the embedded one); `rsi run
--model/--endpoint` point one job elsewhere. The server here is the embedded model started by the test as an outside
endpoint on its own port, under a served name of its own, so a request naming the wrong model fails loudly (404)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.raycluster import free_port
from tests.served_model import served_model

pytestmark = [pytest.mark.docker, pytest.mark.model]

SERVED = "my-base"


def rsi(*args: str, env: dict[str, str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _one_train_task(root: Path) -> Path:
    for d in sorted((root / "tasks").iterdir()):
        toml = (d / "task.toml").read_text() if (d / "task.toml").is_file() else ""
        if 'family = "file-ops"' in toml:
            return d
    raise AssertionError("no file-ops starter task in the fresh workspace")


def test_init_with_your_own_endpoint_then_run_talks_to_it(tmp_path: Path) -> None:
    embedded_port = free_port()  # nothing listens here: a run that fell back to the embedded model would start it
    env = dict(os.environ, RSI_MODEL_PORT=str(embedded_port), HF_HUB_OFFLINE="1")
    env.pop("RSI_HOME", None)
    with served_model(tmp_path, args=("--served-model-name", SERVED)) as port:
        url = f"http://127.0.0.1:{port}/v1"
        root = tmp_path / "ws"
        r = rsi("init", str(root), "--model", SERVED, "--endpoint", url, env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        settings = yaml.safe_load((root / "rsi.yaml").read_text())
        assert settings["base_model"] == SERVED
        cfg = yaml.safe_load((root / "harness_configs" / "default.yaml").read_text())
        assert cfg["model"]["endpoint"] == url
        gen0 = yaml.safe_load((root / "generations" / "gen-0000.yaml").read_text())
        assert gen0["base_model"] == {"id": SERVED, "digest": None}  # another model's weights are not here to hash

        # rsi doctor asks that server, and finds the model it names there
        r = rsi("doctor", "--json", "-w", str(root), env=env, cwd=tmp_path)
        check = next(c for c in json.loads(r.stdout) if c["name"] == "model endpoint")
        assert check["ok"] and SERVED in check["detail"], check
        other = tmp_path / "other"
        r = rsi("init", str(other), "--no-tasks", "--model", "not-served", "--endpoint", url, env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        r = rsi("doctor", "--json", "-w", str(other), env=env, cwd=tmp_path)
        check = next(c for c in json.loads(r.stdout) if c["name"] == "model endpoint")
        assert not check["ok"] and "not-served" in check["detail"] and SERVED in check["detail"], check
        assert "--served-model-name not-served" in check["fix"]

        task = _one_train_task(root)
        r = rsi("run", str(task), "--agent", "harness", "--json", "-w", str(root), env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        trials = json.loads(r.stdout)["trials"]
        assert len(trials) == 1
        t = trials[0]
        assert t["status"] == "done" and t["model_name"] == SERVED, t
        assert t["error_type"] not in {"model_unavailable", "sandbox_error", "model_config_error"}, t
        assert t["tokens"]["prompt"] > 0 and t["tokens"]["completion"] > 0, t
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", embedded_port)) != 0, "the run started the embedded model"

        # one job pointed at another served name: the server does not know it, and the trial says so
        r = rsi("run", str(task), "--model", "nosuch-model", "--json", "-w", str(root), env=env, cwd=tmp_path)
        out = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
        assert out is not None, r.stderr[-2000:]
        (bad,) = out["trials"]
        assert bad["model_name"] == "nosuch-model"
        assert bad["reward"] in (None, 0.0) and bad["error_type"] is not None, bad
        assert "nosuch-model" in (bad.get("error_message") or ""), bad
