"""`rsi discover` end to end on FakeSandboxProvider: every kind of broken candidate is rejected with
its reason and evidence, valid ones in the band are admitted with a split, a budget stop resumes
without a duplicate candidate or a re-paid trial.

The generator here writes tasks whose scripts prefix sandbox paths with ${SANDBOX_ROOT:-} (so the
host-executing fake provider can run them); the Docker test repeats the broken kinds for real.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.core.discover import TaskDraft
from rsi.core.errors import ConfigError
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome
from rsi.harness.builtin import NopAgent, OracleAgent
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest
from rsi.loop.discover.generators.procedural import WORDS
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.sandbox.base import Sandbox
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.files import load_tasks
from tests.taskgen import R

HELLO = ("Create the file `/app/hello.txt` containing exactly the text `hello world` (a single trailing newline "
         "is fine).")
WRITE = f"echo WORD > \"{R}/app/out.txt\"\n"
TEST = (f'mkdir -p "{R}/logs/verifier"\n'
        f'if [ "$(cat "{R}/app/out.txt" 2>/dev/null)" = ok ]; then echo 1 > "{R}/logs/verifier/reward.txt"; '
        f'else echo 0 > "{R}/logs/verifier/reward.txt"; fi\n')
# Which broken kind each seed makes (seed % 10), and the reason the gate must give.
KINDS = {0: None, 1: None, 2: "nop_passed", 3: "oracle_failed", 4: "oracle_flaky", 5: "known_wrong_passed",
         6: "over_contract", 7: "near_duplicate", 8: "generator_error", 9: "unparseable"}


class FakeGen:
    """Ten kinds of candidate by seed; `flaky_dir` keeps the flaky verifier's run counter on the host."""

    name = "fakegen"
    families = ("fake",)
    max_level = 3
    flaky_dir = Path("/tmp")

    def generate(self, req: GenRequest) -> TaskDraft:
        kind = req.seed % 10
        if kind == 8:
            raise ValueError("generator bug")
        if kind == 9:
            raise GeneratorError("the proposal lacks solve.sh", reason="unparseable")
        test = TEST
        if kind == 2:
            test = f'mkdir -p "{R}/logs/verifier"; echo 1 > "{R}/logs/verifier/reward.txt"\n'
        if kind == 4:  # passes on its first run only (mkdir is an atomic test-and-set: runs may overlap)
            first = self.flaky_dir / f"flaky-{req.seed}"
            test = (f'mkdir -p "{R}/logs/verifier"; if mkdir {first} 2>/dev/null; then echo 1; else echo 0; fi '
                    f'> "{R}/logs/verifier/reward.txt"\n')
        return TaskDraft(
            generator=self.name, family="fake", difficulty=req.difficulty, seed=req.seed,
            instruction=HELLO if kind == 7 else " ".join(random.Random(req.seed).sample(WORDS, 8))
            + ": write ok to /app/out.txt.",
            dockerfile="ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nWORKDIR /app\n",
            test_sh="#!/bin/bash\n" + test,
            solve_sh="#!/bin/bash\n" + WRITE.replace("WORD", "no" if kind == 3 else "ok"),
            known_wrong=["#!/bin/bash\n" + WRITE.replace("WORD", "ok" if kind == 5 else "ko")],
            cpus=64.0 if kind == 6 else 1.0,
        )


class HalfAgent:
    """Solves attempt 1 of every task and nothing else: a probe pass rate of 1/K."""

    name = "half"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        if ctx.trial_id.endswith(".1"):
            return OracleAgent().run(sandbox, ctx)
        return NopAgent().run(sandbox, ctx)


class PickyAgent:
    """Solves every task but the ones whose name starts with 'hard'."""

    name = "picky"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        agent = NopAgent() if ctx.task.name.startswith("hard") else OracleAgent()
        return agent.run(sandbox, ctx)


@pytest.fixture
def ws(workspace: WorkspaceContext, tmp_path: Path) -> Iterator[WorkspaceContext]:
    FakeGen.flaky_dir = tmp_path
    GENERATORS.add("fakegen", FakeGen)
    AGENTS.add("half", HalfAgent)
    AGENTS.add("picky", PickyAgent)
    tasks = workspace.ws.tasks_dir
    (tasks / "hello-file").mkdir(parents=True)
    src = Path(__file__).resolve().parents[2] / "tasks" / "hello-file"
    for p in src.rglob("*"):
        if p.is_file():
            (tasks / "hello-file" / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (tasks / "hello-file" / p.relative_to(src)).write_bytes(p.read_bytes())
    yield workspace


def _req(**kw: object) -> DiscoverRequest:
    base: dict[str, object] = {"n": 10, "generators": ["fakegen"], "attempts": 2, "probe_agent": "half",
                               "concurrency": 2}
    return DiscoverRequest(**{**base, **kw})  # type: ignore[arg-type]


def test_every_broken_kind_is_rejected_with_its_reason(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = discover(ws, _req(), provider=provider)
    assert not out.interrupted, out.reason
    by_seed = {c.seed: c for c in out.candidates}
    assert sorted(by_seed) == list(range(10))
    for seed, reason in KINDS.items():
        c = by_seed[seed]
        if reason is None:
            assert (c.state, c.probe_pass_rate, c.probe_trials) == ("admitted", 0.5, 2), (c.reason, c.detail)
        else:
            assert (c.state, c.reason) == ("rejected", reason), (seed, c.state, c.reason, c.detail)
    # executed evidence: the gate's verdicts name the trials behind them
    for seed in (2, 3, 4, 5):
        ids = by_seed[seed].evidence
        assert ids and all(ws.store.get_trial(i).status == "done" for i in ids)
    assert "hello-file" in (by_seed[7].detail or "")
    # only the admitted ones are in tasks/, each with its split and provenance; nothing rejected is
    names = {t.name: t for t in load_tasks([ws.ws.tasks_dir])}
    admitted = [by_seed[0], by_seed[1]]
    assert set(names) == {"hello-file"} | {c.name for c in admitted}
    for c in admitted:
        t = names[c.name]
        assert t.digest == c.task_digest and t.split == c.split
        assert (t.spec.metadata.rsi.generator, t.spec.metadata.rsi.seed) == ("fakegen", c.seed)
        assert not (Path(t.path) / "known_wrong").exists()
    rows = {r.name: r for r in ws.store.task_rows()}
    assert rows[by_seed[3].name].state == "rejected" and rows[by_seed[0].name].state == "active"
    assert rows[by_seed[0].name].probe_pass_rate == 0.5


def test_candidates_above_the_band_are_dropped(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = discover(ws, _req(n=2, probe_agent="oracle"), provider=provider)
    assert [(c.state, c.reason, c.probe_pass_rate) for c in out.candidates] == [("dropped", "above_band", 1.0)] * 2
    assert {t.name for t in load_tasks([ws.ws.tasks_dir])} == {"hello-file"}


def test_budget_stop_then_resume_pays_no_trial_twice(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    # 14 trials cover two candidates' gate and probe (about 8 each planned): the rest are not generated
    first = discover(ws, _req(n=4, budget=14), provider=provider)
    assert first.interrupted and "budget spent: 14 trials cover 2 of the 4" in (first.reason or "")
    assert len(first.candidates) == 2
    job = ws.store.get_job(first.job_id)
    assert job.status == "interrupted" and job.kind == "discover"
    with pytest.raises(ConfigError, match="other settings \\(attempts\\)"):
        discover(ws, _req(n=4, attempts=3, resume=first.job_id), provider=provider)
    done = discover(ws, DiscoverRequest(resume=first.job_id, budget=100, probe_agent="half"), provider=provider)
    assert not done.interrupted, done.reason
    assert {c.name for c in first.candidates} < {c.name for c in done.candidates} and len(done.candidates) == 4
    children = ws.store.child_jobs(first.job_id)
    trials = [t for j in children for t in ws.store.trials(j.id)]
    assert len(trials) == len({t.id for t in trials})
    # seeds 0..3: two valid (oracle 2 + nop + wrong + probe 2 each), nop_passed (oracle 2 + 2), oracle_failed (2)
    assert len(trials) == 2 * 6 + 4 + 2
    assert [c.state for c in done.candidates].count("admitted") == 2


def test_a_second_discover_draws_new_candidates_unless_its_seed_is_pinned(
    ws: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    """With no --seed, a repeated `rsi discover` used to regenerate the first run's candidates, every one
    refused as `name_taken`: the default seed now lies above every earlier discover / cycle seed."""
    first = discover(ws, _req(n=2), provider=provider)
    assert [c.state for c in first.candidates] == ["admitted"] * 2  # fakegen's seeds 0 and 1 are valid
    second = discover(ws, _req(n=2), provider=provider)
    assert [ws.store.get_job(o.job_id).params["seed"] for o in (first, second)] == [0, 1]
    assert not {c.name for c in first.candidates} & {c.name for c in second.candidates}
    assert not {c.reason for c in second.candidates} & {"name_taken", "duplicate_digest"}
    pinned = discover(ws, _req(n=2, seed=0), provider=provider)  # the same seed, the same candidates: refused
    assert {c.reason for c in pinned.candidates} <= {"name_taken", "duplicate_digest"} and pinned.candidates


def test_holdout_only_keeps_holdout_candidates(ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = discover(ws, _req(n=4, holdout_only=True), provider=provider)
    split = [c for c in out.candidates if c.split is not None]
    assert split and all(c.split == "holdout" for c in split)
    admitted = [t for t in load_tasks([ws.ws.tasks_dir]) if t.name != "hello-file"]
    assert admitted and all(t.split == "holdout" for t in admitted)
    # holdout candidates are admitted on validity alone: the parent never probes them (no band decides)
    probe = [t for j in ws.store.child_jobs(out.job_id) if j.params["stage"] == "probe"
             for t in ws.store.trials(j.id)]
    assert probe == []
    assert all(c.probe_pass_rate is None for c in out.candidates if c.state == "admitted")
    # the gate's trials are recorded as holdout rows: sealed from discover, expand, update
    gate = [t for j in ws.store.child_jobs(out.job_id) for t in ws.store.trials(j.id)]
    assert gate and all(t.split == "holdout" for t in gate)
    assert ws.store.outcomes("expand", task_digests=[t.digest for t in admitted]) == []


def test_reprobe_retires_easy_and_broken_tasks_and_moves_the_curriculum(
    ws: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    from rsi.loop.discover.reprobe import reprobe
    from tests.taskgen import make_task

    tasks = ws.ws.tasks_dir
    for p in tasks.iterdir():  # only tasks the fake provider can run
        import shutil

        shutil.rmtree(p)
    make_task(tasks, "easy", family="fam-a")
    make_task(tasks, "broken", family="fam-a", solve='echo no > "${SANDBOX_ROOT:-}/app/out.txt"\n')
    make_task(tasks, "hard", family="fam-b")
    ws.store.set_level("fam-b", 3, "test")
    out = reprobe(ws, generation=None, attempts=2, band=None, budget=None, concurrency=2,
                  probe_agent="picky", provider=provider)
    assert not out.interrupted, out.reason
    retired = dict(out.retired)
    assert retired["easy"].startswith("easy: gen-0000 passed 2 of 2")
    assert retired["broken"].startswith("broken: the oracle failed")
    assert "hard" not in retired and out.rates["hard"] == 0.0
    rows = {r.name: r for r in ws.store.task_rows()}
    assert (rows["easy"].state, rows["broken"].state, rows["hard"].state) == ("retired", "retired", "active")
    levels = ws.store.curriculum()
    assert levels["fam-a"].level == 2 and levels["fam-b"].level == 2  # up (above the band), down (all at 0)
    # a retired task leaves the pool discovery draws from
    from rsi.loop.discover.phase import _pool

    assert [t.name for t in _pool(ws)] == ["hard"]


KILL_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
import tests.unit.test_discover_loop as m
from rsi.harness.agent import AGENTS
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.loop.discover.generators import GENERATORS
from rsi.sandbox.fake import FakeSandboxProvider

class Slow(m.FakeGen):
    def generate(self, req):
        d = super().generate(req)
        return d.model_copy(update={{"solve_sh": d.solve_sh + "sleep 0.4\\n"}})

m.FakeGen.flaky_dir = Path({tmp!r})
GENERATORS.add("fakegen", Slow)
AGENTS.add("half", m.HalfAgent)
ctx = WorkspaceContext.open(Path({root!r}))
req = DiscoverRequest(n=8, generators=["fakegen"], attempts=2, probe_agent="half", concurrency=1, resume={resume!r})
out = discover(ctx, req, provider=FakeSandboxProvider(Path({tmp!r}) / "fake"))
print("DONE", out.job_id, out.interrupted)
"""


def test_kill_9_then_resume_records_every_candidate_and_trial_once(ws: WorkspaceContext, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = str(Path(__file__).resolve().parents[2])
    root = str(ws.ws.root)

    def start(resume: str | None) -> subprocess.Popen[str]:
        code = KILL_SCRIPT.format(repo=repo, tmp=str(tmp_path), root=root, resume=resume)
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "RSI_HOME": root})

    proc = start(None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it once some gate trials are recorded, mid-stage
        jobs = [j for j in ws.store.list_jobs() if j.parent_job]
        if jobs and sum(t.status == "done" for t in ws.store.trials(jobs[0].id)) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (job,) = [j for j in ws.store.list_jobs() if j.kind == "discover"]
    before = {t.id: t.finished_at for j in ws.store.child_jobs(job.id) for t in ws.store.trials(j.id)
              if t.status == "done"}
    names = sorted(c.name for c in ws.store.candidates(job.id))
    assert before and names

    again = start(job.id)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err[-2000:]
    assert f"DONE {job.id} False" in out
    assert sorted(c.name for c in ws.store.candidates(job.id)) == names
    trials = [t for j in ws.store.child_jobs(job.id) for t in ws.store.trials(j.id)]
    assert len(trials) == len({t.id for t in trials}) and all(t.status == "done" for t in trials)
    for t in trials:  # a trial finished before the kill was not run again
        if t.id in before:
            assert t.finished_at == before[t.id]
    assert ws.store.get_job(job.id).status == "done"


class TemplatedGen(FakeGen):
    """Valid candidates only, on two templates by seed parity (the probe-per-template test)."""

    name = "templated"

    def generate(self, req: GenRequest) -> TaskDraft:
        d = super().generate(GenRequest(seed=req.seed - req.seed % 10, difficulty=req.difficulty))
        return d.model_copy(update={"generator": self.name, "seed": req.seed,
                                    "template": f"fake/{'even' if req.seed % 2 == 0 else 'odd'}",
                                    "instruction": " ".join(random.Random(req.seed).sample(WORDS, 8))
                                    + ": write ok to /app/out.txt."})


def test_probe_per_template_probes_one_candidate_of_each_template_and_places_the_rest_by_it(
        ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    GENERATORS.add("templated", TemplatedGen)
    out = discover(ws, _req(n=6, generators=["templated"], probe_per_template=1, attempts=2, seed=100),
                   provider=provider)
    assert not out.interrupted, out.reason
    admitted = [c for c in out.candidates if c.state == "admitted"]
    assert len(admitted) == 6, [(c.name, c.state, c.reason) for c in out.candidates]
    probed = [c for c in admitted if c.probe_trials == 2]
    by_sibling = [c for c in admitted if c.probe_trials == 0]
    assert len(probed) == 2 and len(by_sibling) == 4, "one probed candidate per template, two probe attempts each"
    probe_tasks = {t.task_name for j in ws.store.child_jobs(out.job_id) if j.params.get("stage", "").startswith(
        "probe") for t in ws.store.trials(j.id)}
    assert probe_tasks == {c.name for c in probed}, "the model attempted only the probed candidates"
    for c in by_sibling:
        assert c.probe_pass_rate == 0.5 and "by template fake/" in (c.detail or "") and c.evidence


def test_train_template_requests_spread_over_train_templates_only() -> None:
    from rsi.core.discover import unit_split
    from rsi.loop.discover.generators import load_generators
    from rsi.loop.discover.requests import train_template_requests

    load_generators()
    gens = ["files", "text", "shell"]
    reqs = train_template_requests(DiscoverRequest(n=60, levels=[1, 2], seed=5), gens, {}, 4, "template", 0.2, 1)
    assert reqs is not None and len(reqs) == 60
    tpls = [r.template for _g, r in reqs]
    assert all(t is not None and unit_split("template", t, 0.2) == "train" for t in tpls), "no held-out template"
    counts = {t: tpls.count(t) for t in set(tpls)}
    assert max(counts.values()) - min(counts.values()) <= 1, "spread evenly"
    assert all(r.phrasing_side == "train" for _g, r in reqs)
