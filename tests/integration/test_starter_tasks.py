"""The starter pool and the regression suite through the real CLI and real Docker, as a user first meets them.

`rsi run tasks --agent oracle` must pass every task (the reference solutions work and the
verifiers accept them) and `--agent nop` must fail every task cleanly (the initial state does
not already satisfy a verifier, and a fail is a reward of 0, not an error). The same holds for
every task of the suite `suites/starter` that promote gates candidates on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
POOLS = ["tasks", "suites/starter"]  # the starter pool and the regression suite
RUN_TIMEOUT_S = 1800

pytestmark = pytest.mark.docker


def _rsi(*args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsi", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_pool(tmp_path: Path, agent: str, pool: str = "tasks") -> list[dict[str, Any]]:
    """`rsi init` a fresh workspace, run the whole pool (`tasks` or a suite) with `agent`, return its trials."""
    pool_dir = REPO / pool
    ws = tmp_path / "ws"
    init = _rsi("init", str(ws), timeout=120)
    assert init.returncode == 0, f"rsi init failed:\n{init.stdout}\n{init.stderr}"
    proc = _rsi("--workspace", str(ws), "run", str(pool_dir), "--agent", agent, "-n", "2", "--json")
    assert proc.returncode == 0, f"rsi run --agent {agent} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    out = json.loads(proc.stdout)
    assert out.get("job"), f"no job id in {out}"
    trials: list[dict[str, Any]] = out["trials"]
    expected = {p.name for p in pool_dir.iterdir() if (p / "task.toml").is_file()}
    assert {t["task"] for t in trials} == expected, "the run did not cover exactly the task pool"
    return trials


@pytest.mark.parametrize("pool", POOLS)
def test_oracle_passes_every_starter_task(tmp_path: Path, pool: str) -> None:
    trials = _run_pool(tmp_path, "oracle", pool)
    bad = [t for t in trials if not (t["passed"] is True and t["reward"] == 1)]
    assert not bad, "oracle did not pass:\n" + "\n".join(
        f"{t['task']}: reward={t['reward']} error={t['error_type']} dir={t['trial_dir']}" for t in bad
    )


@pytest.mark.parametrize("pool", POOLS)
def test_nop_fails_every_starter_task_cleanly(tmp_path: Path, pool: str) -> None:
    trials = _run_pool(tmp_path, "nop", pool)
    bad = [t for t in trials if not (t["passed"] is False and t["reward"] == 0 and t["error_type"] is None)]
    assert not bad, "nop did not fail cleanly:\n" + "\n".join(
        f"{t['task']}: passed={t['passed']} reward={t['reward']} error={t['error_type']} dir={t['trial_dir']}"
        for t in bad
    )
