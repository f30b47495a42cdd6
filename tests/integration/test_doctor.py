"""`rsi doctor` names each missing piece and the one command that fixes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def doctor(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, **env)
    e.pop("RSI_HOME", None)
    return subprocess.run([sys.executable, "-m", "rsi", "doctor", "--no-start", "--json"], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=120)


def test_doctor_outside_a_workspace_and_without_base_image(tmp_path: Path) -> None:
    r = doctor(tmp_path, RSI_BASE_IMAGE="rsi-missing:none")
    assert r.returncode == 1
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["docker daemon"]["ok"]
    assert not checks["workspace"]["ok"] and checks["workspace"]["fix"] == f"rsi init {tmp_path}"
    assert not checks["base image"]["ok"] and checks["base image"]["fix"] == "rsi sandbox build-base"


def test_doctor_in_a_new_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    subprocess.run([sys.executable, "-m", "rsi", "init", str(ws), "--no-tasks"], check=True, capture_output=True)
    r = doctor(ws, RSI_MODEL_PORT="9")  # nothing answers on port 9 and --no-start keeps it that way
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["database"]["ok"] and checks["base image"]["ok"] and checks["docker daemon"]["ok"]
    assert not checks["model endpoint"]["ok"] and checks["model endpoint"]["fix"] == "rsi model serve"
    # what the embedded server would run with on this machine, and an override shows as one
    r2 = doctor(ws, RSI_MODEL_PORT="9", RSI_MODEL_PREFIX_CACHE_MB="32")
    sizing = {c["name"]: c for c in json.loads(r2.stdout)}["model server"]
    assert sizing["ok"] and sizing["detail"].startswith("would run the llama engine with")  # setup.sh built it
    assert "prefix cache 32 MiB" in sizing["detail"] and "set by hand: prefix_cache_mb" in sizing["detail"]
    torch_kind = {c["name"]: c for c in json.loads(doctor(ws, RSI_MODEL_PORT="9", RSI_MODEL_ENGINE="torch").stdout)}
    assert torch_kind["model server"]["detail"].startswith("would run the torch engine with")
    assert r.returncode == 1
