"""`rsi cycle` end to end as a user runs it: the CLI in a subprocess, SmolLM2 on the embedded server acting in
real Docker sandboxes, a real LoRA trained on the CPU, a real holdout promotion, and the HTML report opened in
headless Chromium.

Sized small so it fits CI (a few tasks, one probe attempt, two optimiser steps, one holdout trial per task
and generation, three model turns): what it checks is that every phase runs and is recorded, not that the
candidate is better — the verdict may go either way, but it must be a verdict with its gates.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.test_diff_html import CHECK, FLAGS, chromium
from tests.integration.test_harness_run import free_port
from tests.integration.test_update_local import ALWAYS, ANY_FILE
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(1800)]

HOLDOUT = ["Create the file /app/{w}.txt containing the word {w}.", "Write {w} into the file /app/note.txt.",
           "Make a directory /app/{w}.", "Create an empty file named /app/{w}.", "Save the text {w} to /app/a.txt."]
WORDS = ["apple", "river", "stone", "cloud", "maple"]


def _holdout(tasks: Path, i: int) -> None:
    # each its own reference: update refuses a train task equal to a sealed one in environment and reference
    d = make_task(tasks, f"hold-{i}", test=ANY_FILE, agent_timeout=300, family="files" if i % 2 else "notes",
                  instruction=HOLDOUT[i].format(w=WORDS[i]) + "\n", solve=f"echo {WORDS[i]} > /app/{WORDS[i]}.txt\n")
    toml = (d / "task.toml").read_text().replace("difficulty = 1\n", 'difficulty = 1\nsplit = "holdout"\n')
    (d / "task.toml").write_text(toml)


def test_cycle_runs_every_phase_and_reports(tmp_path: Path) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1", COLUMNS="160")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"

    def rsi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), *args], env=env,
                              capture_output=True, text=True, timeout=1700)

    r = subprocess.run([sys.executable, "-m", "rsi", "init", str(root), "--no-tasks"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # a tighter contract for CI: one holdout trial per task and generation (promote: 2 x 1 x 5 trials)
    contract = root / "contracts" / "hcp-1.0.yaml"
    c = yaml.safe_load(contract.read_text())
    c["promotion"]["trials_per_task"] = 1
    # and a two-task regression suite of its own, one trial per task and generation (promote: 2 x 1 x 2 more)
    c["promotion"]["suites"] = ["suites/mini"]
    c["promotion"]["suite_trials_per_task"] = 1
    contract.write_text(yaml.safe_dump(c, sort_keys=False))
    make_task(root / "suites" / "mini", "suite-hello", test=ALWAYS, agent_timeout=300,
              instruction="Print the word hello with echo.\n", solve="echo hello\n")
    make_task(root / "suites" / "mini", "suite-file", test=ANY_FILE, agent_timeout=300,
              instruction="Create the file /app/out.txt containing ok.\n", solve="printf 'ok\\n' > /app/out.txt\n")
    # a tighter harness (fewer turns) is always within the contract
    cfg = root / "harness_configs" / "default.yaml"
    cfg.write_text(re.sub(r"max_turns: \d+\n", "max_turns: 3\n", cfg.read_text(), count=1))
    tasks = root / "tasks"
    make_task(tasks, "say-hello", test=ALWAYS, agent_timeout=300, instruction="Print the word hello with echo.\n")
    make_task(tasks, "touch-ok", test=ANY_FILE, agent_timeout=300,
              instruction="Create the file /app/out.txt containing ok.\n")
    for i in range(5):
        _holdout(tasks, i)

    # one train composition after the main candidate (its own discover job), as the demo does with 48
    r = rsi("cycle", "--budget", "50", "--candidates", "1", "-g", "text", "-k", "1", "--proposals", "0", "--steps", "2",
            "-n", "2", "--compositions", "1", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout)

    # every phase ran, in one cycle job, and recorded its own job
    assert out["stopped"] is None, out
    assert set(out["phases"]) == {"discover", "expand", "update", "promote"}
    assert all(p["status"] == "done" for p in out["phases"].values()), out["phases"]
    assert out["candidate"] == "gen-0001" and out["verdict"] in ("promoted", "rejected")
    prom = out["phases"]["promote"]
    # the 5 hand-made holdout tasks, and the discovered one when its digest put it there and the band kept it;
    # promote's share follows (2 generations x 1 trial each), taken from expand's, and the total holds
    assert prom["holdout_tasks"] in (5, 6)
    assert out["split"]["promote"] == 2 * (prom["holdout_tasks"] + 2) and sum(out["split"].values()) == 50
    assert prom["suite_tasks"] == 2 and prom["suite_parent_rate"] is not None  # the suite was measured too
    if out["verdict"] == "rejected":
        assert prom["failing"], prom  # a rejection names the gates that failed

    db = sqlite3.connect(root / ".rsi" / "rsi.db")
    kinds = dict(db.execute("SELECT kind, COUNT(*) FROM jobs GROUP BY kind").fetchall())
    assert kinds.get("cycle") == 1 and kinds.get("discover") == 2 and kinds.get("expand") == 1, kinds
    # the second discover aimed at a level-3 train composition, gated and probed in Docker like any candidate
    disc = out["phases"]["discover"]
    assert disc["compose_done"] is True and disc.get("compose_job"), disc
    gens, levels = db.execute("SELECT generator, difficulty FROM candidates WHERE job_id = ?",
                              (disc["compose_job"],)).fetchone()
    assert (gens, levels) == ("compose", 3)
    assert kinds.get("promote") == 1, kinds
    status = db.execute("SELECT status FROM jobs WHERE kind = 'cycle'").fetchone()[0]
    assert status == "done"
    trained = db.execute("SELECT COUNT(*) FROM training_runs WHERE candidate = 'gen-0001'").fetchone()[0]
    assert trained == 1
    # the budget held: every trial the cycle's phases ran fits the total
    n_trials = db.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
    assert 14 <= n_trials <= 50, n_trials
    db.close()
    state = yaml.safe_load((root / "generations" / "gen-0001.yaml").read_text())["state"]
    assert state == out["verdict"]

    # the HTML diff report was written, renders its charts in Chromium and names both generations
    page = Path(out["report"])
    assert page.is_file()
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    check = re.search(r'<p id="render-check">([^<]*)</p>', dom.stdout)
    assert check and all(x.endswith(":rendered") for x in check.group(1).split()), dom.stdout[-2000:]
    assert 'id="gen-a">gen-0000<' in dom.stdout and 'id="gen-b">gen-0001<' in dom.stdout

    # and the terminal diff reads the same generations from the DB
    d = rsi("diff", "gen-0000", "gen-0001", "--format", "json")
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout)["b"] == "gen-0001"
