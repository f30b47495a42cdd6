"""Integrity in the open: `rsi run` / `rsi jobs show` summaries count trials per integrity level, as text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.integrity import integrity_counts
from rsi.loop.context import WorkspaceContext
from rsi.report.jobs import integrity_text
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.tables import TrialRow
from tests.taskgen import make_task

runner = CliRunner()


def test_counts_keep_every_level_in_order() -> None:
    assert integrity_counts([]) == {"declared_outputs": 0, "snapshot": 0, "shared": 0, "none": 0}
    got = integrity_counts(["shared", "snapshot", None, "declared_outputs", "snapshot", "level9"])
    assert list(got.items()) == [("declared_outputs", 1), ("snapshot", 2), ("shared", 1), ("none", 1), ("level9", 1)]
    assert integrity_text(got) == ("declared_outputs 1, snapshot 2, [yellow]shared 1[/], level9 1, "
                                   "not recorded 1")
    assert integrity_text(integrity_counts(["snapshot"])) == "declared_outputs 0, snapshot 1, shared 0"


def _three_levels(root: Path) -> Path:
    """Three tasks the oracle passes, graded at the three levels: one declares the paths its verifier reads, one
    does not (snapshot), one asks for Harbor's shared verifier by name."""
    make_task(root, "declared")
    toml = root / "declared" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nreads = ["/app/out.txt"]\n'))
    make_task(root, "snap")
    make_task(root, "weak")
    toml = root / "weak" / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n'))
    return root


@pytest.fixture
def fake_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSandboxProvider:
    """`rsi run` gets the fake provider where it asks for the workspace's (docker)."""
    fake = FakeSandboxProvider(tmp_path / "fake")
    monkeypatch.setattr("rsi.sandbox.registry.get_provider", lambda *_a, **_k: fake)
    return fake


def test_rsi_run_counts_trials_per_integrity_level(workspace: WorkspaceContext, tmp_path: Path,
                                                   fake_docker: FakeSandboxProvider) -> None:
    tasks = _three_levels(tmp_path / "tasks")
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["-w", root, "run", str(tasks), "--agent", "oracle", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    levels = {"declared_outputs": 2, "snapshot": 2, "shared": 2, "none": 0}
    assert out["integrity"] == levels and out["arms"][0]["integrity"] == levels
    assert {t["task"]: t["integrity"] for t in out["trials"]} == {
        "declared": "declared_outputs", "snap": "snapshot", "weak": "shared"}

    r = runner.invoke(app, ["-w", root, "run", str(tasks / "declared"), str(tasks / "snap"), "--agent", "oracle"])
    assert r.exit_code == 0, r.output
    assert "integrity: declared_outputs 1, snapshot 1, shared 0" in r.output, r.output
    assert not fake_docker.live


def test_jobs_show_counts_trials_with_no_level_recorded(workspace: WorkspaceContext, tmp_path: Path,
                                                        fake_docker: FakeSandboxProvider) -> None:
    tasks = _three_levels(tmp_path / "tasks")
    root = str(workspace.ws.root)
    job = json.loads(runner.invoke(app, ["-w", root, "run", str(tasks), "--agent", "oracle", "--json"]).output)["job"]
    with workspace.store.session() as s:  # what a row written before the field existed holds
        row = s.get(TrialRow, next(t.id for t in workspace.store.trials(job) if t.task_name == "snap"))
        assert row is not None
        row.integrity = None
        s.add(row)
        s.commit()
    r = runner.invoke(app, ["-w", root, "jobs", "show", job])
    assert r.exit_code == 0, r.output
    assert "integrity: declared_outputs 1, snapshot 0, shared 1, not recorded 1" in r.output, r.output
    shown = json.loads(runner.invoke(app, ["-w", root, "jobs", "show", job, "--json"]).output)
    assert shown["integrity"] == {"declared_outputs": 1, "snapshot": 0, "shared": 1, "none": 1}
