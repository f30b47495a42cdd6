"""A fresh `rsi init` workspace's starter tasks teach: `rsi expand` -> `rsi update` -> `rsi promote` go through in it
as the README walks them, and its train tasks become training data (they are other instances than the regression
suite `suites/starter`, which never trains). Real CLI, real Docker, the embedded model, a real LoRA.

Sized for CI: three model turns, a small expand budget, two optimiser steps, one holdout trial per task and
generation, and promote measured on the holdout only (the suite is checked where it matters here: at update, which
refuses suite tasks as data)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.raycluster import free_port

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(1800)]


def test_a_fresh_workspace_goes_through_expand_update_promote(tmp_path: Path) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1", COLUMNS="160")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"

    def rsi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), *args], env=env,
                              capture_output=True, text=True, timeout=1700)

    r = subprocess.run([sys.executable, "-m", "rsi", "init", str(root)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    cfg = root / "harness_configs" / "default.yaml"
    cfg.write_text(re.sub(r"max_turns: \d+\n", "max_turns: 3\n", cfg.read_text(), count=1))
    contract = root / "contracts" / "hcp-1.0.yaml"
    c = yaml.safe_load(contract.read_text())
    assert c["promotion"]["suites"] == ["suites/starter"]
    c["promotion"]["trials_per_task"] = 1
    contract.write_text(yaml.safe_dump(c, sort_keys=False))
    train = [d.name for d in sorted((root / "tasks").iterdir())
             if 'split = "train"' in (d / "task.toml").read_text()]
    assert len(train) == 11

    r = rsi("expand", "--budget", "60", "-k", "1", "--hint-tasks", "0", "--proposals", "0", "--no-search", "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]

    r = rsi("update", "--steps", "2", "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    up = json.loads(r.stdout)
    assert up["candidate"] == "gen-0001", up
    lines = [json.loads(x) for x in Path(up["dataset"]["path"]).read_text().splitlines()]
    tasks_trained = {ln["provenance"].get("task") for ln in lines if ln["accepted"] and not ln.get("validation")}
    # the starter train tasks are data: none was refused as a regression-suite task
    assert len(tasks_trained & set(train)) >= 6, (tasks_trained, up.get("refused"))
    assert "suite task" not in json.dumps(up.get("refused") or {}), up.get("refused")

    # promote on the holdout (the suite's 16 tasks x 2 generations would double this test's time)
    c["promotion"]["suites"] = []
    contract.write_text(yaml.safe_dump(c, sort_keys=False))
    r = rsi("promote", "gen-0001", "--json", "--no-html")
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["candidate"] == "gen-0001" and out["holdout_tasks"] == 5 and not out["interrupted"], out
    v = out["verdict"]
    assert v["n_tasks"] == 5 and v["gates"], v  # the five starter holdout tasks, measured and gated
    state = yaml.safe_load((root / "generations" / "gen-0001.yaml").read_text())["state"]
    assert state == ("promoted" if v["passed"] else "rejected"), (state, v["failing"])
