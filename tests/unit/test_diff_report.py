"""`rsi diff` on a workspace where gen-0001 (another config, an adapter) beat gen-0000 on the holdout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.generation import AdapterRef, GenerationState, HarnessRef
from rsi.harness.agent import AGENTS
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.phase import PromoteRequest, promote
from rsi.report.diff import build_diff, config_diff, flip
from rsi.report.diff_render import markdown
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import write_yaml_model
from tests.unit.test_promote_loop import BetterAgent, holdout_task


@pytest.fixture
def ws(workspace: WorkspaceContext, tmp_path: Path) -> Iterator[WorkspaceContext]:
    AGENTS.add("better", BetterAgent)
    for i in range(6):
        holdout_task(workspace.ws.tasks_dir, f"h{i}", family="a" if i % 2 else "b")
    g0 = workspace.generation("gen-0000")
    cfg = workspace.harness_config_for(g0)
    new = cfg.model_copy(update={"loop": cfg.loop.model_copy(update={"max_turns": cfg.loop.max_turns - 1})})
    digest = workspace.register_config(new, origin="search_space", parent=g0.harness_config.digest)
    ad = workspace.ws.root / "adapters" / "agent" / "g0001"
    ad.mkdir(parents=True)
    (ad / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    cand = g0.model_copy(update={
        "id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE,
        "harness_config": HarnessRef(name=cfg.name, digest=digest),
        "adapters": {"agent": AdapterRef(path="adapters/agent/g0001", sha256="ab" * 32,
                                         serve_name="agent-g0001-abababab")},
    })
    write_yaml_model(workspace.ws.generations_dir / "gen-0001.yaml", cand)
    workspace.store.put_generation(cand)
    workspace.store.upsert_attribution(task_digest="d1", task_name="x1", generation="gen-0000", kind="config",
                                       confidence=1.0, evidence=[], reason="r")
    workspace.store.upsert_attribution(task_digest="d2", task_name="x2", generation="gen-0000", kind="model",
                                       confidence=1.0, evidence=[], reason="r")
    workspace.store.upsert_attribution(task_digest="d2", task_name="x2", generation="gen-0001", kind="config",
                                       confidence=1.0, evidence=[], reason="r")
    p = FakeSandboxProvider(tmp_path / "fake")
    out = promote(workspace, PromoteRequest("gen-0001", agent="better"), provider=p)
    assert out.verdict.passed
    yield workspace


def test_config_diff_and_flip() -> None:
    d = config_diff("a: 1\nb: 2\n", "a: 1\nb: 3\n", "A.yaml", "B.yaml")
    assert d.splitlines()[:2] == ["--- A.yaml", "+++ B.yaml"] and "-b: 2" in d and "+b: 3" in d
    assert config_diff("a: 1\n", "a: 1\n", "A", "B") == ""
    assert [flip(0.25, 0.75), flip(0.75, 0.25), flip(0, 0.25), flip(1, 0.5)] == [
        "fixed", "regressed", "still_failing", "still_passing"]


def test_diff_report_reads_everything_from_the_store(ws: WorkspaceContext) -> None:
    r = build_diff(ws, "gen-0000", "gen-0001", agent="better")
    assert r.comparable and not r.config["same"]
    assert "-  max_turns:" in r.config["unified_diff"] and "+  max_turns:" in r.config["unified_diff"]
    assert r.adapter["b"]["adapters"]["agent"]["rank"] == 8 and not r.adapter["same"]
    assert r.flips == {"fixed": 6, "regressed": 0, "still_failing": 0, "still_passing": 0}
    assert [(f.family, f.a, f.b) for f in r.families] == [("a", (3, 12), (9, 12)), ("b", (3, 12), (9, 12))]
    lo, hi = r.families[0].b_ci
    assert lo < 0.75 < hi
    o = r.overall
    assert o["scope"] == "holdout" and o["tasks"] == 6 and o["delta"] == pytest.approx(0.5)
    assert o["p_value"] == pytest.approx(1 / 64)  # exact one-sided permutation over 6 tasks, as the gate tests
    # the decision comes with the report: promote's gate table, and the very p the significance gate used
    gates = {g["name"]: g for g in r.gate["verdict"]["gates"]}
    assert r.gate["verdict"]["passed"] and gates["significance"]["passed"]
    gated_p = r.gate["verdict"]["p_value"]
    assert (o["unit_p_value"] if o["unit"] != "task" else o["p_value"]) == pytest.approx(gated_p)
    from rich.console import Console

    from rsi.report.diff_html import html
    from rsi.report.diff_render import term

    con = Console(width=200, record=True)
    con.print(term(r))
    text = con.export_text()
    assert "decision (promote job" in text and "significance" in text and "promoted" in text
    page = html(r)
    assert page.index('id="gates"') < page.index("Harness config") and "significance" in page
    assert r.attribution["counts"]["a"]["config"] == 1 and r.attribution["moved"] == {
        "config -> none": 1, "model -> config": 1}
    spend = {(s["generation"], s["phase"]): s["trials"] for s in r.spend}
    assert spend == {("gen-0000", "promote"): 24, ("gen-0001", "promote"): 24}
    md = markdown(r)
    assert "# rsi diff gen-0000 -> gen-0001" in md and "| a | 3 |" in md and "```diff" in md


def test_diff_refuses_rates_across_contract_majors(ws: WorkspaceContext) -> None:
    g1 = ws.generation("gen-0001")
    ws.store.put_generation(g1.model_copy(update={"contract": "2.0.0"}))
    r = build_diff(ws, "gen-0000", "gen-0001", agent="better")
    assert not r.comparable and r.families == [] and r.overall == {}
    assert r.refusal is not None and "not compared" in r.refusal and "2.0.0" in r.refusal


def test_cli_formats(ws: WorkspaceContext, tmp_path: Path) -> None:
    ws.store.close()
    runner, root = CliRunner(), str(ws.ws.root)
    r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001"], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "spend per generation and phase" in r.output and "attribution" in r.output
    r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output)["b"] == "gen-0001"
    out = tmp_path / "d.md"
    r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "md", "--out", str(out)])
    assert r.exit_code == 0 and out.read_text().startswith("# rsi diff")
    for fmt in ("term", "json", "html"):  # each format written to a file holds the report (term was empty)
        out = tmp_path / f"d.{fmt}"
        r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", fmt, "--out", str(out)])
        assert r.exit_code == 0 and "gen-0001" in out.read_text(), (fmt, r.output)
    assert "spend per generation and phase" in (tmp_path / "d.term").read_text()
    r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "pdf"])
    assert r.exit_code == 2 and "--format" in r.output
    r = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0009"])
    assert r.exit_code != 0 and "gen-0009" in r.output
