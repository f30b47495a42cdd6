"""Discovery's pure rules and the procedural generators: reproducible, varied, valid task drafts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rsi.core.contract import Contract
from rsi.core.discover import (
    TaskDraft,
    content_digest,
    contract_overreach,
    draft_split,
    in_band,
    nearest_duplicate,
    next_level,
    render_task,
    split_of,
)
from rsi.core.errors import NotFoundError
from rsi.core.task import parse_task_toml
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest, PoolTask, load_generators
from rsi.loop.discover.generators.model import parse_proposal
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.store.bundled import bundled_contract
from rsi.store.files import load_contract

load_generators()
FAMILIES = ["files", "text", "data", "logs", "pyfix", "pipeline"]


def _draft(name: str, seed: int, level: int) -> TaskDraft:
    return GENERATORS.create(name).generate(GenRequest(seed=seed, difficulty=level))


def _files(d: TaskDraft) -> dict[str, str]:
    return render_task(d, name=d.name(), split="train", discovered_by="gen-0000")


def test_unknown_generator_lists_the_known_ones() -> None:
    with pytest.raises(NotFoundError, match="unknown generator 'nope'; known: ") as e:
        GENERATORS.get("nope")
    known = str(e.value).split("known: ")[1].split(", ")
    assert set(known) >= {"files", "text", "data", "logs", "pyfix", "pipeline", "mutate", "model"}


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_digest_other_seed_other_data(family: str) -> None:
    g = GENERATORS.create(family)
    assert isinstance(g, ProceduralFamily) and g.max_level >= 4
    for level in sorted(g.levels):
        a, b = _draft(family, 7, level), _draft(family, 7, level)
        assert content_digest(_files(a)) == content_digest(_files(b))
        for tid in g.template_ids(level):
            others = [GENERATORS.create(family).generate(GenRequest(seed=s, difficulty=level, template=tid))
                      for s in range(8, 14)]
            # instances of one template differ in data and names, not only in a number
            assert len({o.instruction for o in others}) >= 5, tid
            assert len({tuple(sorted(o.env_files.items())) for o in others}) >= 5 or not others[0].env_files, tid
            assert all(o.template == tid for o in others)
        assert a.known_wrong and a.reads and a.family == family and a.difficulty == level


def test_level_out_of_range_is_a_generator_error() -> None:
    with pytest.raises(GeneratorError, match="difficulty 9 is not one of 1, 2, 3, 4"):
        _draft("text", 0, 9)


def _run_on_host(d: TaskDraft, script: str | None, tmp: Path) -> bool:
    """Run the draft's script then its verifier with /app and /logs/verifier mapped into `tmp`."""
    app, logs = tmp / "app", tmp / "logs" / "verifier"
    app.mkdir(parents=True)
    logs.mkdir(parents=True)
    for rel, text in d.env_files.items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)

    def fix(s: str) -> str:
        return re.sub(r"/app(?=[/\s'\"]|$)", str(app), s).replace("/logs/verifier", str(logs))

    if script:
        subprocess.run(["bash", "-c", fix(script)], cwd=app, capture_output=True, timeout=30)
    subprocess.run(["bash", "-c", fix(d.test_sh)], cwd=app, capture_output=True, timeout=30)
    return (logs / "reward.txt").read_text().strip() == "1"


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_passes_nop_and_known_wrong_fail_for_many_seeds(family: str, tmp_path: Path) -> None:
    """The verifier's verdicts on the host (the Docker test repeats a sample in real containers)."""
    g = GENERATORS.create(family)
    assert isinstance(g, ProceduralFamily)
    for level in sorted(g.levels):
        for seed in range(3):
            d = _draft(family, seed, level)
            where = tmp_path / f"{level}-{seed}"
            assert _run_on_host(d, d.solve_sh, where / "oracle"), f"{family} d{level} s{seed}: oracle failed"
            assert not _run_on_host(d, None, where / "nop"), f"{family} d{level} s{seed}: nop passed"
            for i, w in enumerate(d.known_wrong):
                assert not _run_on_host(d, w, where / f"w{i}"), f"{family} d{level} s{seed}: wrong {i} passed"


def test_rendered_task_toml_parses_with_provenance() -> None:
    d = _draft("logs", 3, 2)
    files = _files(d)
    spec = parse_task_toml(files["task.toml"], "task.toml")
    m = spec.metadata.rsi
    assert (m.family, m.difficulty, m.generator, m.seed, m.discovered_by, m.split) == (
        "logs", 2, "logs", 3, "gen-0000", "train")
    assert spec.verifier.reads == d.reads and spec.network() == "no-network"
    assert "solution/solve.sh" in files and not any("known_wrong" in k for k in files)


def test_split_is_a_fixed_share_of_digests() -> None:
    assert split_of("0" * 64, 0.2) == "holdout" and split_of("f" * 64, 0.2) == "train"
    drafts = [_draft(f, s, 1) for f in FAMILIES for s in range(40)]
    splits = [draft_split(d, d.name(), 0.2) for d in drafts]
    assert splits == [draft_split(d, d.name(), 0.2) for d in drafts]  # deterministic
    share = splits.count("holdout") / len(splits)
    assert 0.1 < share < 0.3


def test_contract_overreach_names_each_field() -> None:
    contract: Contract = load_contract(bundled_contract())
    d = _draft("files", 1, 1).model_copy(update={"cpus": 64.0, "agent_timeout_sec": 5000.0,
                                                 "network_mode": "public"})
    spec = parse_task_toml(_files(d)["task.toml"], "task.toml")
    fields = [x.split(":")[0] for x in contract_overreach(spec, contract)]
    assert fields == ["agent.timeout_sec", "environment.cpus", "environment.network_mode"]


def test_near_duplicate_and_band_and_curriculum() -> None:
    pool = {"hello-file": "Create the file `/app/hello.txt` containing exactly the text `hello world`."}
    near = nearest_duplicate("create the file /app/hello.txt containing exactly the text hello world", pool)
    assert near is not None
    name, score = near
    assert name == "hello-file" and score > 0.95
    assert nearest_duplicate("Sum the second column of /app/x.csv", pool)[1] < 0.6  # type: ignore[index]
    assert [in_band(r, (0.0, 0.75)) for r in (0.0, 0.5, 0.75, 1.0)] == ["in", "in", "in", "above"]
    assert in_band(0.0, (0.25, 0.75)) == "below"
    assert next_level(1, [1.0, 0.8], (0.0, 0.75), 4)[0] == 2
    assert next_level(3, [0.0, 0.0], (0.0, 0.75), 4)[0] == 2
    assert next_level(1, [0.0, 0.0], (0.0, 0.75), 4)[0] == 1  # never below 1
    assert next_level(4, [1.0], (0.0, 0.75), 4)[0] == 4  # never above the top
    assert next_level(2, [0.0, 0.5], (0.0, 0.75), 4)[0] == 2


def test_mutate_moves_the_parents_knob_and_names_it() -> None:
    parent = _draft("text", 5, 2)
    pool = [PoolTask(name="text-parent", family="text", difficulty=2, instruction=parent.instruction,
                     generator="text", seed=5, probe_pass_rate=0.5)]
    up = GENERATORS.create("mutate").generate(GenRequest(seed=1, difficulty=1, pool=pool))
    assert (up.difficulty, up.parent_task, up.generator) == (3, "text-parent", "text")
    assert up.instruction == _draft("text", 5, 3).instruction
    pool0 = [PoolTask(**{**pool[0].__dict__, "probe_pass_rate": 0.0})]
    down = GENERATORS.create("mutate").generate(GenRequest(seed=1, difficulty=1, pool=pool0))
    assert down.difficulty == 1
    with pytest.raises(GeneratorError, match="no pool task made by a procedural generator"):
        GENERATORS.create("mutate").generate(GenRequest(seed=1, difficulty=1, pool=[]))


def test_model_proposal_parsing() -> None:
    good = (
        "### instruction\nWrite hi to /app/x.txt.\n\n### setup.sh\n```bash\ntrue\n```\n"
        "### test.sh\n```bash\nmkdir -p /logs/verifier\n"
        "if grep -qx hi /app/x.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > "
        "/logs/verifier/reward.txt; fi\n```\n### solve.sh\n```bash\necho hi > /app/x.txt\n```\n"
        "### wrong.sh\n```bash\necho ho > /app/x.txt\n```\n"
    )
    parts = parse_proposal(good)
    assert parts["solve.sh"] == "echo hi > /app/x.txt" and parts["instruction"] == "Write hi to /app/x.txt."
    with pytest.raises(GeneratorError, match="lacks solve.sh, wrong.sh") as e:
        parse_proposal(good.split("### solve.sh")[0])
    assert e.value.reason == "unparseable"
    with pytest.raises(GeneratorError, match="never writes /logs/verifier/reward"):
        parse_proposal(good.replace("/logs/verifier/reward.txt", "/tmp/r"))
    with pytest.raises(GeneratorError):
        parse_proposal("I am a small model and I like turtles.")
