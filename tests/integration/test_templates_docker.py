"""A sample of the procedural templates gated for real: in Docker, through `rsi discover`'s own gate, the oracle
passes, doing nothing fails and every known-wrong answer fails, graded at the declared-outputs level. The sample
covers every family at levels 1 and 2, leaning on what a container may do differently from the host (modes kept
through the verifier's copy, a deleted or renamed file, directories as declared reads, `ls -S`, `tac`, awk)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from rsi.core.discover import TaskDraft
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.store.files import load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SAMPLE = (
    "files/chmod", "files/delete", "files/mkdir", "files/nested", "files/rename", "files/list",
    "text/count-words", "text/reverse", "text/dedupe", "text/sort-numeric",
    "data/csv-column", "data/json-filter", "data/csv-sort",
    "logs/first-line", "logs/per-level", "logs/messages",
    "pyfix/comparison", "pyfix/accumulate", "pyfix/dict-count",
    "pipeline/largest-file", "pipeline/find-path", "pipeline/grep-files",
)
# every template of the shell family: symlinks and tar archives through the verifier's copy, an environment file
# holding a tar archive, GNU date and find -size in the base image
SHELL = tuple(f"shell/{t}" for t in ("find-ext", "sed-inplace", "cut-field", "tar-list", "symlink", "count-tree",
                                     "date-epoch", "find-size", "awk-filter", "tar-create", "export-var", "date-diff"))


class SampleGen:
    """Candidate i is SAMPLE[i] at its own level (the family's generator writes it)."""

    name = "templatesample"
    families = ("*",)
    max_level = 2

    sample: tuple[str, ...] = SAMPLE

    def generate(self, req: GenRequest) -> TaskDraft:
        tid = self.sample[req.seed % len(self.sample)]
        family = GENERATORS.create(tid.split("/")[0])
        assert isinstance(family, ProceduralFamily)
        return family.generate(GenRequest(seed=req.seed, difficulty=family.template(tid).level, template=tid,
                                          side=req.side, cycle=req.cycle))


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    load_generators()
    GENERATORS.add("templatesample", SampleGen)
    path = workspace.contract_path
    data = yaml.safe_load(path.read_text())
    data["discovery"]["oracle_runs"] = 1
    path.write_text(yaml.safe_dump(data))
    workspace.__dict__.pop("contract", None)
    yield workspace


class ShellGen(SampleGen):
    name = "shellsample"
    sample = SHELL


@pytest.mark.parametrize("sample", [SAMPLE, SHELL], ids=["families", "shell"])
def test_a_sample_of_templates_holds_in_real_containers(ws: WorkspaceContext, sample: tuple[str, ...]) -> None:
    GENERATORS.add("shellsample", ShellGen)
    gen = "templatesample" if sample is SAMPLE else "shellsample"
    out = discover(ws, DiscoverRequest(n=len(sample), generators=[gen], seed=0, attempts=1,
                                       probe_agent="nop", concurrency=4))
    assert not out.interrupted, out.reason
    assert len(out.candidates) == len(sample)
    bad = [(c.name, c.reason, c.detail) for c in out.candidates if c.state != "admitted"]
    assert not bad, bad
    for c in out.candidates:
        trials = [ws.store.get_trial(i) for i in c.evidence]
        assert {t.agent for t in trials} == {"oracle", "nop", "known_wrong"}, c.name
        assert all(t.passed == (t.agent == "oracle") for t in trials), [(t.agent, t.passed) for t in trials]
        assert len([t for t in trials if t.agent == "known_wrong"]) >= 2
        assert all(t.integrity == "declared_outputs" for t in trials)
    assert {t.spec.metadata.rsi.template for t in load_tasks([ws.ws.tasks_dir])} == set(sample)
