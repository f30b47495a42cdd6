"""A fresh in-skill question every cycle, and every earlier one kept as the frozen no-forgetting part.

- held-out compositions of trained operations are placed in the in-skill part (contract `promotion.in_skill`);
- a cycle's in-skill deficit counts only the tasks drawn for that cycle, its draw's seed is recorded in the cycle
  job's params and a second cycle draws with another seed; promote's budget counts the no-forgetting tasks;
- at promotion the earlier cycles' in-skill tasks are the `no_forgetting` part, measured for both generations and
  gated by non-inferiority: a candidate clearly worse there is rejected on it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.core.holdout_parts import measured_parts, newest_in_skill_cycle
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome
from rsi.harness.builtin import NopAgent, OracleAgent
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.phase import PromoteRequest, promote
from rsi.sandbox.base import Sandbox
from rsi.sandbox.fake import FakeSandboxProvider
from tests.taskgen import make_task
from tests.unit.test_promote_loop import BetterAgent, SameAgent, as_harness, ws  # noqa: F401 - ws: the fixture


def cycle_task(root: Path, name: str, template: str, part: str, cycle: int) -> None:
    """A holdout task of `template` in holdout part `part`, drawn for cycle `cycle`."""
    d = make_task(root, name, family=template.split("/")[0])
    toml = (d / "task.toml").read_text().replace(
        "difficulty = 1\n", f'difficulty = 1\nsplit = "holdout"\ntemplate = "{template}"\nholdout_part = "{part}"\n'
                            f"instance_cycle = {cycle}\n")
    (d / "task.toml").write_text(toml)


class CycleAgent:
    """gen-0001 is better on this cycle's in-skill tasks (`i*`), the same on unseen (`u*`) and on the earlier
    cycle's in-skill tasks (`f*`); as `cycle-forgets` it fails every `f*` attempt the parent passes every one of."""

    name = "cycle"
    forgets = False

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        if ctx.task.name.startswith("f") and self.forgets and ctx.generation is not None:
            agent = NopAgent() if ctx.generation.id == "gen-0001" else OracleAgent()
            return as_harness(agent.run(sandbox, ctx), ctx)
        if ctx.task.name.startswith(("u", "f")):
            return SameAgent().run(sandbox, ctx)
        return BetterAgent().run(sandbox, ctx)


class CycleForgetsAgent(CycleAgent):
    name = "cycle-forgets"
    forgets = True


@pytest.fixture
def two_cycles(ws: WorkspaceContext) -> Iterator[WorkspaceContext]:  # noqa: F811
    """The ws fixture's holdout replaced by cycle 1's in-skill part (6 templates, `f*`), cycle 2's (6, `i*`) and 5
    unseen templates; margins of 0.3 so that a tie can pass non-inferiority at this size."""
    AGENTS.add("cycle", CycleAgent)
    AGENTS.add("cycle-forgets", CycleForgetsAgent)
    tasks = ws.ws.tasks_dir
    for i in range(6):
        shutil.rmtree(tasks / f"h{i}")
        cycle_task(tasks, f"f{i}", f"compose/old{i}", "in_skill", 1)
        cycle_task(tasks, f"i{i}", f"compose/new{i}", "in_skill", 2)
    for i in range(5):
        cycle_task(tasks, f"u{i}", f"fam{i % 2}/new{i}", "unseen", 0)
    text = ws.contract_path.read_text()
    assert "no_forgetting_margin: 0.1\n" in text
    text = text.replace("unseen_margin: 0.1\n", "unseen_margin: 0.3\n")
    ws.contract_path.write_text(text.replace("no_forgetting_margin: 0.1\n", "no_forgetting_margin: 0.3\n"))
    ctx = WorkspaceContext.open(ws.ws.root)
    yield ctx
    ctx.store.close()


def test_the_rule_freezes_every_earlier_cycles_in_skill_tasks() -> None:
    tasks = {"a": ("in_skill", 1), "b": ("in_skill", 2), "c": ("unseen", 2), "d": (None, None), "e": ("in_skill", None)}
    assert newest_in_skill_cycle(tasks.values()) == 2
    assert measured_parts(tasks) == {"a": "no_forgetting", "b": "in_skill", "c": "unseen", "d": "",
                                     "e": "no_forgetting"}
    # one cycle's in-skill part only (or none numbered): no no-forgetting part
    assert set(measured_parts({"a": ("in_skill", None), "b": ("in_skill", 0)}).values()) == {"in_skill"}


def test_earlier_in_skill_tasks_are_the_no_forgetting_part_for_both_generations(
        two_cycles: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = promote(two_cycles, PromoteRequest("gen-0001", dry_run=True, agent="cycle"), provider=provider)
    v = out.verdict
    assert v.passed, v.failing
    assert [p.part for p in v.parts] == ["in_skill", "unseen", "no_forgetting"]
    ins, nf = v.part("in_skill"), v.part("no_forgetting")
    assert ins is not None and nf is not None
    assert (v.superiority_part, v.n_tasks, ins.units) == ("in_skill", 6, 6)  # this cycle's question alone
    assert (nf.role, nf.tasks, nf.units, nf.parent, nf.candidate) == ("non_inferiority", 6, 6, 0.25, 0.25)
    assert nf.margin == 0.3 and nf.ni_p_value is not None and nf.ni_p_value < 0.05
    gates = {g.name: g for g in v.gates}
    assert gates["no_forgetting_noninferiority"].passed and "no-forgetting" in gates[
        "no_forgetting_noninferiority"].detail
    from rsi.core.promotion import figures

    assert any(x.startswith("no-forgetting holdout (non-inferiority within 0.300): 6 tasks on 6 templates")
               for x in figures(v)), figures(v)
    # rsi diff shows every part, the frozen one among them, as the gate computed it
    from rsi.report.diff import build_diff

    report = build_diff(two_cycles, "gen-0000", "gen-0001", agent="cycle")
    rows = {r["part"]: r for r in report.parts}
    assert set(rows) >= {"in_skill", "unseen", "no_forgetting"}
    assert rows["no_forgetting"]["tasks"] == 6 and rows["no_forgetting"]["a_trials"] == 24 == \
        rows["no_forgetting"]["b_trials"]


def test_a_candidate_clearly_worse_on_an_earlier_question_is_rejected(
        two_cycles: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = promote(two_cycles, PromoteRequest("gen-0001", agent="cycle-forgets"), provider=provider)
    failing = {g.name for g in out.verdict.failing}
    assert "no_forgetting_noninferiority" in failing and not failing & {"significance", "min_delta"}
    nf = out.verdict.part("no_forgetting")
    assert nf is not None and (nf.parent, nf.candidate) == (1.0, 0.0)
    assert two_cycles.store.get_generation("gen-0001").state.value == "rejected"


def test_a_cycle_counts_its_own_in_skill_part_and_records_a_fresh_seed(two_cycles: WorkspaceContext) -> None:
    from rsi.loop.cycle.in_skill import IN_SKILL_SEED_OFFSET, in_skill_draw
    from rsi.loop.cycle.phase import CycleRequest, _open_job
    from rsi.loop.cycle.split import holdout_deficits, holdout_part_units, plan_split

    ctx = two_cycles
    # cycle 2 has its 6 templates; a third cycle has none of its own yet: it tops up to the goal (8)
    assert len(holdout_part_units(ctx, 2)["in_skill"]) == 6 and len(holdout_part_units(ctx)["in_skill"]) == 12
    assert holdout_deficits(ctx, None, 8, cycle=3)["in_skill"] == 8
    assert holdout_deficits(ctx, None, 8, cycle=2)["in_skill"] == 2
    # promote's share counts every holdout task (the frozen part too) and the in-skill tasks still to draw
    p = ctx.contract.promotion
    assert plan_split(ctx, 1000, in_skill_target=8, cycle=3)["promote"] == 2 * p.trials_per_task * (17 + 8)
    first, second = _open_job(ctx, CycleRequest(budget=1000))[0], _open_job(ctx, CycleRequest(budget=1000))[0]
    draws = []
    for job in (first, second):
        params = ctx.store.get_job(job).params
        draw = in_skill_draw(ctx, job, int(params["seed"]), int(params["cycle"]), [1, 2], 8)
        assert draw is not None and draw.source == "compositions" and draw.levels == [3] and draw.templates
        recorded = ctx.store.get_job(job).params["in_skill"]
        assert recorded["seed"] == int(params["seed"]) + IN_SKILL_SEED_OFFSET == draw.seed
        assert recorded["cycle"] == params["cycle"]
        draws.append(draw)
    assert draws[0].seed != draws[1].seed and draws[0].cycle != draws[1].cycle
    # `--seed` reproduces it
    pinned = _open_job(ctx, CycleRequest(budget=1000, seed=int(ctx.store.get_job(first).params["seed"])))[0]
    again = in_skill_draw(ctx, pinned, int(ctx.store.get_job(pinned).params["seed"]), 9, [1, 2], 8)
    assert again is not None and again.seed == draws[0].seed and again.templates == draws[0].templates


def test_held_out_compositions_of_trained_operations_are_placed_in_skill() -> None:
    from rsi.core.discover import draft_placement, trained_ops
    from rsi.loop.discover.generators.compose import draw_held_out, held_out_compositions

    held = 0
    for seed in range(4):
        d = draw_held_out(seed, 0.2, 3, side="in_skill", cycle=2)
        assert d.template in held_out_compositions(0.2, 3) and trained_ops(d, 0.2, "template")
        assert draft_placement(d, d.name(), 0.2, "template", 1, "compositions") == ("holdout", "in_skill")
        # the old behaviour, for a contract whose in-skill part is phrasings: a held-out template is unseen
        assert draft_placement(d, d.name(), 0.2, "template", 1, "phrasings") == ("holdout", "unseen")
        held += 1
    assert held == 4


def test_a_holdout_only_discover_aims_at_the_named_compositions() -> None:
    from dataclasses import dataclass, field

    from rsi.loop.discover.generators import load_generators
    from rsi.loop.discover.requests import holdout_requests

    @dataclass
    class Asked:
        n: int = 3
        families: list[str] = field(default_factory=list)
        holdout_only: bool = True
        part: str = "in_skill"
        difficulty: int | None = None
        levels: list[int] = field(default_factory=lambda: [3])
        seed: int | None = 15887
        cycle: int = 2
        templates: list[str] = field(default_factory=list)

    load_generators()
    from rsi.loop.discover.generators.compose import held_out_compositions

    names = held_out_compositions(0.2, 3)[:2]
    reqs = holdout_requests(Asked(templates=names), ["compose"], {}, 10, "template", 0.2, set(),  # type: ignore[arg-type]
                            holdout_phrasings=1)
    assert reqs and {r.template for _g, r in reqs} == set(names)
    assert {(r.side, r.cycle, r.phrasing_side) for _g, r in reqs} == {("in_skill", 2, "any")}


def test_removing_the_frozen_part_leaves_one_in_skill_part(two_cycles: WorkspaceContext) -> None:
    for i in range(6):
        shutil.rmtree(two_cycles.ws.tasks_dir / f"i{i}")
    from rsi.loop.promote.evidence import holdout_tasks, task_parts

    assert set(task_parts(holdout_tasks(two_cycles)).values()) == {"in_skill", "unseen"}


def test_a_non_inferiority_row_names_the_bound_promote_decided_at_in_text_and_html(
        two_cycles: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """When promote stopped at an earlier look, its non-inferiority gates used that look's bound, not the final
    one the diff re-tests at: both the text and the HTML diff say so (and say nothing when they agree)."""
    import dataclasses

    from rsi.report.diff import build_diff
    from rsi.report.diff_html import html
    from rsi.report.diff_render import part_lines

    promote(two_cycles, PromoteRequest("gen-0001", dry_run=True, agent="cycle"), provider=provider)
    report = build_diff(two_cycles, "gen-0000", "gen-0001", agent="cycle")
    rows = [x for x in report.parts if x["role"] == "non_inferiority"]
    assert rows
    for row in rows:
        row.update(ni_lower=-0.1, ni_level=0.048)
    verdict = dict((report.gate or {}).get("verdict") or {})
    early = dataclasses.replace(report, gate={"job": "prom-x", "verdict": {**verdict, "ni_bound": 0.005575}})
    said = "promote's gate decided at its look's bound, 0.005575"
    assert any(said in line for line in part_lines(early)) and said in html(early)
    final = dataclasses.replace(report, gate={"job": "prom-x", "verdict": {**verdict, "ni_bound": 0.048}})
    assert not any("decided at its look" in line for line in part_lines(final))
    assert "decided at its look" not in html(final)
