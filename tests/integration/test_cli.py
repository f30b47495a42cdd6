"""The `rsi` command as a user runs it: one-line errors with exit 2 and no state, JSON outputs, init."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rsi.loop.context import WorkspaceContext
from rsi.store.bundled import bundled_harness_configs
from tests.taskgen import make_task

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def rsi(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line of a failed command (and no traceback)."""
    assert res.returncode == 2, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    return errors[0]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def job_count(ws: Path) -> int:
    with sqlite3.connect(f"file:{ws / '.rsi' / 'rsi.db'}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])


def test_init_creates_the_workspace_and_registers_gen0(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = rsi("init", str(ws), "--no-tasks")
    assert res.returncode == 0, res.stderr
    for rel in ("rsi.yaml", "contracts/hcp-1.0.yaml", "harness_configs/default.yaml",
                "generations/gen-0000.yaml", ".rsi/rsi.db"):
        assert (ws / rel).is_file(), f"rsi init did not create {rel}"
    with sqlite3.connect(ws / ".rsi" / "rsi.db") as conn:
        gens = conn.execute("SELECT id, state, harness_config_name FROM generations").fetchall()
    assert gens == [("gen-0000", "promoted", "default")]
    manifest = yaml.safe_load((ws / "generations" / "gen-0000.yaml").read_text())
    assert manifest["id"] == "gen-0000" and manifest["parent"] is None
    again = rsi("init", str(ws), "--no-tasks")
    assert again.returncode == 0, "rsi init must be idempotent"
    assert "gen-0000" in again.stdout


def test_validate_broken_task_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "good")
    bad = make_task(tasks, "bad", toml='[task]\nname = "bad"\n[environment]\ncpus = "lots"\n')
    before = tree(tasks)
    err = one_line_error(rsi("tasks", "validate", str(tasks)))
    assert str(bad / "task.toml") in err and "environment.cpus" in err
    assert tree(tasks) == before, "validate changed the task directory"
    ok = rsi("tasks", "validate", str(tasks / "good"))
    assert ok.returncode == 0 and "1 task(s) valid" in ok.stdout


def test_config_check_refuses_a_loosening_config(tmp_path: Path, workspace: WorkspaceContext) -> None:
    raw = yaml.safe_load((bundled_harness_configs() / "default.yaml").read_text())
    raw["loop"]["max_turns"] = 500
    cfg = tmp_path / "loose.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    err = one_line_error(rsi("-w", str(workspace.ws.root), "config", "check", str(cfg)))
    assert f"{cfg}: loop.max_turns" in err and "500" in err and "30" in err
    default = workspace.ws.harness_configs_dir / "default.yaml"
    ok = rsi("-w", str(workspace.ws.root), "config", "check", str(default))
    assert ok.returncode == 0 and "ok" in ok.stdout


def test_run_on_missing_or_broken_tasks_writes_no_job(tmp_path: Path, workspace: WorkspaceContext) -> None:
    ws = workspace.ws.root
    err = one_line_error(rsi("-w", str(ws), "run", str(tmp_path / "nowhere"), "--agent", "oracle"))
    assert str(tmp_path / "nowhere") in err
    bad = make_task(tmp_path / "tasks", "bad")
    (bad / "tests" / "test.sh").unlink()
    err = one_line_error(rsi("-w", str(ws), "run", str(bad), "--agent", "oracle"))
    assert str(bad / "tests" / "test.sh") in err
    err = one_line_error(rsi("-w", str(ws), "run", str(tmp_path / "tasks"), "--agent", "oracel"))
    assert "oracel" in err and "oracle" in err
    err = one_line_error(rsi("-w", str(ws), "run", "--resume", "job-nope", "--agent", "oracle"))
    assert "job-nope" in err
    assert job_count(ws) == 0
    assert not workspace.ws.jobs_dir.exists() or not any(workspace.ws.jobs_dir.iterdir())


def test_run_json_reports_every_trial(tmp_path: Path, workspace: WorkspaceContext) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "solved")
    toml = tasks / "solved" / "task.toml"  # graded at level 1; "unsolved" declares no reads: level 2
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nreads = ["/app/out.txt"]\n'))
    make_task(tasks, "unsolved", solve="echo wrong > /app/out.txt\n")
    ws = str(workspace.ws.root)
    res = rsi("-w", ws, "run", str(tasks), "--agent", "oracle", "-k", "2", "-n", "2", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["job"].startswith("job-") and out["status"] == "done"
    trials = {(t["task"], t["attempt"]): t for t in out["trials"]}
    assert set(trials) == {("solved", 1), ("solved", 2), ("unsolved", 1), ("unsolved", 2)}
    for t in out["trials"]:
        assert {"task", "attempt", "reward", "passed", "error_type", "trial_dir"} <= set(t), t
        assert Path(t["trial_dir"], "result.json").is_file()
        assert t["error_type"] is None
        assert (t["passed"], t["reward"]) == ((True, 1.0) if t["task"] == "solved" else (False, 0.0))
    assert out["pass_at_1"] == 0.5
    assert out["integrity"] == {"declared_outputs": 2, "snapshot": 2, "shared": 0, "none": 0}
    assert {t["task"]: t["integrity"] for t in out["trials"]} == {"solved": "declared_outputs",
                                                                   "unsolved": "snapshot"}
    shown = rsi("-w", str(workspace.ws.root), "jobs", "show", out["job"], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["trials"] == out["trials"]
    # the summary `rsi run` prints at its end (`jobs show` prints the same) counts them per level
    shown = rsi("-w", str(workspace.ws.root), "jobs", "show", out["job"])
    assert "integrity: declared_outputs 2, snapshot 2, shared 0" in shown.stdout, shown.stdout


def test_tasks_list_json(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "alpha", family="fam-a")
    make_task(tasks, "beta", family="fam-b")
    res = rsi("tasks", "list", str(tasks), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["name"], r["family"], r["split"]) for r in rows] == [("alpha", "fam-a", "train"),
                                                                   ("beta", "fam-b", "train")]
    assert all(len(r["digest"]) >= 16 and Path(r["path"]).is_dir() for r in rows)
