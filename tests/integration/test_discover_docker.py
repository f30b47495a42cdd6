"""`rsi discover` in real Docker: hand-made broken candidates are all rejected with the right reason,
the procedural families' oracles pass and their nop / known-wrong solutions fail in real containers,
and with the real embedded model a discover admits tasks at gen-0000's frontier into both splits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rsi.core.discover import TaskDraft
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GenRequest
from rsi.loop.discover.generators.procedural import DOCKERFILE_HEAD, script, verifier
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.store.files import load_task, load_tasks
from tests.integration.test_harness_run import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
HELLO = (REPO / "tasks" / "hello-file" / "instruction.md").read_text()
CHECK = "if read('/app/out.txt').strip() != 'ok':\n    fail('/app/out.txt is not ok')\n"

# seed -> (kind, the reason the gate must give; None = valid)
BROKEN = {0: ("valid", None), 1: ("always passes", "nop_passed"), 2: ("oracle fails", "oracle_failed"),
          3: ("known-wrong passes", "known_wrong_passed"), 4: ("duplicate instruction", "near_duplicate"),
          5: ("limits beyond the contract", "over_contract"), 6: ("Dockerfile does not build", "build_failed")}


class BrokenGen:
    """One hand-made candidate per seed, in the shape `rsi discover` stages for real."""

    name = "brokengen"
    families = ("broken",)
    max_level = 1

    def generate(self, req: GenRequest) -> TaskDraft:
        kind = BROKEN.get(req.seed, ("flaky", None))[0]
        checks = "pass\n" if kind == "always passes" else CHECK
        solve = "echo no > /app/out.txt" if kind == "oracle fails" else "echo ok > /app/out.txt"
        if kind == "flaky":  # the reference answer is right half the time: a flaky task
            solve = "if [ $((RANDOM % 2)) = 0 ]; then echo ok; else echo no; fi > /app/out.txt"
        docker = DOCKERFILE_HEAD + ("RUN false\n" if kind == "Dockerfile does not build" else "")
        return TaskDraft(
            generator=self.name, family="broken", difficulty=1, seed=req.seed,
            instruction=HELLO if kind == "duplicate instruction" else f"Case {kind} {req.seed}: write ok to "
            f"/app/out.txt ({'x' * 3 * req.seed}).",
            dockerfile=docker, test_sh=verifier(checks, kind), solve_sh=script(solve),
            known_wrong=[script(f"echo {'ok' if kind == 'known-wrong passes' else 'ko'} > /app/out.txt")],
            reads=["/app/out.txt"], memory_mb=999_999 if kind == "limits beyond the contract" else 512,
        )


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    GENERATORS.add("brokengen", BrokenGen)
    hello = workspace.ws.tasks_dir / "hello-file"
    subprocess.run(["cp", "-r", str(REPO / "tasks" / "hello-file"), str(hello)], check=True)
    yield workspace


def _set_contract(ctx: WorkspaceContext, **discovery: object) -> None:
    path = ctx.contract_path
    data = yaml.safe_load(path.read_text())
    data["discovery"].update(discovery)
    path.write_text(yaml.safe_dump(data))
    ctx.__dict__.pop("contract", None)


def test_broken_candidates_are_all_rejected_with_the_right_reason(ws: WorkspaceContext) -> None:
    out = discover(ws, DiscoverRequest(n=len(BROKEN), generators=["brokengen"], attempts=1, probe_agent="nop",
                                       concurrency=2))
    assert not out.interrupted, out.reason
    got = {c.seed: (c.state, c.reason) for c in out.candidates}
    assert got == {s: ("admitted", None) if r is None else ("rejected", r) for s, (_k, r) in BROKEN.items()}
    names = {t.name for t in load_tasks([ws.ws.tasks_dir])}
    assert names == {"hello-file"} | {c.name for c in out.candidates if c.state == "admitted"}
    build = next(c for c in out.candidates if c.reason == "build_failed")
    assert build.evidence and "RUN false" in Path(ws.store.get_trial(build.evidence[0]).trial_dir,
                                                   "build.log").read_text()


def test_a_flaky_reference_fails_the_gate(ws: WorkspaceContext) -> None:
    # 10 oracle runs of a coin flip: all agree with probability 2/1024, so this is (almost) never flaky itself.
    _set_contract(ws, oracle_runs=10)
    out = discover(ws, DiscoverRequest(n=1, generators=["brokengen"], seed=7, attempts=1, probe_agent="nop",
                                       concurrency=2))
    (c,) = out.candidates
    assert (c.state, c.reason) == ("rejected", "oracle_flaky"), c.detail


@pytest.mark.parametrize("levels", [(1, 2, 3, 4, 1, 2), (3, 4, 1, 2, 3, 4)])
def test_procedural_families_hold_in_real_containers(ws: WorkspaceContext, levels: tuple[int, ...]) -> None:
    """Each family at two levels (every level three times over both runs): the oracle passes, nop and
    every known-wrong solution fail in Docker, so every candidate is admitted (the probe is nop)."""
    _set_contract(ws, oracle_runs=1)
    fams = ["files", "text", "data", "logs", "pyfix", "pipeline"]
    for fam, level in zip(fams, levels, strict=True):
        ws.store.set_level(fam, level, "test")
    out = discover(ws, DiscoverRequest(n=6, seed=levels[0], attempts=1, probe_agent="nop", concurrency=2))
    assert not out.interrupted, out.reason
    assert [(c.family, c.difficulty) for c in out.candidates] == list(zip(fams, levels, strict=True))
    bad = [(c.name, c.reason, c.detail) for c in out.candidates if c.state != "admitted"]
    assert not bad, bad
    for c in out.candidates:
        trials = [ws.store.get_trial(i) for i in c.evidence]
        assert {t.agent for t in trials} == {"oracle", "nop", "known_wrong"}
        assert all(t.passed == (t.agent == "oracle") for t in trials)
        assert all(t.integrity == "declared_outputs" for t in trials)


@pytest.mark.model
def test_discover_with_the_embedded_model_admits_frontier_tasks_into_both_splits(tmp_path: Path) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"
    run = lambda *a: subprocess.run([sys.executable, "-m", "rsi", *a], cwd=root if root.exists() else tmp_path,  # noqa: E731
                                    env=env, capture_output=True, text=True, timeout=1100)
    assert run("init", str(root)).returncode == 0
    before = {p.name for p in (root / "tasks").iterdir()}
    r = run("discover", "--candidates", "3", "-g", "data", "-g", "pyfix", "-g", "logs", "-k", "2", "--seed", "4",
            "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    admitted = [c for c in out["candidates"] if c["state"] == "admitted"]
    assert admitted, out["candidates"]
    for c in out["candidates"]:
        assert c["state"] in ("admitted", "dropped"), c  # valid tasks: only the band may drop one
        # train candidates are probed; holdout ones are admitted on validity alone (the parent's band never
        # decides what the holdout holds)
        assert c["probe_trials"] == (2 if c["split"] == "train" else 0), c
    from rsi.core.discover import unit_split

    for c in admitted:
        t = load_task(root / "tasks" / c["name"])
        assert t.digest == c["task_digest"] and t.split == c["split"]
        # the split is a function of the template: no template is on both sides
        assert t.split == unit_split("template", str(t.spec.metadata.rsi.template), 0.2), t.spec.metadata.rsi
        if t.split == "train":
            assert 0.0 <= c["probe_pass_rate"] <= 0.75
        assert t.spec.metadata.rsi.discovered_by == "gen-0000"
    new = {p.name for p in (root / "tasks").iterdir()} - before
    assert new == {c["name"] for c in admitted}
    listed = json.loads(run("tasks", "list", "--json").stdout)
    rows = {x["name"]: x for x in listed}
    for c in admitted:
        assert rows[c["name"]]["probe_pass_rate"] == c["probe_pass_rate"]
        assert rows[c["name"]]["generator"] == c["generator"]
