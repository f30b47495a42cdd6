"""A sample of compositions gated for real: in Docker, through `rsi discover`'s own gate, the reference passes and
doing nothing, doing part of the work and doing one step carelessly fail, graded at the declared-outputs level. The
sample leans on what a container may do differently from the host: a file written in place (append), a removed
original (delete), a new directory chain as a declared read (nested), a directory and a pair of files as the
environment (list, concat), JSON and CSV steps through python3 and awk."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from rsi.core.discover import TaskDraft
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.compose import ComposeGenerator
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.store.files import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SAMPLE = tuple(f"compose/{c}" for c in (
    "sort+head", "list+count-lines", "concat+append", "copy+delete", "csv-sort+csv-max",
    "json-filter+sort+nested", "sort-numeric+tail+copy", "json-keys+upper+nested", "append+sort+tail",
))


class ComposeSample:
    """Candidate i is SAMPLE[i] (the compose generator writes it)."""

    name = "composesample"
    families = ("*",)
    max_level = 4

    def generate(self, req: GenRequest) -> TaskDraft:
        tid = SAMPLE[req.seed % len(SAMPLE)]
        return ComposeGenerator().generate(GenRequest(seed=req.seed, difficulty=len(tid.split("+")) + 1,
                                                      template=tid))


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    load_generators()
    GENERATORS.add("composesample", ComposeSample)
    path = workspace.contract_path
    data = yaml.safe_load(path.read_text())
    data["discovery"]["oracle_runs"] = 1
    path.write_text(yaml.safe_dump(data))
    workspace.__dict__.pop("contract", None)
    yield workspace


def test_a_sample_of_compositions_holds_in_real_containers(ws: WorkspaceContext) -> None:
    out = discover(ws, DiscoverRequest(n=len(SAMPLE), generators=["composesample"], seed=0, attempts=1,
                                       probe_agent="nop", concurrency=4))
    assert not out.interrupted, out.reason
    assert len(out.candidates) == len(SAMPLE)
    bad = [(c.name, c.reason, c.detail) for c in out.candidates if c.state != "admitted"]
    assert not bad, bad
    for c in out.candidates:
        trials = [ws.store.get_trial(i) for i in c.evidence]
        assert {t.agent for t in trials} == {"oracle", "nop", "known_wrong"}, c.name
        assert all(t.passed == (t.agent == "oracle") for t in trials), [(t.agent, t.passed) for t in trials]
        assert len([t for t in trials if t.agent == "known_wrong"]) >= 2
        assert all(t.integrity == "declared_outputs" for t in trials)
        # each step's own effect is in the trial's reward map: every step for the reference, none for doing nothing
        oracle = next(t for t in trials if t.agent == "oracle").rewards
        steps = [k for k in oracle if k.startswith("step_")]
        assert steps and all(oracle[k] == 1 for k in steps) and oracle["reward"] == 1, (c.name, oracle)
        nop = next(t for t in trials if t.agent == "nop").rewards
        assert nop["reward"] == 0 and set(nop) == set(oracle), (c.name, nop)
    tasks = load_tasks([ws.ws.tasks_dir])
    assert {t.spec.metadata.rsi.template for t in tasks} == set(SAMPLE)
    assert all(t.spec.metadata.rsi.family == "compose" and t.spec.metadata.rsi.ops for t in tasks)
