"""The template is the evaluation unit: the split keeps whole templates apart (over hundreds of generated
tasks), holdout candidates are admitted on validity alone (never by the parent's probe band), holdout-only
discovery tops the holdout up with templates it lacks, the contract refuses an unknown unit, and the paired
test is clustered on templates (per-template mean differences) with the per-task figure beside it."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rsi.core.contract import Promotion
from rsi.core.discover import TaskDraft, draft_split, unit_split
from rsi.core.errors import InputError
from rsi.core.generation import GenerationState
from rsi.core.promotion import TaskOutcome, evaluate
from rsi.harness.agent import AGENTS
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import WORDS, Level, ProceduralFamily, Template
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.loop.promote.phase import PromoteRequest, holdout_units, promote
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import load_contract, load_tasks, write_yaml_model
from tests.taskgen import R
from tests.unit.test_promote_loop import BetterAgent, holdout_task

load_generators()
FAMILIES = ["files", "text", "data", "logs", "pyfix", "pipeline"]


def _drafts(n_seeds: int) -> list[TaskDraft]:
    out = []
    for fam in FAMILIES:
        g = GENERATORS.create(fam)
        assert isinstance(g, ProceduralFamily)
        for level in g.levels:
            out += [g.generate(GenRequest(seed=s, difficulty=level)) for s in range(n_seeds)]
    return out


def test_no_template_has_tasks_on_both_sides_over_hundreds_of_tasks() -> None:
    drafts = _drafts(20)
    assert len(drafts) == 6 * 4 * 20
    sides: dict[str, set[str]] = defaultdict(set)
    fam_sides: dict[str, set[str]] = defaultdict(set)
    for d in drafts:
        assert d.template is not None
        sides[d.template].add(draft_split(d, d.name(), 0.2, "template"))
        fam_sides[d.family].add(draft_split(d, d.name(), 0.2, "family"))
    assert all(len(s) == 1 for s in sides.values()), {t: s for t, s in sides.items() if len(s) > 1}
    assert all(len(s) == 1 for s in fam_sides.values())
    holdout = {t for t, s in sides.items() if s == {"holdout"}}
    train = {t for t, s in sides.items() if s == {"train"}}
    assert holdout and train and len(sides) >= 60
    # the split is a function of the template id alone, and some 20 % of templates are holdout
    assert all(unit_split("template", t, 0.2) == "holdout" for t in holdout)
    assert 0.1 < len(holdout) / len(sides) < 0.35
    # levels 1-2 hold enough holdout templates for the clustered test (5 at alpha 0.05) and the demo's 8
    low = {d.template for d in drafts if d.difficulty <= 2 and d.template in holdout}
    assert len(low) >= 8
    # split by task digest, templates do straddle the split: the failure the template unit prevents
    by_task: dict[str, set[str]] = defaultdict(set)
    for d in drafts:
        by_task[d.template or ""].add(draft_split(d, d.name(), 0.2, "task"))
    assert any(len(s) == 2 for s in by_task.values())


def test_contract_holdout_unit_default_and_refusal(tmp_path: Path) -> None:
    assert Promotion().holdout_unit == "template"
    repo = Path(__file__).resolve().parents[2]
    assert load_contract(repo / "contracts" / "hcp-1.0.yaml").promotion.holdout_unit == "template"
    data = yaml.safe_load((repo / "contracts" / "hcp-1.0.yaml").read_text())
    data["promotion"]["holdout_unit"] = "paragraph"
    bad = tmp_path / "hcp.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as e:
        load_contract(bad)
    msg = str(e.value)
    assert "\n" not in msg and str(bad) in msg and "promotion.holdout_unit" in msg and "template" in msg


# -- discovery on the fake provider ----------------------------------------------------------------

WRITE = f'echo WORD > "{R}/app/out.txt"\n'
TEST = (f'mkdir -p "{R}/logs/verifier"\n'
        f'if [ "$(cat "{R}/app/out.txt" 2>/dev/null)" = ok ]; then echo 1 > "{R}/logs/verifier/reward.txt"; '
        f'else echo 0 > "{R}/logs/verifier/reward.txt"; fi\n')


def _unused(rng: random.Random) -> Level:  # the fake family writes its drafts itself (scripts the fake runs)
    raise AssertionError


class TplFake(ProceduralFamily):
    """Twenty-four valid level-1 templates whose scripts run under FakeSandboxProvider."""

    name = "tplfake"
    family = "tplfake"
    templates = tuple(Template(f"t{k}", 1, _unused) for k in range(24))

    def generate(self, req: GenRequest) -> TaskDraft:
        tpl = self.template(req.template) if req.template else \
            random.Random(f"{self.name}:{req.seed}").choice(self.levels[1])
        words = " ".join(random.Random(f"{tpl.id}:{req.seed}").sample(WORDS, 8))
        return TaskDraft(
            generator=self.name, family=self.family, template=f"{self.family}/{tpl.id}", difficulty=1, seed=req.seed,
            instruction=f"{tpl.id}: {words}: write ok to /app/out.txt.",
            dockerfile="ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nWORKDIR /app\n",
            test_sh="#!/bin/bash\n" + TEST, solve_sh="#!/bin/bash\n" + WRITE.replace("WORD", "ok"),
            known_wrong=["#!/bin/bash\n" + WRITE.replace("WORD", "ko")],
        )


HOLDOUT = [t for t in TplFake().template_ids(1) if unit_split("template", t, 0.2) == "holdout"]


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    GENERATORS.add("tplfake", TplFake)
    assert 2 <= len(HOLDOUT) <= 6  # the fixed hash leaves a few of the 24 on the holdout side
    yield workspace


def test_holdout_candidates_are_admitted_on_validity_alone(ws: WorkspaceContext,
                                                          provider: FakeSandboxProvider) -> None:
    """The parent (the oracle, here) solves every candidate: train ones are dropped above the band, holdout
    ones are admitted all the same and never probed, so the holdout holds tasks the parent solves."""
    out = discover(ws, DiscoverRequest(n=24, generators=["tplfake"], attempts=2, probe_agent="oracle",
                                       concurrency=2, seed=3), provider=provider)
    assert not out.interrupted, out.reason
    train = [c for c in out.candidates if c.split == "train"]
    hold = [c for c in out.candidates if c.split == "holdout"]
    assert train and hold
    assert all((c.state, c.reason, c.probe_pass_rate) == ("dropped", "above_band", 1.0) for c in train)
    assert all(c.state == "admitted" and c.probe_pass_rate is None and c.probe_trials == 0 for c in hold)
    probed = {t.task_name for j in ws.store.child_jobs(out.job_id) if j.params["stage"] == "probe"
              for t in ws.store.trials(j.id)}
    assert probed == {c.name for c in train}
    tasks = load_tasks([ws.ws.tasks_dir])
    assert {t.name for t in tasks} == {c.name for c in hold}
    for t in tasks:  # each records its template, and every template of the holdout is a holdout template
        assert t.split == "holdout" and t.spec.metadata.rsi.template in HOLDOUT
    cand_tpl = {c.name: c.split for c in out.candidates}
    assert cand_tpl
    by_tpl: dict[str, set[str]] = defaultdict(set)
    for c in out.candidates:
        text = Path(c.stage_dir, "task", "task.toml").read_text()
        tpl = next(ln.split('"')[1] for ln in text.splitlines() if ln.startswith("template ="))
        by_tpl[tpl].add(c.split or "")
    assert all(len(s) == 1 for s in by_tpl.values())


def test_holdout_only_tops_up_templates_the_holdout_lacks(ws: WorkspaceContext,
                                                          provider: FakeSandboxProvider) -> None:
    first = discover(ws, DiscoverRequest(n=1, generators=["tplfake"], holdout_only=True, attempts=1,
                                         probe_agent="oracle", concurrency=2, seed=5), provider=provider)
    (c1,) = [c for c in first.candidates if c.state == "admitted"]
    assert len(holdout_units(ws)) == 1
    more = discover(ws, DiscoverRequest(n=len(HOLDOUT) - 1, generators=["tplfake"], holdout_only=True, attempts=1,
                                        probe_agent="oracle", concurrency=2, seed=6), provider=provider)
    assert all(c.split == "holdout" for c in more.candidates)
    # every new candidate is of a holdout template the holdout did not have yet
    assert len(holdout_units(ws)) == len(HOLDOUT)
    assert set(holdout_units(ws)) == set(HOLDOUT)
    # no probe ran: holdout-only admits on validity alone
    assert not [j for o in (first, more) for j in ws.store.child_jobs(o.job_id) if j.params["stage"] == "probe"]
    assert c1.name in {t.name for ts in holdout_units(ws).values() for t in ts}


# -- the clustered paired test ----------------------------------------------------------------------


def _arm(spec: dict[str, tuple[str, int]], k: int = 4) -> dict[str, TaskOutcome]:
    """task -> (template, passes of k)."""
    return {t: TaskOutcome(t, u.split("/")[0], p, k, unit=u) for t, (u, p) in spec.items()}


def test_the_paired_test_is_clustered_on_templates() -> None:
    # 2 templates x 6 tasks, every task improves: 12 tasks look significant, 2 templates cannot be
    parent = _arm({f"t{i}": (f"f/a{i % 2}", 0) for i in range(12)})
    cand = _arm({f"t{i}": (f"f/a{i % 2}", 3) for i in range(12)})
    v = evaluate(parent, cand, Promotion(), parent_major=1, candidate_major=1, contract_major=1)
    gates = {g.name: g for g in v.gates}
    assert (v.unit, v.n_units, v.n_tasks) == ("template", 2, 12)
    assert v.task_p_value is not None and v.task_p_value < 0.01
    assert v.p_value == pytest.approx(0.25) and not gates["significance"].passed
    assert not gates["holdout_units"].passed and "2 holdout templates" in gates["holdout_units"].detail
    assert "rsi discover --holdout-only --n 3" in gates["holdout_units"].detail
    assert "per task" in gates["significance"].detail and "clustered" in gates["significance"].detail

    # 6 templates, unequal sizes: the gated delta is the mean of per-template means, the per-task one differs
    spec_p = {f"t{i}": (f"f/b{min(i, 5)}", 0) for i in range(11)}  # b5 holds 6 tasks
    spec_c = {t: (u, 4 if u != "f/b5" else 0) for t, (u, _) in spec_p.items()}
    v = evaluate(_arm(spec_p), _arm(spec_c), Promotion(), parent_major=1, candidate_major=1, contract_major=1)
    assert v.n_units == 6 and v.delta == pytest.approx(5 / 6) and v.task_delta == pytest.approx(5 / 11)
    assert v.p_value == pytest.approx(1 / 32)  # 5 of 6 templates improved, one unchanged
    assert [(u.unit, u.tasks, u.parent, u.candidate) for u in v.units][-1] == ("f/b5", 6, 0.0, 0.0)
    assert v.passed, v.failing

    # outcomes without units are tasks, as before the template unit existed
    plain = {t: TaskOutcome(t, "f", 0, 4) for t in ("x", "y", "z", "u", "v")}
    better = {t: TaskOutcome(t, "f", 4, 4) for t in plain}
    v = evaluate(plain, better, Promotion(), parent_major=1, candidate_major=1, contract_major=1)
    assert (v.unit, v.n_units) == ("task", 5) and v.p_value == v.task_p_value == pytest.approx(1 / 32)


def test_promote_counts_templates_not_tasks(workspace: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """Six holdout tasks of three templates: a clear win on every task is not enough units to promote."""
    AGENTS.add("better", BetterAgent)
    for i in range(6):
        holdout_task(workspace.ws.tasks_dir, f"h{i}", family="test")
        toml = workspace.ws.tasks_dir / f"h{i}" / "task.toml"
        toml.write_text(toml.read_text().replace('family = "test"\n', f'family = "test"\ntemplate = "test/u{i % 3}"\n'))
    g0 = workspace.generation("gen-0000")
    cand = g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE})
    write_yaml_model(workspace.ws.generations_dir / "gen-0001.yaml", cand)
    workspace.store.put_generation(cand)
    assert sorted(holdout_units(workspace)) == ["test/u0", "test/u1", "test/u2"]
    out = promote(workspace, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert out.skipped and "3 holdout templates (6 tasks)" in out.skipped and out.trials["planned"] == 0
    gate = {g.name: g for g in out.verdict.gates}["holdout_units"]
    assert not gate.passed and "--holdout-only --n 2" in gate.detail


def _templated_holdout(ws: WorkspaceContext, n_templates: int, per: int) -> None:
    """Holdout tasks h0.. of templates test/u0.. (`per` tasks each) and a candidate gen-0001."""
    for i in range(n_templates * per):
        holdout_task(ws.ws.tasks_dir, f"h{i}", family="test")
        toml = ws.ws.tasks_dir / f"h{i}" / "task.toml"
        toml.write_text(toml.read_text().replace('family = "test"\n',
                                                 f'family = "test"\ntemplate = "test/u{i % n_templates}"\n'))
    g0 = ws.generation("gen-0000")
    cand = g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE})
    write_yaml_model(ws.ws.generations_dir / "gen-0001.yaml", cand)
    ws.store.put_generation(cand)


def test_promote_and_diff_report_the_per_template_and_the_per_task_figure(
    workspace: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    from rsi.core.promotion import figures
    from rsi.report.diff import build_diff
    from rsi.report.diff_render import headline, markdown

    AGENTS.add("better", BetterAgent)
    _templated_holdout(workspace, 5, 2)
    out = promote(workspace, PromoteRequest("gen-0001", agent="better"), provider=provider)
    v = out.verdict
    assert v.passed, v.failing
    assert (v.unit, v.n_units, v.n_tasks) == ("template", 5, 10)
    assert v.p_value == pytest.approx(1 / 32) and v.task_p_value is not None and v.task_p_value < 1 / 32
    lines = figures(v)
    assert lines[0].startswith("per template (gated): 5 templates, delta +0.500, p = 0.03125")
    assert lines[1].startswith("per task: 10 tasks, delta +0.500") and "not gated" in lines[1]
    m = workspace.store.get_generation("gen-0001").metrics
    assert m["holdout_units"] == 5 and m["holdout_tasks"] == 10 and m["holdout_p"] == pytest.approx(1 / 32, abs=1e-6)

    r = build_diff(workspace, "gen-0000", "gen-0001", agent="better")
    o = r.overall
    assert (o["unit"], o["units"], o["tasks"]) == ("template", 5, 10)
    assert o["unit_delta"] == pytest.approx(0.5) and o["unit_p_value"] == pytest.approx(v.p_value)  # the gate's test
    assert [(u["unit"], u["tasks"], u["a_rate"], u["b_rate"]) for u in r.templates] == [
        (f"test/u{k}", 2, 0.25, 0.75) for k in range(5)]
    assert any(x.startswith("per template (5 templates, the unit promotion gates on)") for x in headline(r))
    assert "## Pass rate per template" in markdown(r) and "| test/u3 | 2 | 25.0% | 75.0% | +50.0 |" in markdown(r)


def test_tasks_list_shows_the_template_and_cycle_refuses_a_bad_level(workspace: WorkspaceContext) -> None:
    import json

    from typer.testing import CliRunner

    from rsi.cli.app import app
    from rsi.core.discover import render_task

    d = GENERATORS.create("text").generate(GenRequest(seed=4, difficulty=1, template="text/head"))
    for rel, text in render_task(d, name="head-task", split="train", discovered_by=None).items():
        p = workspace.ws.tasks_dir / "head-task" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    runner = CliRunner()
    root = str(workspace.ws.root)
    r = runner.invoke(app, ["-w", root, "tasks", "list", "--json"])
    assert r.exit_code == 0, r.output
    assert {x["name"]: x["template"] for x in json.loads(r.output)} == {"head-task": "text/head"}
    r = runner.invoke(app, ["-w", root, "tasks", "list"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "template" in r.output and "text/head" in r.output
    r = runner.invoke(app, ["-w", root, "cycle", "--budget", "200", "--level", "11"])
    assert r.exit_code == 2 and "--level: 11 does not lie in 1..10" in r.output, r.output
    assert workspace.store.jobs_of(kind="cycle") == []


def test_holdout_requests_aim_at_holdout_units_families_in_turn() -> None:
    from rsi.loop.discover.requests import holdout_requests

    req = DiscoverRequest(n=6, generators=FAMILIES, levels=[1, 2], seed=2, holdout_only=True)
    covered = {"files/create", "text/count-words"}
    got = holdout_requests(req, FAMILIES, {}, 10, "template", 0.2, covered)
    assert got is not None and len(got) == 6 * 25
    first = [q.template for _, q in got[:8]]
    assert all(unit_split("template", t or "", 0.2) == "holdout" for t in first)
    assert not covered & set(first)  # templates the holdout lacks come first ...
    assert len({(t or "").split("/")[0] for t in first[:5]}) == 5  # ... families taking turns
    fams = holdout_requests(req, FAMILIES, {}, 10, "family", 0.2, set())
    assert fams and {q.family for _, q in fams} == {f for f in FAMILIES if unit_split("family", f, 0.2) == "holdout"}
    assert holdout_requests(req, FAMILIES, {}, 10, "task", 0.2, set()) is None  # by task: filter drafts instead
