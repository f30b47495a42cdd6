"""`rsi trials show` and `rsi trials list` say which node a trial ran on (`trials.node`).

The `ray` executor records the Ray node id of each trial; the `local` executor records none (the
driver's own machine), shown as `local` and `null` in JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import RunRequest, run_job
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.tables import TrialRow
from tests.taskgen import make_tasks

runner = CliRunner()
NODE = "5f0c9e2ab7d14c6e8a3b1d2c4e6f8a0b1c3d5e7f9a1b3c5d7e9f1a3b"  # a Ray node id (56 hex characters)


def test_the_node_of_each_trial_is_shown_and_listed(
    workspace: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path
) -> None:
    make_tasks(tmp_path / "tasks", 2)
    out = run_job(workspace, RunRequest(paths=[tmp_path / "tasks"], agent="oracle"), provider=provider)
    local, remote = (t.id for t in out.trials)
    assert all(t.node is None for t in out.trials)  # the local executor records no node
    with workspace.store.session() as s:  # what the ray executor records for a trial
        row = s.get(TrialRow, remote)
        assert row is not None
        row.node = NODE
        s.add(row)
        s.commit()
    root = str(workspace.ws.root)

    r = runner.invoke(app, ["-w", root, "trials", "show", remote])
    assert r.exit_code == 0, r.output
    assert f"node={NODE}" in r.output.replace("\n", "")
    r = runner.invoke(app, ["-w", root, "trials", "show", local])
    assert r.exit_code == 0, r.output
    assert "node=local" in r.output
    r = runner.invoke(app, ["-w", root, "trials", "show", remote, "--json"])
    assert json.loads(r.output)["node"] == NODE

    r = runner.invoke(app, ["-w", root, "trials", "list", out.job.id, "--json"])
    assert r.exit_code == 0, r.output
    assert {t["id"]: t["node"] for t in json.loads(r.output)} == {local: None, remote: NODE}
    r = runner.invoke(app, ["-w", root, "trials", "list", out.job.id], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "node" in r.output and NODE[:12] in r.output and "local" in r.output


def test_a_job_run_on_this_machine_lists_no_node_column(
    workspace: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path
) -> None:
    make_tasks(tmp_path / "tasks", 1)
    out = run_job(workspace, RunRequest(paths=[tmp_path / "tasks"], agent="oracle"), provider=provider)
    r = runner.invoke(app, ["-w", str(workspace.ws.root), "trials", "list", out.job.id], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    header = r.output.splitlines()[1]
    assert "trial" in header and "node" not in header
