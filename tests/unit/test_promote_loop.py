"""`rsi promote` / `rsi rollback` end to end on FakeSandboxProvider with scripted agents.

The candidate gen-0001 is gen-0000's manifest under a new id; who passes is decided by the
scripted agent from the trial's generation and attempt, so each test constructs the holdout
outcome it needs and checks states, events, manifests, reuse and the seal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rsi.core.errors import ConfigError
from rsi.core.generation import GenerationState
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome
from rsi.harness.builtin import NopAgent, OracleAgent
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.phase import PromoteRequest, holdout_tasks, promote, rollback
from rsi.sandbox.base import Sandbox
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import load_manifest, write_yaml_model
from rsi.store.tables import TrialRow
from tests.taskgen import R, make_task


def as_harness(out: AgentOutcome, ctx: AgentContext) -> AgentOutcome:
    """Report the generation's config digest, as the harness agent does (so the trial counts for it)."""
    if ctx.generation is not None:
        out.harness_config_digest = ctx.generation.harness_config.digest
    return out


class BetterAgent:
    """gen-0001 solves attempts 1-3 of 4, gen-0000 only attempt 1: a clear holdout win."""

    name = "better"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        best = 3 if ctx.generation is not None and ctx.generation.id == "gen-0001" else 1
        attempt = int(ctx.trial_id.rsplit(".", 1)[-1])
        return as_harness((OracleAgent() if attempt <= best else NopAgent()).run(sandbox, ctx), ctx)


class SameAgent:
    """Both generations solve attempt 1 only: no difference."""

    name = "same"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        agent = OracleAgent() if ctx.trial_id.endswith(".1") else NopAgent()
        return as_harness(agent.run(sandbox, ctx), ctx)


class ForgetsAgent:
    """gen-0001 wins the holdout as `better` does, but fails every suite task gen-0000 solves."""

    name = "forgets"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        if ctx.task.name.startswith("s") and ctx.generation is not None:
            agent = NopAgent() if ctx.generation.id == "gen-0001" else OracleAgent()
            return as_harness(agent.run(sandbox, ctx), ctx)
        return BetterAgent().run(sandbox, ctx)


def holdout_task(root: Path, name: str, family: str = "fam") -> None:
    # a reference of its own words: a train task's sample repeating a holdout reference is a leak (rsi.core.leakage)
    d = make_task(root, name, family=family, solve=f'printf ok > "{R}/app/out.txt"\n')
    toml = (d / "task.toml").read_text().replace("difficulty = 1\n", 'difficulty = 1\nsplit = "holdout"\n')
    (d / "task.toml").write_text(toml)


def set_suites(ctx: WorkspaceContext, suites: list[str]) -> None:
    contract = ctx.contract_path
    text = contract.read_text()
    assert "suites: []" in text  # the workspace fixture's contract names no suite
    contract.write_text(text.replace("suites: []", f"suites: {suites}"))


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    """Six holdout tasks, no regression suite (tests of the suite gate add their own)."""
    AGENTS.add("better", BetterAgent)
    AGENTS.add("same", SameAgent)
    AGENTS.add("forgets", ForgetsAgent)
    set_suites(workspace, [])
    # one look: the tests below count the trials of the fixed test (test_rounds_* measures in rounds)
    assert "looks: 1\n" in workspace.contract_path.read_text()
    for i in range(6):
        holdout_task(workspace.ws.tasks_dir, f"h{i}", family="a" if i % 2 else "b")
    make_task(workspace.ws.tasks_dir, "train0")
    g0 = workspace.generation("gen-0000")
    cand = g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE})
    write_yaml_model(workspace.ws.generations_dir / "gen-0001.yaml", cand)
    workspace.store.put_generation(cand)
    yield workspace


def _state(ws: WorkspaceContext, gen: str) -> str:
    file_state = load_manifest(ws.ws.generations_dir / f"{gen}.yaml").state.value
    assert file_state == ws.store.get_generation(gen).state.value  # manifest file and row agree
    return file_state


def test_clear_win_is_promoted_and_rollback_undoes_it(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    dry = promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert dry.verdict.passed and not dry.applied and dry.trials["planned"] == 2 * 6 * 4
    assert _state(ws, "gen-0001") == "candidate" and _state(ws, "gen-0000") == "promoted"
    # only holdout tasks ran, all recorded as holdout rows
    rows = [t for j in ws.store.child_jobs(dry.job_id) for t in ws.store.trials(j.id)]
    assert {t.task_name for t in rows} == {f"h{i}" for i in range(6)} and {t.split for t in rows} == {"holdout"}
    assert ws.store.outcomes("expand", task_digests=[t.task_digest for t in rows]) == []

    out = promote(ws, PromoteRequest("gen-0001", agent="better"), provider=provider)
    assert out.trials["planned"] == 0 and out.trials["reused"] == 2 * 6 * 4  # the dry run's trials reused
    v = out.verdict
    assert v.passed and v.parent_rate == 0.25 and v.candidate_rate == 0.75 and v.p_value == pytest.approx(1 / 64)
    assert out.changes == ["gen-0001: candidate -> promoted", "gen-0000: promoted -> superseded"]
    assert _state(ws, "gen-0001") == "promoted" and _state(ws, "gen-0000") == "superseded"
    assert ws.generation(None).id == "gen-0001"
    m = yaml.safe_load((ws.ws.generations_dir / "gen-0001.yaml").read_text())
    assert m["metrics"]["holdout_pass_rate"] == 0.75 and m["metrics"]["holdout_units"] == 6
    events = [(e.from_state, e.to_state) for e in ws.store.generation_events("gen-0001")]
    assert events[-1] == ("candidate", "promoted")
    assert ws.store.get_job(out.job_id).params["verdict"]["passed"] is True

    back = rollback(ws)
    assert (back.rolled_back, back.restored) == ("gen-0001", "gen-0000")
    assert "gen-0000: superseded -> promoted" in back.changes
    assert _state(ws, "gen-0000") == "promoted" and _state(ws, "gen-0001") == "rejected"
    assert ws.generation(None).id == "gen-0000"
    with pytest.raises(ConfigError, match="no parent"):
        rollback(ws)


def test_no_difference_is_rejected_with_the_failing_gates(ws: WorkspaceContext,
                                                          provider: FakeSandboxProvider) -> None:
    out = promote(ws, PromoteRequest("gen-0001", agent="same"), provider=provider)
    assert not out.verdict.passed
    assert {g.name for g in out.verdict.failing} == {"min_delta", "significance"}
    assert _state(ws, "gen-0001") == "rejected" and _state(ws, "gen-0000") == "promoted"
    reason = ws.store.generation_events("gen-0001")[-1].reason
    assert "min_delta" in reason and "significance" in reason
    with pytest.raises(ConfigError, match="not a candidate"):
        promote(ws, PromoteRequest("gen-0001", agent="same"), provider=provider)


def test_too_few_holdout_tasks_runs_nothing_and_gives_the_advice(ws: WorkspaceContext,
                                                                 provider: FakeSandboxProvider) -> None:
    import shutil

    for i in range(3):
        shutil.rmtree(ws.ws.tasks_dir / f"h{i}")
    out = promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert out.skipped and out.trials["planned"] == 0 and ws.store.child_jobs(out.job_id) == []
    gate = {g.name: g for g in out.verdict.gates}["holdout_units"]
    assert not gate.passed and "rsi discover --holdout-only --n 2" in gate.detail
    assert _state(ws, "gen-0001") == "candidate"


def test_discovery_probe_trials_are_never_reused(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """Holdout trials of gen-0001 recorded by a discover job's probe child do not count as evidence."""
    store = ws.store
    tasks = {t.name: t for t in holdout_tasks(ws)}
    store.create_job("disc-1", agent="harness", generation="gen-0001", harness_config_digest=None, attempts=4,
                     concurrency=1, task_paths=[], tasks_fingerprint="", trials=[], kind="discover", phase="discover")
    probe = [TrialRow(id=f"p-{n}-{a}", job_id="probe-1", task_name=n, task_digest=t.digest, generation="gen-0001",
                      agent="better", attempt=a, status="done", passed=True, reward=1.0, trial_dir="/x",
                      split="holdout") for n, t in tasks.items() for a in range(1, 5)]
    store.create_job("probe-1", agent="better", generation="gen-0001", harness_config_digest=None, attempts=4,
                     concurrency=1, task_paths=[], tasks_fingerprint="", trials=probe, kind="run",
                     phase="discover", parent_job="disc-1")
    out = promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert out.trials == {"reused": 0, "planned": 48, "infra": 0}
    assert out.verdict.candidate_rate == 0.75  # the probe's all-pass rows did not leak in


def test_cli_lineage_tree_and_rollback(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    from typer.testing import CliRunner

    from rsi.cli.app import app

    promote(ws, PromoteRequest("gen-0001", agent="better"), provider=provider)
    ws.store.close()
    runner, root = CliRunner(), str(ws.ws.root)
    r = runner.invoke(app, ["-w", root, "generations", "list"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    g0 = next(i for i, x in enumerate(lines) if "gen-0000" in x)
    g1 = next(i for i, x in enumerate(lines) if "gen-0001" in x)
    assert g1 > g0 and "superseded" in lines[g0] and "promoted" in lines[g1]
    assert "holdout 0.750 on 6 tasks" in lines[g1] and "holdout 0.250" in lines[g0]
    r = runner.invoke(app, ["-w", root, "rollback"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "current generation: gen-0000" in r.output and "gen-0001: promoted -> rejected" in r.output
    r = runner.invoke(app, ["-w", root, "promote", "gen-0001"])
    assert r.exit_code == 2 and "not a candidate" in r.output


def _suite(ws: WorkspaceContext, n: int = 6) -> None:
    for i in range(n):
        make_task(ws.ws.root / "suites" / "mini", f"s{i}", family="suite")
    ws.contract_path.write_text(ws.contract_path.read_text().replace("suites: []", "suites: [suites/mini]"))


def test_a_candidate_that_forgets_the_suite_is_rejected_on_it(ws: WorkspaceContext,
                                                              provider: FakeSandboxProvider) -> None:
    _suite(ws)
    out = promote(ws, PromoteRequest("gen-0001", agent="forgets"), provider=provider)
    gates = {g.name: g for g in out.verdict.gates}
    assert gates["significance"].passed and gates["min_delta"].passed  # the holdout alone would promote it
    assert not gates["suite_noninferiority"].passed, gates["suite_noninferiority"]
    assert out.verdict.suite is not None and out.verdict.suite.parent == 1.0 and out.verdict.suite.candidate == 0.0
    assert _state(ws, "gen-0001") == "rejected"
    assert out.trials["planned"] == 2 * 6 * 4 + 2 * 6 * 2  # suite_trials_per_task = 2


def test_a_candidate_that_keeps_the_suite_passes_its_gate_and_suite_trials_are_reused(
        ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    _suite(ws)
    out = promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    gates = {g.name: g for g in out.verdict.gates}
    assert gates["suite_noninferiority"].passed, gates["suite_noninferiority"]
    assert out.verdict.passed
    again = promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert again.trials["planned"] == 0 and again.trials["reused"] == 2 * 6 * 4 + 2 * 6 * 2


def test_in_template_rate_is_measured_on_train_tasks_reported_and_never_gated(
        ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """With `in_template_trials_per_task`, promote also runs both generations on the train tasks: the
    figures are in the verdict and its printed lines, and they never decide (a loss there gates nothing)."""
    text = ws.contract_path.read_text()
    assert "in_template_trials_per_task: 0" in text
    ws.contract_path.write_text(text.replace("in_template_trials_per_task: 0", "in_template_trials_per_task: 2"))
    ctx = WorkspaceContext.open(ws.ws.root)
    try:
        out = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="forgets"), provider=provider)
    finally:
        ctx.store.close()
    it = out.verdict.in_template
    assert it is not None and it.tasks == 1 and it.units == 1  # train0, its own unit (no template)
    assert out.trials["planned"] == 2 * 6 * 4 + 2 * 1 * 2
    # `forgets` plays `better` on train0: attempt 1 of 2 for the parent, both for the candidate
    assert (it.parent, it.candidate) == (0.5, 1.0)
    assert out.verdict.passed and "in_template" not in {g.name for g in out.verdict.gates}
    from rsi.core.promotion import figures
    assert any(line.startswith("in-template (train tasks") and "50.0% -> 100.0%" in line
               for line in figures(out.verdict))


def test_a_missing_suite_is_an_error_naming_the_contract_field(ws: WorkspaceContext,
                                                               provider: FakeSandboxProvider) -> None:
    from rsi.core.errors import InputError

    ws.contract_path.write_text(ws.contract_path.read_text().replace("suites: []", "suites: [suites/nope]"))
    with pytest.raises(InputError) as e:
        promote(ws, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
    assert e.value.field == "promotion.suites[0]" and "hcp-1.0.yaml" in str(e.value.file)


def test_the_diff_keeps_suite_tasks_out_of_its_holdout_figures(ws: WorkspaceContext,
                                                               provider: FakeSandboxProvider) -> None:
    """A suite task may say `split = "holdout"` (four starter tasks do): promote measures it for the suite gate,
    and the diff's holdout figures must still cover the holdout the gate measured, not the suite too."""
    for i in range(3):
        holdout_task(ws.ws.root / "suites" / "mini", f"s{i}", family="suite")
    ws.contract_path.write_text(ws.contract_path.read_text().replace("suites: []", "suites: [suites/mini]"))
    ctx = WorkspaceContext.open(ws.ws.root)
    try:
        out = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
        from rsi.report.diff import build_diff

        r = build_diff(ctx, "gen-0000", "gen-0001", agent="better")
    finally:
        ctx.store.close()
    assert out.verdict.n_tasks == 6
    assert r.overall["scope"] == "holdout" and r.overall["tasks"] == 6, r.tasks
    assert {t["task"] for t in r.tasks if t["split"] == "suite"} == {"s0", "s1", "s2"}


def part_task(root: Path, name: str, template: str, part: str) -> None:
    """A holdout task of `template` in the holdout part `part` (in_skill | unseen)."""
    d = make_task(root, name, family=template.split("/")[0])
    toml = (d / "task.toml").read_text().replace(
        "difficulty = 1\n", f'difficulty = 1\nsplit = "holdout"\ntemplate = "{template}"\nholdout_part = "{part}"\n')
    (d / "task.toml").write_text(toml)


class SkillAgent:
    """gen-0001 plays `better` on in-skill tasks (names `i*`) and `same` on unseen ones (names `u*`), or, as
    `skill-forgets`, fails every unseen task the parent passes every attempt of."""

    name = "skill"
    forgets = False

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        if ctx.task.name.startswith("u"):
            if self.forgets and ctx.generation is not None:
                agent = NopAgent() if ctx.generation.id == "gen-0001" else OracleAgent()
                return as_harness(agent.run(sandbox, ctx), ctx)
            return SameAgent().run(sandbox, ctx)
        return BetterAgent().run(sandbox, ctx)


class SkillForgetsAgent(SkillAgent):
    name = "skill-forgets"
    forgets = True


@pytest.fixture
def parts(ws: WorkspaceContext) -> WorkspaceContext:
    """The ws fixture's six holdout tasks replaced by a two-part holdout: 6 in-skill templates, 5 unseen."""
    import shutil

    AGENTS.add("skill", SkillAgent)
    AGENTS.add("skill-forgets", SkillForgetsAgent)
    for i in range(6):
        shutil.rmtree(ws.ws.tasks_dir / f"h{i}")
        part_task(ws.ws.tasks_dir, f"i{i}", f"fam{i % 2}/train{i}", "in_skill")
    for i in range(5):
        part_task(ws.ws.tasks_dir, f"u{i}", f"fam{i % 2}/new{i}", "unseen")
    # 5 unseen templates x 4 trials cannot show a tie non-inferior within the default 0.1 (the gate must be
    # passed, not merely not failed); within 0.3 they can
    text = ws.contract_path.read_text()
    ws.contract_path.write_text(text.replace("unseen_margin: 0.1\n", "unseen_margin: 0.3\n"))
    return ws


def test_the_in_skill_part_gates_superiority_and_the_unseen_part_non_inferiority(
        parts: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = promote(parts, PromoteRequest("gen-0001", dry_run=True, agent="skill"), provider=provider)
    v = out.verdict
    assert v.superiority_part == "in_skill" and v.passed, v.failing
    # the headline (gated) figures are the in-skill part's: the unseen tasks did not move and are not in them
    assert (v.n_tasks, v.n_units, v.parent_rate, v.candidate_rate) == (6, 6, 0.25, 0.75)
    ins, uns = v.part("in_skill"), v.part("unseen")
    assert ins is not None and uns is not None
    assert (ins.role, ins.units, ins.p_value) == ("superiority", 6, pytest.approx(1 / 64))
    assert (uns.role, uns.units, uns.tasks, uns.parent, uns.candidate) == ("non_inferiority", 5, 5, 0.25, 0.25)
    assert uns.p_value == 1.0 and uns.ni_p_value is not None and uns.ni_p_value < 0.05  # a tie, shown within 0.3
    assert uns.ni_lower is not None and -0.3 < uns.ni_lower < 0
    gates = {g.name: g for g in v.gates}
    assert gates["unseen_noninferiority"].passed and "in-skill" in gates["significance"].detail
    from rsi.core.promotion import figures

    lines = figures(v)
    assert any(x.startswith("in-skill holdout (the superiority gate): 6 tasks on 6 templates, 25.0% -> 75.0%")
               for x in lines), lines
    assert any(x.startswith("unseen-template holdout (non-inferiority within 0.300): 5 tasks on 5 templates")
               for x in lines), lines
    j = out.as_json()["verdict"]
    assert [p["part"] for p in j["parts"]] == ["in_skill", "unseen"] and j["superiority_part"] == "in_skill"


def test_a_candidate_that_loses_the_unseen_templates_is_rejected_on_them(
        parts: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = promote(parts, PromoteRequest("gen-0001", agent="skill-forgets"), provider=provider)
    failing = {g.name for g in out.verdict.failing}
    assert "unseen_noninferiority" in failing and not failing & {"significance", "min_delta", "holdout_units"}
    uns = out.verdict.part("unseen")
    assert uns is not None and (uns.parent, uns.candidate) == (1.0, 0.0) and uns.ni_p_value is not None
    assert uns.ni_p_value > 0.99 and uns.ni_lower is not None and uns.ni_lower < -0.9
    assert _state(parts, "gen-0001") == "rejected"
    assert "unseen_noninferiority" in parts.store.generation_events("gen-0001")[-1].reason


def test_a_small_unseen_part_is_measured_and_says_it_is_too_small(parts: WorkspaceContext,
                                                                   provider: FakeSandboxProvider) -> None:
    """Non-inferiority is a test the candidate must pass: a part too small for a candidate equal to its parent
    to pass is still measured (its test decides), and the gate says plainly that it is too small."""
    import shutil

    for i in range(2):
        shutil.rmtree(parts.ws.tasks_dir / f"u{i}")
    text = parts.contract_path.read_text()
    parts.contract_path.write_text(text.replace("unseen_margin: 0.3\n", "unseen_margin: 0.1\n"))
    out = promote(parts, PromoteRequest("gen-0001", dry_run=True, agent="skill"), provider=provider)
    assert out.skipped is None and out.trials["planned"] > 0
    gate = {g.name: g for g in out.verdict.gates}["unseen_noninferiority"]
    assert not gate.passed and "too small to pass a candidate equal to its parent" in gate.detail
    assert "3 unseen-template templates" in gate.detail and "H0 worse by >= 0.100" in gate.threshold


def _looks(ctx: WorkspaceContext, n: int) -> WorkspaceContext:
    text = ctx.contract_path.read_text()
    assert "looks: 1\n" in text
    ctx.contract_path.write_text(text.replace("looks: 1\n", f"looks: {n}\n"))
    return WorkspaceContext.open(ctx.ws.root)


class AllOrNothingAgent:
    """gen-0001 solves every attempt, gen-0000 none: a gain clear after the first round."""

    name = "all-or-nothing"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        win = ctx.generation is not None and ctx.generation.id == "gen-0001"
        return as_harness((OracleAgent() if win else NopAgent()).run(sandbox, ctx), ctx)


def test_rounds_stop_early_for_futility_and_for_a_clear_gain(ws: WorkspaceContext,
                                                             provider: FakeSandboxProvider) -> None:
    ctx = _looks(ws, 2)
    try:
        same = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="same"), provider=provider)
        seq = same.verdict.sequential
        assert seq is not None and (seq.looks, seq.rounds_run, seq.stopped) == (2, 1, "futility")
        assert same.trials["planned"] == 2 * 6 * 2 and not same.verdict.passed  # half the trials of one look
        assert [c.params["stage"] for c in ctx.store.child_jobs(same.job_id)] == ["holdout"]
        # `better` over 6 units cannot reach the first look's bound (1/64): both rounds run, the last look decides
        full = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
        seq = full.verdict.sequential
        assert seq is not None and (seq.rounds_run, seq.stopped) == (2, "final")
        assert [x.decision for x in seq.history] == ["continue", "final"]
        from rsi.core.promotion import figures

        line = figures(full.verdict)[-1]
        assert line.startswith("sequential: 2 of 2 rounds (final); look 1 (2/task): p = 0.01562 vs 0.005575") \
            and "o-brien-fleming" not in line and "obrien-fleming alpha spending" in line, line
        assert sorted(c.params["stage"] for c in ctx.store.child_jobs(full.job_id)) == ["holdout", "holdout-2"]
        again = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="better"), provider=provider)
        assert again.trials["planned"] == 0 and again.trials["reused"] == 2 * 6 * 4  # every round's trials reused
        assert again.verdict.sequential is not None and again.verdict.sequential.rounds_run == 2
        for i in range(6, 8):  # 8 units: every one improved reaches p = 1/256 < the first look's bound 0.0056
            holdout_task(ctx.ws.tasks_dir, f"h{i}")
        AGENTS.add("all-or-nothing", AllOrNothingAgent)
        win = promote(ctx, PromoteRequest("gen-0001", dry_run=True, agent="all-or-nothing"), provider=provider)
        seq = win.verdict.sequential
        assert seq is not None and (seq.rounds_run, seq.stopped) == (1, "efficacy") and win.verdict.passed
        assert win.verdict.p_value == pytest.approx(1 / 256) and win.verdict.bound == pytest.approx(0.00557, abs=1e-4)
        assert win.trials["planned"] == 2 * 8 * 2
        j = win.as_json()["verdict"]["sequential"]
        assert j["rounds"] == 1 and j["bound"] == pytest.approx(0.00557, abs=1e-4) and j["looks"] == 2
    finally:
        ctx.store.close()


class SecondGenAgent:
    """gen-0001 and gen-0002 solve attempts 1-3 of 4, gen-0000 attempt 1: gen-0002 adds nothing to its parent."""

    name = "second-gen"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        best = 1 if ctx.generation is None or ctx.generation.id == "gen-0000" else 3
        attempt = int(ctx.trial_id.rsplit(".", 1)[-1])
        return as_harness((OracleAgent() if attempt <= best else NopAgent()).run(sandbox, ctx), ctx)


def test_after_an_early_stop_the_diff_and_the_view_count_the_trials_the_gate_counted(
        ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """Three generations: gen-0001's own promotion ran both rounds (4 trials a task), gen-0002's stopped for
    futility after one (2 a task, gen-0001's first two reused). `rsi diff gen-0001 gen-0002` and `rsi view`'s rates
    must show the 2 a task the gate counted (12/12 against 12/12), not gen-0001's 4 (18/24 against 12/12, a loss
    the gate never saw)."""
    AGENTS.add("second-gen", SecondGenAgent)
    ctx = _looks(ws, 2)
    try:
        first = promote(ctx, PromoteRequest("gen-0001", agent="second-gen"), provider=provider)
        seq = first.verdict.sequential
        assert seq is not None and seq.rounds_run == 2, "gen-0001's own promotion measured 4 trials a task"
        g1 = ctx.generation("gen-0001")
        cand = g1.model_copy(update={"id": "gen-0002", "parent": "gen-0001", "state": GenerationState.CANDIDATE})
        write_yaml_model(ctx.ws.generations_dir / "gen-0002.yaml", cand)
        ctx.store.put_generation(cand)
        second = promote(ctx, PromoteRequest("gen-0002", agent="second-gen"), provider=provider)
        seq = second.verdict.sequential
        assert seq is not None and (seq.rounds_run, seq.stopped) == (1, "futility") and not second.verdict.passed
        from rsi.report.diff import build_diff

        r = build_diff(ctx, "gen-0001", "gen-0002", agent="second-gen")
        holdout = [t for t in r.tasks if t["split"] == "holdout"]
        assert len(holdout) == 6 and all(t["a_trials"] == t["b_trials"] == 2 for t in holdout), holdout
        assert sum(t["a_passes"] for t in holdout) == 12 and sum(t["b_passes"] for t in holdout) == 12
        assert r.flips["still_passing"] == 6 and r.flips["regressed"] == 0, r.flips
        assert r.gate is not None and r.gate["verdict"]["sequential"]["rounds_run"] == 1
    finally:
        ctx.store.close()
    from rsi.view.context import ViewContext
    from rsi.view.pages import generations

    view = ViewContext.open(ws.ws.root)
    try:
        rates = generations(view)["rates"]
    finally:
        view.store.close()
    # gen-0001 shown at its latest promotion (as gen-0002's parent): the gate's 12/12, not 18/24
    assert rates["gen-0001"]["holdout_counted"] == "12/12" and rates["gen-0001"]["holdout"] == 1.0, rates["gen-0001"]
    assert rates["gen-0002"]["holdout_counted"] == "12/12"


def test_in_template_tasks_spread_over_families_before_templates(tmp_path: Path) -> None:
    """A family with a template per combination (`compose`, 48 of them in the demo) sorts first by name: the
    in-template cap must still measure every family before any gives a second task (it once measured 16
    compositions and no single operation)."""
    from rsi.loop.promote.phase import spread
    from rsi.store.files import load_task

    tasks = []
    for fam, n in (("compose", 20), ("files", 3), ("text", 2)):
        for i in range(n):
            d = make_task(tmp_path, f"{fam}-{i:02d}", family=fam)
            toml = (d / "task.toml").read_text().replace(f'family = "{fam}"\n',
                                                          f'family = "{fam}"\ntemplate = "{fam}/t{i:02d}"\n')
            (d / "task.toml").write_text(toml)
            tasks.append(load_task(d))
    got = [t.name for t in spread(tasks, 6)]
    assert got == ["compose-00", "files-00", "text-00", "compose-01", "files-01", "text-01"]
    assert len(spread(tasks, 0)) == 25 and spread(tasks[:4], 6) == tasks[:4]  # no cap, or under it: all
    assert [t.name for t in spread(tasks, 25)] == [t.name for t in tasks]
