"""One number, one meaning (issue 37): a generation's holdout pass rate reads the same in the viewer's compare grid
and generations table, the HTML diff report, `rsi diff --json` and the promote gate, and counts the model arms only.

The workspace holds what confused a new user: discover's oracle, nop and known-wrong control trials on the holdout
(with the model's probe), a variant config of the candidate that passes everything, a trial graded at an integrity
level the contract does not accept for promotion, and an infra error. The model's own trials are planted through
the store (4 per task and generation, as promote asks), so `rsi promote` reuses them and runs nothing. Then a
control pass is planted (an oracle and a hinted trial of gen-0001, in a plain run job): no figure moves.

The same holds per part of a two-part holdout (in-skill, the superiority gate; unseen-template, non-inferiority; a
task naming no part counts as unseen): each part's rate on every surface equals the gate's `verdict.parts` figure,
and the figure pooled over both parts (which no gate uses) says so wherever it is shown.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.arm import Arm
from rsi.core.generation import GenerationState, HarnessRef
from rsi.core.task import Task
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.phase import PromoteRequest, promote
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import load_pool, write_yaml_model
from rsi.store.tables import TrialRow
from rsi.view.app import create_app
from rsi.view.context import ViewContext
from tests.unit.test_promote_loop import holdout_task

K = 4
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# per generation: which attempts of each holdout task pass (gen-0000 1 of 4, gen-0001 3 of 4)
PASSING = {"gen-0000": {1}, "gen-0001": {1, 2, 3}}


def _trial(job: str, arm: Arm, task: Task, n: int, *, passed: bool, at: int,
           integrity: str | None = "declared_outputs", error_type: str | None = None) -> TrialRow:
    return TrialRow(id=f"{job}.{task.name}.{arm.id}.{n}", job_id=job, task_name=task.name, task_digest=task.digest,
                    agent=arm.agent, generation=arm.generation, arm_id=arm.id, variant=arm.variant,
                    harness_config_digest=arm.config_digest, attempt=n, status="done", passed=passed,
                    reward=float(passed), split="holdout", integrity=integrity, error_type=error_type,
                    trial_dir=f".rsi/jobs/{job}/{n}", finished_at=T0 + timedelta(seconds=at))


def _job(ctx: WorkspaceContext, job: str, rows: list[TrialRow], arms: list[Arm], **kw: object) -> None:
    ctx.store.create_job(job, agent=arms[0].agent, generation=arms[0].generation, harness_config_digest=None,
                         attempts=K, concurrency=1, task_paths=[], tasks_fingerprint="", trials=rows, arms=arms,
                         **kw)  # type: ignore[arg-type]


def _build(workspace: WorkspaceContext, parts: list[str | None],
           passing: dict[str, dict[str | None, set[int]]]) -> WorkspaceContext:
    """Holdout tasks h0.. naming `parts` (None: no part), controls, a variant, a shared-level and an infra trial;
    the model's own K trials per task and generation pass on the attempts `passing[gen][part]` names."""
    for i, part in enumerate(parts):
        holdout_task(workspace.ws.tasks_dir, f"h{i}", family="a" if i % 2 else "b")
        if part is not None:
            toml = workspace.ws.tasks_dir / f"h{i}" / "task.toml"
            toml.write_text(toml.read_text().replace('split = "holdout"\n',
                                                     f'split = "holdout"\nholdout_part = "{part}"\n'))
    g0 = workspace.generation("gen-0000")
    cfg = workspace.harness_config_for(g0)
    c1 = cfg.model_copy(update={"loop": cfg.loop.model_copy(update={"max_turns": cfg.loop.max_turns - 1})})
    d1 = workspace.register_config(c1, origin="search_space", parent=g0.harness_config.digest)
    cv = cfg.model_copy(update={"loop": cfg.loop.model_copy(update={"max_turns": cfg.loop.max_turns - 2})})
    dv = workspace.register_config(cv, origin="search_space", parent=d1)
    cand = g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE,
                                 "harness_config": HarnessRef(name=cfg.name, digest=d1)})
    write_yaml_model(workspace.ws.generations_dir / "gen-0001.yaml", cand)
    workspace.store.put_generation(cand)
    tasks = sorted((t for t in load_pool(workspace.ws.tasks_dir) if t.split == "holdout"), key=lambda t: t.name)
    m0 = Arm(agent="harness", generation="gen-0000", config_digest=g0.harness_config.digest)
    m1 = Arm(agent="harness", generation="gen-0001", config_digest=d1)
    variant = Arm(agent="harness", generation="gen-0001", config_digest=dv, variant="loop.max_turns=-2")
    at = 0
    # discover: its gate ran the controls on every holdout candidate, and the model's probe (never counted)
    _job(ws_ := workspace, "disc-1", [], [m0], kind="discover", phase="discover")
    ctl = {a: Arm(agent=a, generation="gen-0000") for a in ("oracle", "nop", "known_wrong")}
    gate: list[TrialRow] = []
    for t in tasks:
        for agent, n_runs, ok in (("oracle", 2, True), ("nop", 1, False), ("known_wrong", 2, False)):
            for n in range(1, n_runs + 1):
                at += 1
                gate.append(_trial("gate-1", ctl[agent], t, n, passed=ok, at=at))
        for n in range(1, 3):
            at += 1
            gate.append(_trial("gate-1", m0, t, n, passed=True, at=at))  # the probe: all pass
    _job(ws_, "gate-1", gate, [*ctl.values(), m0], phase="discover", parent_job="disc-1")
    # the model's own trials (K per task and generation), one shared-level pass first (promote does not accept
    # it), one infra error; and a variant config of gen-0001 that passes everything (another arm)
    rows: list[TrialRow] = []
    for t in tasks:
        part = parts[int(t.name[1:])]
        at += 1
        rows.append(_trial("run-1", m0, t, 9, passed=True, at=at, integrity="shared"))
        for gen, arm in (("gen-0000", m0), ("gen-0001", m1)):
            for n in range(1, K + 1):
                at += 1
                rows.append(_trial("run-1", arm, t, n, passed=n in passing[gen][part], at=at))
        at += 1
        rows.append(_trial("run-1", m1, t, 8, passed=False, at=at, error_type="sandbox_error"))
        for n in range(1, K + 1):
            at += 1
            rows.append(_trial("run-1", variant, t, n, passed=True, at=at))
    _job(ws_, "run-1", rows, [m0, m1, variant])
    return workspace


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    """Six holdout tasks naming no part (a holdout discovered before the split: all unseen, gated as one)."""
    yield _build(workspace, [None] * 6, {g: {None: p} for g, p in PASSING.items()})


def _plant_control_passes(ctx: WorkspaceContext) -> None:
    """The oracle and a hinted rollout of gen-0001 pass every holdout task, in a plain run job, finished before any
    model trial (so a rate that took controls for the model would count them among its K)."""
    tasks = [t for t in load_pool(ctx.ws.tasks_dir) if t.split == "holdout"]
    d1 = ctx.generation("gen-0001").harness_config.digest
    arms = [Arm(agent="oracle", generation="gen-0001"), Arm(agent="hinted", generation="gen-0001", config_digest=d1)]
    _job(ctx, "run-2", [_trial("run-2", a, t, 1, passed=True, at=-1 - i) for i, t in enumerate(tasks)
                        for a in arms], arms)


def _figures(ctx: WorkspaceContext, tmp: Path) -> dict[str, tuple[float, float]]:
    """The holdout rate of (gen-0000, gen-0001) as each surface shows it."""
    runner = CliRunner()
    root = str(ctx.ws.root)
    out: dict[str, tuple[float, float]] = {}
    res = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "json"])
    assert res.exit_code == 0, res.output
    o = json.loads(res.output)["overall"]
    assert o["scope"] == "holdout"
    out["rsi diff --json"] = (o["a_rate"], o["b_rate"])
    page = tmp / f"diff-{len(list(tmp.glob('*.html')))}.html"
    res = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "html", "-o", str(page)])
    assert res.exit_code == 0, res.output
    m = re.search(r"pass rate \(holdout, 6 tasks\): gen-0000 ([\d.]+)% .*?-&gt; gen-0001 ([\d.]+)%", page.read_text())
    assert m, page.read_text()[:2000]
    out["diff report html"] = (float(m.group(1)) / 100, float(m.group(2)) / 100)
    view = ViewContext.open(ctx.ws.root)
    try:
        with TestClient(create_app(view, index_path=tmp / f"index-{len(out)}.db")) as client:
            grid = client.get("/compare?split=holdout").text
            cells = {c: int(p) / int(n) for c, p, n in re.findall(
                r'class="cell total" data-col="(gen-000[01])" data-passes="(\d+)" data-graded="(\d+)"', grid)}
            out["viewer compare grid"] = (cells["gen-0000"], cells["gen-0001"])
            gens = client.get("/generations").text
            rates = dict(re.findall(r'data-generation="(gen-000[01])" data-holdout="([\d.]+)"', gens))
            out["viewer generations"] = (float(rates["gen-0000"]), float(rates["gen-0001"]))
    finally:
        view.close()
    return out


def test_every_surface_shows_the_gates_holdout_rate_and_no_control_moves_it(ws: WorkspaceContext,
                                                                             tmp_path: Path) -> None:
    outcome = promote(ws, PromoteRequest("gen-0001"), provider=FakeSandboxProvider(tmp_path / "fake"))
    assert outcome.trials["planned"] == 0  # the planted model trials were the evidence
    gate = (outcome.verdict.parent_rate, outcome.verdict.candidate_rate)
    assert gate == (pytest.approx(6 / 24), pytest.approx(18 / 24))  # the model's own 1/4 and 3/4, nothing else
    before = _figures(ws, tmp_path)
    for surface, got in before.items():
        assert got == (pytest.approx(gate[0], abs=5e-4), pytest.approx(gate[1], abs=5e-4)), surface

    _plant_control_passes(ws)  # a planted control pass moves no figure
    assert _figures(ws, tmp_path) == before
    again = promote(ws, PromoteRequest("gen-0001", dry_run=True), provider=FakeSandboxProvider(tmp_path / "fake2"))
    assert (again.verdict.parent_rate, again.verdict.candidate_rate) == gate


def test_a_cell_links_to_exactly_the_trials_it_counts(ws: WorkspaceContext, tmp_path: Path) -> None:
    view = ViewContext.open(ws.ws.root)
    try:
        with TestClient(create_app(view, index_path=tmp_path / "index.db")) as client:
            grid = client.get("/compare?split=holdout").text
            link = re.search(r'data-col="gen-0001" data-task="h0"[^>]*><a href="([^"]+)">(\d+)/(\d+)</a>', grid)
            assert link and (link.group(2), link.group(3)) == ("3", "4"), grid[:3000]
            listed = client.get(html.unescape(link.group(1))).text
            ids = re.findall(r'<tr class="trial-row" data-id="([^"]+)"', listed)
            # the 4 graded trials of gen-0001's own config: not the infra error, the variant, or any control
            assert sorted(ids) == sorted(f"run-1.h0.{Arm(agent='harness', generation='gen-0001', config_digest=ws.generation('gen-0001').harness_config.digest).id}.{n}"  # noqa: E501
                                         for n in range(1, K + 1))
            # controls have their own columns, never a generation's: the oracle's 2 gate passes on h0
            assert re.search(r'data-col="ctl:oracle" data-task="h0" data-passes="2" data-graded="2"', grid)
            # by arm: the variant config is its own column, and passes everything
            arms = client.get("/compare?split=holdout&by=arm").text
            assert re.search(r'data-task="h0" data-passes="4" data-graded="4"', arms)
    finally:
        view.close()


def test_jobs_show_counts_the_model_arms_and_lists_controls_apart(ws: WorkspaceContext) -> None:
    """A job holding the model and the oracle side by side: its pass@1 is the model's; the oracle is its own arm."""
    tasks = [t for t in load_pool(ws.ws.tasks_dir) if t.split == "holdout"][:2]
    g0 = ws.generation("gen-0000")
    model = Arm(agent="harness", generation="gen-0000", config_digest=g0.harness_config.digest)
    oracle = Arm(agent="oracle", generation="gen-0000")
    rows = [_trial("mixed", a, t, n, passed=(a is oracle or n == 1), at=n) for t in tasks for a in (model, oracle)
            for n in range(1, K + 1)]
    _job(ws, "mixed", rows, [model, oracle])
    _job(ws, "controls", [_trial("controls", oracle, t, 1, passed=True, at=1) for t in tasks], [oracle])
    runner = CliRunner()
    shown = json.loads(runner.invoke(app, ["-w", str(ws.ws.root), "jobs", "show", "mixed", "--json"]).output)
    assert shown["pass_at_1"] == pytest.approx(0.25) and shown["counts"] == "model arms"
    assert {a["role"]: a["pass_at_1"] for a in shown["arms"]} == {"model": pytest.approx(0.25), "control": 1.0}
    text = runner.invoke(app, ["-w", str(ws.ws.root), "jobs", "show", "mixed"]).output
    assert "control: evidence about the tasks, not a model score" in text and "counting model arms" in text
    alone = json.loads(runner.invoke(app, ["-w", str(ws.ws.root), "jobs", "show", "controls", "--json"]).output)
    assert alone["pass_at_1"] == 1.0 and alone["counts"].startswith("controls (oracle")
    listed = {j["job"]: j for j in json.loads(runner.invoke(app, ["-w", str(ws.ws.root), "jobs", "list",
                                                                   "--json"]).output)}
    assert listed["mixed"]["pass_at_1"] == pytest.approx(0.25) and listed["controls"]["counts"] != "model arms"


# a two-part holdout: five in-skill tasks and five unseen-template ones (h9 names no part: it counts as unseen), each
# part with the units its gate needs; per part which attempts pass: in-skill 1/4 -> 3/4, unseen 2/4 -> 2/4 (pooled over
# both parts: 3/8 -> 5/8, a figure no gate uses)
TWO_PARTS: list[str | None] = ["in_skill"] * 5 + ["unseen"] * 4 + [None]
PASSING_BY_PART = {"gen-0000": {"in_skill": {1}, "unseen": {1, 2}, None: {1, 2}},
                   "gen-0001": {"in_skill": {1, 2, 3}, "unseen": {2, 3}, None: {2, 3}}}


@pytest.fixture
def two_part_ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    yield _build(workspace, TWO_PARTS, PASSING_BY_PART)


def _part_figures(ctx: WorkspaceContext, tmp: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Per holdout part, the rate of (gen-0000, gen-0001) as each surface shows it."""
    runner = CliRunner()
    root = str(ctx.ws.root)
    out: dict[str, dict[str, tuple[float, float]]] = {}
    res = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["overall"]["scope"] == "holdout, both parts pooled"  # the pooled figure says what it is
    out["rsi diff --json"] = {x["part"]: (x["a_rate"], x["b_rate"]) for x in got["parts"] if x["part"] != "suite"}
    res = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    out["rsi diff (terminal)"] = {
        part: (float(m.group(1)) / 100, float(m.group(2)) / 100) for part, label in
        (("in_skill", "in-skill"), ("unseen", "unseen-template"))
        if (m := re.search(rf"{label} holdout \([^)]*, 5 tasks\): gen-0000 ([\d.]+)% \(\d+/\d+\) -> gen-0001 "
                           r"([\d.]+)%", text))}
    page = tmp / f"diff-parts-{len(list(tmp.glob('*.html')))}.html"
    res = runner.invoke(app, ["-w", root, "diff", "gen-0000", "gen-0001", "--format", "html", "-o", str(page)])
    assert res.exit_code == 0, res.output
    out["diff report html"] = {p: (float(a), float(b)) for p, a, b in re.findall(
        r'<tr class="part-row" data-part="(in_skill|unseen)" data-a="([\d.]+)" data-b="([\d.]+)"', page.read_text())}
    view = ViewContext.open(ctx.ws.root)
    try:
        with TestClient(create_app(view, index_path=tmp / f"index-parts-{len(list(tmp.glob('*.db')))}.db")) as client:
            grid = client.get("/compare?split=holdout").text
            cells = {(p, c): int(n) / int(d) for p, c, n, d in re.findall(
                r'data-part="(in_skill|unseen)" data-col="(gen-000[01])" data-passes="(\d+)" data-graded="(\d+)"',
                grid)}
            out["viewer compare grid"] = {p: (cells[(p, "gen-0000")], cells[(p, "gen-0001")])
                                          for p in ("in_skill", "unseen") if (p, "gen-0000") in cells}
            for part in ("in_skill", "unseen"):  # the grid of one part: its headline row is that part's figure
                one = client.get(f"/compare?split={part}").text
                tot = {c: int(n) / int(d) for c, n, d in re.findall(
                    r'class="cell total" data-col="(gen-000[01])" data-passes="(\d+)" data-graded="(\d+)"', one)}
                out.setdefault("viewer compare grid, one part", {})[part] = (tot["gen-0000"], tot["gen-0001"])
            gens = client.get("/generations").text
            rows = {g: (a, b) for g, a, b in re.findall(
                r'data-generation="(gen-000[01])" data-holdout="[\d.]*" data-in-skill="([\d.]+)" '
                r'data-unseen="([\d.]+)"', gens)}
            out["viewer generations"] = {
                "in_skill": (float(rows["gen-0000"][0]), float(rows["gen-0001"][0])),
                "unseen": (float(rows["gen-0000"][1]), float(rows["gen-0001"][1]))}
    finally:
        view.close()
    return out


def test_every_surface_shows_each_holdout_part_as_the_gate_does(two_part_ws: WorkspaceContext,
                                                                 tmp_path: Path) -> None:
    ws = two_part_ws
    outcome = promote(ws, PromoteRequest("gen-0001"), provider=FakeSandboxProvider(tmp_path / "fake"))
    assert outcome.trials["planned"] == 0  # the planted model trials were the evidence
    v = outcome.verdict
    gate = {p.part: (p.parent, p.candidate) for p in v.parts}
    # the model's own K per task: in-skill 1/4 -> 3/4 over 5 tasks, unseen (h9, naming no part, among them) 2/4 -> 2/4
    assert gate == {"in_skill": (pytest.approx(5 / 20), pytest.approx(15 / 20)),
                    "unseen": (pytest.approx(10 / 20), pytest.approx(10 / 20))}
    assert (v.parent_rate, v.candidate_rate) == gate["in_skill"]  # the headline is the superiority part's
    before = _part_figures(ws, tmp_path)
    assert len(before) == 6
    for surface, got in before.items():
        assert set(got) == {"in_skill", "unseen"}, (surface, got)
        for part, (a, b) in got.items():
            assert (a, b) == (pytest.approx(gate[part][0], abs=5e-4), pytest.approx(gate[part][1], abs=5e-4)), \
                (surface, part)

    _plant_control_passes(ws)  # a planted control pass moves no figure
    assert _part_figures(ws, tmp_path) == before
    again = promote(ws, PromoteRequest("gen-0001", dry_run=True), provider=FakeSandboxProvider(tmp_path / "fake2"))
    assert {p.part: (p.parent, p.candidate) for p in again.verdict.parts} == gate


def test_a_part_cell_links_to_exactly_that_parts_trials(two_part_ws: WorkspaceContext, tmp_path: Path) -> None:
    """The in-skill headline cell of gen-0001 lists the 4 counted trials of each in-skill task, and no unseen one."""
    view = ViewContext.open(two_part_ws.ws.root)
    try:
        with TestClient(create_app(view, index_path=tmp_path / "index.db")) as client:
            grid = client.get("/compare?split=holdout").text
            link = re.search(r'data-part="in_skill" data-col="gen-0001"[^>]*><a href="([^"]+)">', grid)
            assert link, grid[:3000]
            listed = client.get(html.unescape(link.group(1)) + "&limit=200").text
            ids = re.findall(r'<tr class="trial-row" data-id="([^"]+)"', listed)
            assert len(ids) == 5 * K and {i.split(".")[1] for i in ids} == {f"h{i}" for i in range(5)}
    finally:
        view.close()
