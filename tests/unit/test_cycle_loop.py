"""`rsi cycle` on FakeSandboxProvider: discover (a fake generator, a scripted probe agent), expand (the
harness on the deterministic policy server), update (the command backend writing a PEFT directory) and
promote (a scripted agent that is better for gen-0001) run as one parent job that records each phase; a
cycle stopped after a phase resumes without re-running the finished ones.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.policy_server import CONFIG, Policy, serve
from rsi.core.discover import TaskDraft
from rsi.harness.agent import AGENTS
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.phase import CycleHooks, CycleRequest, cycle, plan_split
from rsi.loop.discover.generators import GENERATORS, GenRequest
from rsi.loop.init import init_workspace
from rsi.sandbox.fake import FakeSandboxProvider
from tests.taskgen import make_task
from tests.unit.test_discover_loop import FakeGen
from tests.unit.test_promote_loop import BetterAgent, holdout_task
from tests.unit.test_update import ADAPTER_SCRIPT


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[WorkspaceContext]:
    FakeGen.flaky_dir = tmp_path
    GENERATORS.add("fakegen", FakeGen)
    AGENTS.add("better", BetterAgent)
    with serve(Policy(rules={"easy0": {}, "easy1": {}, "hard0": None})) as url:
        root = tmp_path / "ws"
        (root / "harness_configs").mkdir(parents=True)
        (root / "harness_configs" / "default.yaml").write_text(CONFIG.format(endpoint=url))
        init_workspace(root, starter_tasks=False)
        for name in ("easy0", "easy1", "hard0"):
            make_task(root / "tasks", name)
        for i in range(6):
            holdout_task(root / "tasks", f"h{i}", family="a" if i % 2 else "b")
        contract = root / "contracts" / "hcp-1.0.yaml"  # the fake sandbox cannot run the starter suite
        contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
        c = WorkspaceContext.open(root)
        yield c
        c.store.close()


def _req(provider: FakeSandboxProvider, tmp_path: Path, **kw: object) -> CycleRequest:
    script = tmp_path / "train.py"
    script.write_text(ADAPTER_SCRIPT)
    base: dict[str, object] = {
        "budget": 100, "n": 2, "generators": ["fakegen"], "attempts": 2, "probe_agent": "nop",
        "expand_attempts": 1, "proposals": 0, "round_size": 2, "backend": "command", "load": False,
        "command": f"{sys.executable} {script} {{output_dir}} {{base_model}} ok {{dataset}}",
        "promote_agent": "better", "provider": provider}
    return CycleRequest(**{**base, **kw})  # type: ignore[arg-type]


class Recorder(CycleHooks):
    def __init__(self, stop_at: str | None = None) -> None:
        self.phases: list[str] = []
        self.messages: list[str] = []
        self.stop_at = stop_at

    def message(self, text: str) -> None:
        self.messages.append(text)

    def phase(self, name: str) -> None:
        if name == self.stop_at:
            raise KeyboardInterrupt
        self.phases.append(name)


def test_split_sets_promote_aside_first(ctx: WorkspaceContext) -> None:
    split = plan_split(ctx, 100)
    assert split["promote"] == 2 * 4 * 6 and split["update"] == 0
    assert split["discover"] + split["expand"] == 100 - 48
    with pytest.raises(Exception, match="minimum that works is 50"):
        plan_split(ctx, 40)


def test_cycle_runs_every_phase_and_records_them(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                 tmp_path: Path) -> None:
    hooks = Recorder()
    out = cycle(ctx, _req(provider, tmp_path), hooks)
    assert out.stopped is None, out.stopped
    assert hooks.phases == ["discover", "expand", "update", "promote"]
    assert any("budget 100 trials = discover" in m for m in hooks.messages)  # the split, before anything runs
    job = ctx.store.get_job(out.job_id)
    assert (job.kind, job.phase, job.status) == ("cycle", "cycle", "done")
    ph = job.params["phases"]
    assert all(ph[p]["status"] == "done" for p in ("discover", "expand", "update", "promote")), ph
    assert ctx.store.get_job(ph["discover"]["job"]).kind == "discover"
    assert ctx.store.get_job(ph["expand"]["job"]).kind == "expand"
    assert ctx.store.get_job(ph["promote"]["job"]).kind == "promote"
    assert ph["discover"]["admitted"] == 2
    assert out.candidate == ph["update"]["candidate"] == "gen-0001"
    assert out.verdict == "promoted" and ctx.store.get_generation("gen-0001").state.value == "promoted"
    # the cycle replays every train task's reference (an `oracle` sample each) beside the model's own rollouts,
    # and the record keeps samples per source and both holdout parts (a holdout naming no part is `unseen`)
    assert ph["update"]["samples"].get("oracle", 0) >= 1 and "self" in ph["update"]["samples"], ph["update"]
    assert [x["part"] for x in ph["promote"]["parts"]] == ["unseen"] and ph["promote"]["rounds"] >= 1
    # `rsi jobs list` shows the jobs a user started, with the trials under each (children, and a cycle's phases)
    from typer.testing import CliRunner

    from rsi.cli.app import app

    listed = json.loads(CliRunner().invoke(app, ["-w", str(ctx.ws.root), "jobs", "list", "--json"]).output)
    assert all(x["parent"] is None for x in listed)
    by_id = {x["job"]: x for x in listed}
    phase_trials = sum(by_id[ph[k]["job"]]["trials"] for k in ("discover", "expand", "promote"))
    assert by_id[out.job_id]["kind"] == "cycle" and by_id[out.job_id]["trials"] == phase_trials > 0
    # the candidate's provenance names the jobs that made its tasks and trials
    prov = ctx.generation("gen-0001").provenance
    assert ph["discover"]["job"] in prov.discover_jobs and ph["expand"]["job"] in prov.expand_jobs
    assert job.params["verdict"] == "promoted"
    # the summary prints each phase's job id whole (what `rsi jobs show` takes), even at 80 columns
    from rich.console import Console

    from rsi.cli.cycle import summary

    con = Console(width=80, record=True)
    con.print(summary(out))
    text = con.export_text()
    assert all(ph[k]["job"] in text for k in ("discover", "expand", "promote")), text
    assert "oracle" in text and "unseen-template" in text, "samples by source and the holdout part are shown"
    # expand's trials per integrity level (the starter-like tasks declare their reads)
    levels = ph["expand"]["integrity"]
    assert sum(levels.values()) == ph["expand"]["trials"] > 0 and levels["shared"] == 0
    wide = Console(width=400, record=True)
    wide.print(summary(out))
    assert f"declared_outputs {levels['declared_outputs']}, snapshot {levels['snapshot']}, shared 0" in (
        wide.export_text())


def test_a_stopped_cycle_resumes_without_rerunning_finished_phases(ctx: WorkspaceContext,
                                                                   provider: FakeSandboxProvider,
                                                                   tmp_path: Path) -> None:
    stopped = cycle(ctx, _req(provider, tmp_path), Recorder(stop_at="update"))
    assert stopped.stopped == "interrupted (Ctrl-C)" and stopped.verdict is None
    (job,) = ctx.store.jobs_of(kind="cycle")
    assert job.status == "interrupted" and "rsi cycle --resume" in (job.interrupted_reason or "")
    ph = job.params["phases"]
    assert ph["discover"]["status"] == ph["expand"]["status"] == "done" and "update" not in ph
    before = {k: len(ctx.store.jobs_of(kind=k)) for k in ("discover", "expand", "run")}
    trials = sum(len(ctx.store.trials(j.id)) for j in ctx.store.jobs_of(kind="run"))

    hooks = Recorder()
    out = cycle(ctx, _req(provider, tmp_path, resume=job.id), hooks)
    assert out.stopped is None and out.job_id == job.id
    assert hooks.phases == ["update", "promote"]
    assert {k: len(ctx.store.jobs_of(kind=k)) for k in ("discover", "expand")} == \
        {k: before[k] for k in ("discover", "expand")}
    assert len(ctx.store.jobs_of(kind="run")) == before["run"] + 1  # promote's holdout child only
    promote_child = ctx.store.child_jobs(out.phases["promote"]["job"])
    assert sum(len(ctx.store.trials(j.id)) for j in ctx.store.jobs_of(kind="run")) == \
        trials + sum(len(ctx.store.trials(j.id)) for j in promote_child)
    assert ctx.store.get_job(job.id).status == "done"

    # resuming the finished cycle gives its outcome again (the summary and report a failed write lost), and
    # runs nothing
    jobs = len(ctx.store.list_jobs(limit=1000))
    again = cycle(ctx, _req(provider, tmp_path, resume=job.id), Recorder())
    assert (again.job_id, again.candidate, again.verdict) == (job.id, out.candidate, out.verdict)
    assert again.phases["promote"] == out.phases["promote"] and len(ctx.store.list_jobs(limit=1000)) == jobs


def test_no_candidate_stops_with_the_reason(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                            tmp_path: Path) -> None:
    out = cycle(ctx, _req(provider, tmp_path, backend="export"), Recorder())
    assert out.candidate is None and out.verdict is None
    assert out.stopped and "no candidate" in out.stopped and "export" in out.stopped
    job = ctx.store.get_job(out.job_id)
    assert job.status == "done" and job.params["phases"]["update"]["status"] == "no_candidate"
    assert "promote" not in job.params["phases"]


class ValidGen(FakeGen):
    """fakegen's valid kind only (seed % 10 == 0): every candidate passes the gate."""

    name = "validgen"

    def generate(self, req: GenRequest) -> TaskDraft:
        return super().generate(dataclasses.replace(req, seed=req.seed * 10))


def test_discover_tops_up_a_short_holdout_split(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                tmp_path: Path) -> None:
    """With fewer holdout tasks than the paired test needs, the cycle's discover adds holdout candidates
    (holdout-only, within the discover share) so that promote can pass at all."""
    tasks = ctx.ws.tasks_dir
    for i in range(3):  # 6 holdout tasks -> 3; the test needs 5 at alpha 0.05
        import shutil

        shutil.rmtree(tasks / f"h{i}")
    GENERATORS.add("validgen", ValidGen)
    hooks = Recorder()
    out = cycle(ctx, _req(provider, tmp_path, budget=160, generators=["validgen"]), hooks)
    ph = ctx.store.get_job(out.job_id).params["phases"]["discover"]
    assert ph["status"] == "done" and ph.get("holdout_job"), ph
    top = ctx.store.get_job(ph["holdout_job"])
    assert top.kind == "discover" and top.params["holdout_only"] is True
    assert any("this cycle tops it up to" in m for m in hooks.messages)
    from rsi.loop.promote.phase import holdout_tasks

    # asked for the shortfall to the minimum (5) plus a spare, and every one passed the gate
    main_holdout = sum(c.state == "admitted" and c.split == "holdout" for c in ctx.store.candidates(ph["job"]))
    assert top.params["n"] == 6 - 3 - main_holdout
    assert len(holdout_tasks(ctx)) >= 6
    spent = sum(len(ctx.store.trials(j.id)) for d in (ph["job"], ph["holdout_job"])
                for j in ctx.store.child_jobs(d))
    assert spent <= out.split["discover"]


def test_discover_adds_train_compositions_after_its_main_candidates(ctx: WorkspaceContext,
                                                                    provider: FakeSandboxProvider,
                                                                    tmp_path: Path) -> None:
    """`compositions=N`: after the main candidates a train discover aimed at the level-3 train compositions
    (generator `compose`) runs inside the discover share, recorded as the phase's compose job; a resume of a
    finished one does not run it again."""
    from rsi.loop.cycle.phase import COMPOSE_SEED, _Cycle

    class FakeCompose(ValidGen):
        name = "compose"

    GENERATORS.add("validgen", ValidGen)
    GENERATORS.add("compose", FakeCompose)
    hooks = Recorder()
    out = cycle(ctx, _req(provider, tmp_path, budget=160, generators=["validgen"], compositions=2), hooks)
    ph = ctx.store.get_job(out.job_id).params["phases"]["discover"]
    assert ph["status"] == "done" and ph["compose_done"] is True and ph.get("compose_job"), ph
    job = ctx.store.get_job(ph["compose_job"])
    assert job.kind == "discover" and job.params["generators"] == ["compose"] and job.params["levels"] == [3]
    assert job.params["train_templates"] is True and job.params["n"] == 2
    assert job.params["seed"] == ctx.store.get_job(out.job_id).params["seed"] + COMPOSE_SEED
    admitted = [c for c in ctx.store.candidates(ph["compose_job"]) if c.state == "admitted"]
    assert ph["compose_admitted"] == len(admitted) >= 1 and all(c.generator == "compose" for c in admitted)
    assert any("train compositions: 2 candidate(s) of level 3" in m for m in hooks.messages)
    spent = sum(len(ctx.store.trials(j.id)) for d in (ph["job"], ph["compose_job"], ph.get("holdout_job"))
                if d for j in ctx.store.child_jobs(d))
    assert spent <= out.split["discover"]
    # done once: asked again (as a resume would), the cycle's discover starts no second compose job
    before = len(ctx.store.jobs_of(kind="discover"))
    job = ctx.store.get_job(out.job_id)
    run = _Cycle(ctx, _req(provider, tmp_path, compositions=2), Recorder(), out.job_id, str(job.generation),
                 job.params["split"])
    assert run._compositions(out.split["discover"]) is None
    assert len(ctx.store.jobs_of(kind="discover")) == before


def test_promote_share_follows_the_holdout_discover_left(ctx: WorkspaceContext) -> None:
    """A discovered task the digest puts in holdout must be measured too: promote's share grows, expand's
    shrinks by as much, and the total (and the recorded split) holds."""
    from rsi.loop.cycle.phase import _Cycle, _open_job

    req = CycleRequest(budget=100)
    job_id, gen, split = _open_job(ctx, req)
    assert split["promote"] == 48  # 6 holdout tasks x 4 trials x 2 generations
    holdout_task(ctx.ws.tasks_dir, "h-new")
    hooks = Recorder()
    run = _Cycle(ctx, req, hooks, job_id, gen, split)
    run.replan_promote()
    assert run.split["promote"] == 56 and run.split["expand"] == split["expand"] - 8
    assert sum(run.split.values()) == 100
    assert ctx.store.get_job(job_id).params["split"] == run.split
    assert any("8 more than planned, taken from expand" in m for m in hooks.messages)


def test_each_cycle_draws_new_candidates_by_default(ctx: WorkspaceContext) -> None:
    """A second cycle with the first one's discover seed would regenerate the same candidates (all refused as
    taken): by default a cycle's seed is the count of the cycles before it; --seed pins it; a resume keeps it."""
    from rsi.loop.cycle.phase import _Cycle, _open_job

    first = _open_job(ctx, CycleRequest(budget=100))[0]
    second = _open_job(ctx, CycleRequest(budget=100))[0]
    pinned = _open_job(ctx, CycleRequest(budget=100, seed=7))[0]
    assert [ctx.store.get_job(j).params["seed"] for j in (first, second, pinned)] == [0, 1, 7]
    job = ctx.store.get_job(second)
    assert _Cycle(ctx, CycleRequest(), Recorder(), second, str(job.generation), job.params["split"]).seed == 1


def test_cycles_compound_until_a_candidate_is_not_promoted(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                           tmp_path: Path) -> None:
    """gen-0001 beats gen-0000 (BetterAgent) and becomes the next parent; gen-0002 is no better than
    gen-0001, is rejected, and the run ends there with the reason instead of running cycle 3."""
    from rich.console import Console

    from rsi.cli.cycle import generations_table
    from rsi.loop.cycle.runs import run_cycles

    res = run_cycles(ctx, _req(provider, tmp_path), 3, Recorder())
    assert [r.parent for r in res.rows] == ["gen-0000", "gen-0001"]
    assert [r.verdict for r in res.rows] == ["promoted", "rejected"]
    assert res.ended is not None and "cycle 2 of 3" in res.ended and "gen-0002 was rejected" in res.ended
    first, second = res.rows
    assert first.holdout[0] is not None and first.holdout[1] is not None and first.holdout[1] > first.holdout[0]
    assert first.in_template is not None  # expand's baseline on the train split
    assert second.reused > 0  # gen-0001's holdout trials from cycle 1 were measured once, reused in cycle 2
    con = Console(width=200, record=True)
    con.print(generations_table(res))
    text = con.export_text()
    assert "gen-0000 -> gen-0001" in text and "gen-0001 -> gen-0002" in text and "rejected" in text
    assert json.loads(json.dumps(res.as_json()))["generations"][1]["verdict"] == "rejected"
    from rsi.report.cycles_html import html, per_generation

    gens = per_generation(res.as_json()["generations"])
    assert list(gens) == ["gen-0000", "gen-0001", "gen-0002"]
    assert gens["gen-0001"]["holdout"] == second.holdout[0]  # its latest measurement: as cycle 2's parent
    page = html(res.as_json())
    assert 'id="cycles"' in page and "gen-0001 → gen-0002" in page and "<svg" in page
