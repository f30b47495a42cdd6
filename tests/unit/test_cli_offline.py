"""CLI commands that need neither Docker nor a model, through Typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.context import WorkspaceContext
from tests.taskgen import make_task

runner = CliRunner()


def test_generations_list_and_show(workspace: WorkspaceContext) -> None:
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["-w", root, "generations", "list", "--json"])
    assert r.exit_code == 0, r.output
    gens = json.loads(r.output)
    assert [g["id"] for g in gens] == ["gen-0000"]
    assert gens[0]["adapters"] == {} and gens[0]["harness_config"]["name"] == "default"
    r = runner.invoke(app, ["-w", root, "generations", "show", "gen-0009"])
    assert r.exit_code == 2
    assert "unknown generation 'gen-0009'; known: gen-0000" in r.output


def test_commands_outside_a_workspace_say_how_to_make_one(tmp_path: Path) -> None:
    r = runner.invoke(app, ["-w", str(tmp_path), "jobs", "list"])
    assert r.exit_code == 2
    assert f"rsi init {tmp_path}" in r.output


def test_unknown_agent_lists_the_known_ones(workspace: WorkspaceContext, tmp_path: Path) -> None:
    r = runner.invoke(app, ["-w", str(workspace.ws.root), "run", str(tmp_path), "--agent", "gpt"])
    assert r.exit_code == 2
    assert "unknown agent 'gpt'; known: " in r.output
    known = r.output.split("known: ")[1].strip().split(", ")
    assert {"harness", "known_wrong", "nop", "oracle"} <= set(known)  # (tests may register more)


def test_demo_refuses_a_budget_that_cannot_work_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    r = runner.invoke(app, ["demo", "--dir", str(target), "--budget", "10"])
    assert r.exit_code == 2
    assert "--budget: 10 trials cannot cover promote's" in r.output and "minimum that works is" in r.output
    assert not target.exists()  # no half-made workspace
    target.mkdir()  # an empty directory is allowed, and stays empty after the refusal
    r = runner.invoke(app, ["demo", "--dir", str(target), "--budget", "10"])
    assert r.exit_code == 2 and list(target.iterdir()) == []


def test_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    r = runner.invoke(app, ["demo", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "exists and is not empty" in r.output
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_cycle_refuses_bad_settings_before_any_job_exists(workspace: WorkspaceContext) -> None:
    root = str(workspace.ws.root)
    for args, msg in ((["-g", "nosuch"], "unknown generator 'nosuch'; known: "),
                      (["-k", "0"], "--attempts: must be at least 1"),
                      (["--n", "0"], "--n: must be at least 1"),
                      (["--budget", "0"], "--budget: must be more than 0")):
        r = runner.invoke(app, ["-w", root, "cycle", "--budget", "200", *args])
        assert r.exit_code == 2 and msg in r.output, (args, r.output)
    assert workspace.store.jobs_of(kind="cycle") == []  # no half-made cycle job


def test_diff_of_a_generation_with_itself_is_refused(workspace: WorkspaceContext) -> None:
    r = runner.invoke(app, ["-w", str(workspace.ws.root), "diff", "gen-0000", "gen-0000"])
    assert r.exit_code == 2 and "is the same generation as gen-0000" in r.output


def test_attribution_names_an_unknown_generation_or_task(workspace: WorkspaceContext) -> None:
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["-w", root, "attribution", "--gen", "gen-0042"])
    assert r.exit_code == 2 and "unknown generation 'gen-0042'; known: gen-0000" in r.output
    r = runner.invoke(app, ["-w", root, "attribution", "--task", "no-such-task"])
    assert r.exit_code == 2 and "--task" in r.output and "no-such-task" in r.output
    make_task(workspace.ws.tasks_dir, "fresh")
    r = runner.invoke(app, ["-w", root, "attribution", "--task", "fresh", "--json"])  # known, no verdict yet
    assert r.exit_code == 0 and json.loads(r.output) == []


def test_jobs_list_never_cuts_a_job_id_short(workspace: WorkspaceContext) -> None:
    """The id is what `--resume` and `jobs show` take: at 80 columns it is printed whole."""
    job = "exp-20261204-151611-85e0cc"
    workspace.store.create_job(job, agent="harness", generation="gen-0000", harness_config_digest=None, attempts=1,
                               concurrency=1, task_paths=[], tasks_fingerprint="fp", trials=[], kind="expand")
    workspace.store.mark_job_interrupted(job, "budget spent")
    cut = "dis-20261204-151612-85e0cd"  # a job that did not end on its budget
    workspace.store.create_job(cut, agent="harness", generation="gen-0000", harness_config_digest=None, attempts=1,
                               concurrency=1, task_paths=[], tasks_fingerprint="fp", trials=[], kind="discover")
    workspace.store.mark_job_interrupted(cut, "interrupted; finish it with `rsi discover --resume`")
    r = CliRunner().invoke(app, ["-w", str(workspace.ws.root), "jobs", "list"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    row = {ln.split()[0]: ln for ln in r.output.splitlines() if ln.strip()}
    # a job that ended on its budget cap stopped as asked: it is not "interrupted"
    assert "stopped (budget)" in row[job] and "interrupted" not in row[job], r.output
    assert "interrupted" in row[cut] and "discover" in row[cut], r.output


def test_demo_workspace_asks_promote_for_the_in_template_rate(tmp_path: Path) -> None:
    from rsi.loop.context import WorkspaceContext
    from rsi.loop.cycle.demo import DEMO_IN_TEMPLATE, DEMO_LOOKS, DEMO_SPENDING, DEMO_TRAIN, demo_settings
    from rsi.loop.init import init_workspace

    init_workspace(tmp_path / "ws", starter_tasks=False)
    demo_settings(tmp_path / "ws")
    ctx = WorkspaceContext.open(tmp_path / "ws")
    try:
        assert ctx.contract.promotion.in_template_trials_per_task == DEMO_IN_TEMPLATE >= 1
        assert (ctx.contract.promotion.looks, ctx.contract.promotion.spending) == (DEMO_LOOKS, DEMO_SPENDING)
        assert ctx.contract.promotion.suites == ["suites/starter"]  # the rest of the contract is kept
        assert ctx.settings.train.steps == DEMO_TRAIN["steps"]
    finally:
        ctx.store.close()
