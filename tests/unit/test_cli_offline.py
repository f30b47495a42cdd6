"""CLI commands that need neither Docker nor a model, through Typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.loop.context import WorkspaceContext

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
