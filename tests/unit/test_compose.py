"""The `compose` generator: chains of 2-3 template operations as one task (levels 3-4). Reproducible per seed;
the train and held-out combinations split by the template split (disjoint, covering, of trained operations only);
every task loads as a Harbor task declaring what its verifier reads; on the host the reference passes while doing
nothing, doing only part of the work and doing a step carelessly fail (the Docker test repeats a few)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from rsi.core.discover import TaskDraft, content_digest, draft_placement, render_task, unit_split
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.split import in_skill_compositions
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest, load_generators
from rsi.loop.discover.generators.compose import (
    COMBINATIONS,
    FRAMES,
    ComposeGenerator,
    compositions,
    draw_held_out,
    held_out_compositions,
    ops_of,
    train_compositions,
)
from rsi.loop.discover.generators.compose_ops import OPS
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.store.bundled import bundled_contract
from rsi.store.files import load_contract, load_task
from tests.unit.test_discover_rules import _run_on_host

load_generators()
FRACTION = load_contract(bundled_contract()).promotion.holdout_fraction


def _gen(template: str, seed: int, **kw: object) -> TaskDraft:
    lv = len(template.split("+")) + 1
    return GENERATORS.create("compose").generate(GenRequest(seed=seed, difficulty=lv, template=template, **kw))  # type: ignore[arg-type]


def _files(d: TaskDraft) -> dict[str, str]:
    return render_task(d, name=d.name(), split="train", discovered_by="gen-0000")


def test_registered_with_levels_3_and_4_only() -> None:
    g = GENERATORS.create("compose")
    assert isinstance(g, ComposeGenerator) and g.families == ("compose",)
    assert sorted(g.levels) == [3, 4] and g.max_level == 4
    assert len(compositions(3)) == len(COMBINATIONS[2]) and len(compositions(4)) == len(COMBINATIONS[3])
    with pytest.raises(GeneratorError):
        g.generate(GenRequest(seed=0, difficulty=2))
    # the seed draws among the level's compositions
    seen = {g.generate(GenRequest(seed=s, difficulty=3)).template for s in range(40)}
    assert len(seen) > 20 and seen <= set(compositions(3))


def test_operations_span_files_text_and_data_and_are_trained_templates() -> None:
    assert len(OPS) >= 12 and len({o.name for o in OPS}) == len(OPS)
    by_family: dict[str, int] = {}
    for op in OPS:
        family, short = op.template.split("/")
        by_family[family] = by_family.get(family, 0) + 1
        fam = GENERATORS.create(family)
        assert isinstance(fam, ProceduralFamily) and fam.template(op.template).level <= 2
        # composed operations come from templates the shipped split trains on: a held-out composition asks for
        # trained skills only
        assert unit_split("template", op.template, FRACTION) == "train", op.template
    assert set(by_family) == {"files", "text", "data"} and min(by_family.values()) >= 4
    used = {op for cs in COMBINATIONS.values() for c in cs for op in c}
    assert used == {o.name for o in OPS}  # every operation takes part in some composition


def test_same_seed_same_bytes_other_seed_other_instance() -> None:
    for tid in ("compose/sort+head", "compose/csv-sort+csv-max", compositions(4)[7]):
        a, b = _gen(tid, 5), _gen(tid, 5)
        fa, fb = _files(a), _files(b)
        assert fa == fb and content_digest(fa) == content_digest(fb) and a.known_wrong == b.known_wrong
        c = _gen(tid, 6)
        assert c.env_files != a.env_files and c.name() != a.name()
    # the seed's own draw of a composition gives the same bytes as asking for it by name
    g = GENERATORS.create("compose")
    natural = g.generate(GenRequest(seed=11, difficulty=4))
    assert natural.template is not None
    assert natural == _gen(natural.template, 11)


def test_train_and_held_out_combinations_are_disjoint_and_cover_every_one() -> None:
    for level in (3, 4, None):
        train, held = set(train_compositions(FRACTION, level)), set(held_out_compositions(FRACTION, level))
        assert not train & held
        assert train | held == set(compositions(level))  # every operation is trained: nothing is left out
        assert held and len(held) < len(train)
    held_all = held_out_compositions(FRACTION)
    assert 0.1 < len(held_all) / len(compositions()) < 0.3
    # discover places a held-out composition on the holdout side, a train one on the train side
    for tid in held_all[:5] + train_compositions(FRACTION)[:5]:
        d = _gen(tid, 0, phrasing_side="train")
        split, _ = draft_placement(d, d.name(), FRACTION, "template", holdout_phrasings=1)
        assert split == ("holdout" if tid in held_all else "train"), tid
    # an operation from a held-out template keeps its compositions off both lists
    assert held_out_compositions(0.999) == [] and train_compositions(0.999) == []


def test_draw_held_out_is_a_held_out_composition_per_seed() -> None:
    held = set(held_out_compositions(FRACTION))
    drawn = [draw_held_out(s, FRACTION) for s in range(12)]
    assert all(d.template in held for d in drawn)
    assert len({d.template for d in drawn}) > 6
    assert draw_held_out(3, FRACTION) == drawn[3]
    pairs = [draw_held_out(s, FRACTION, level=3) for s in range(6)]
    assert all(d.difficulty == 3 and d.template in set(held_out_compositions(FRACTION, 3)) for d in pairs)
    d = draw_held_out(0, FRACTION, phrasing_side="holdout")
    assert d.phrasings is not None and d.phrasing == d.phrasings - 1


def test_the_cycle_seam_lists_the_contracts_held_out_compositions(workspace: WorkspaceContext) -> None:
    assert in_skill_compositions(workspace) == held_out_compositions(FRACTION)
    assert in_skill_compositions(workspace, 3) == held_out_compositions(FRACTION, 3)


def test_task_loads_records_template_family_and_ops_and_declares_reads(tmp_path: Path) -> None:
    for i, tid in enumerate(["compose/list+head", "compose/json-filter+sort+nested", "compose/copy+upper+delete"]):
        d = _gen(tid, i)
        root = tmp_path / d.name()
        for rel, text in _files(d).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        task = load_task(root)
        m = task.spec.metadata.rsi
        assert (m.family, m.template, m.generator, m.difficulty) == ("compose", tid, "compose", len(d.ops or []) + 1)
        assert m.ops == list(ops_of(tid)) and m.ops == d.ops
        assert task.spec.verifier.reads == d.reads and d.reads
        # every path the verifier opens is declared (or lies under a declared directory)
        opened = set(re.findall(r"(?:read|Path)\('(/app/[^']+)'\)", d.test_sh))
        assert opened and all(any(p == r or p.startswith(r + "/") for r in d.reads) for p in opened), (opened, d.reads)


def test_instruction_is_one_request_in_words_in_several_phrasings() -> None:
    for n in (2, 3):
        assert len(FRAMES[n]) >= 4
    tid = "compose/sort+head+copy"
    seen: dict[int, str] = {}
    for s in range(60):
        d = _gen(tid, s)
        assert d.phrasings == len(FRAMES[3]) and d.phrasing is not None
        seen.setdefault(d.phrasing, d.instruction)
        # backticks hold paths, never a command
        assert all(span.startswith("/app") for span in re.findall(r"`([^`]*)`", d.instruction)), d.instruction
        assert "\n" not in d.instruction.strip()
    assert len(seen) == len(FRAMES[3])
    # the side decides the frame: the held-out side only ever the last
    held = {_gen(tid, s, phrasing_side="holdout").phrasing for s in range(10)}
    train = {_gen(tid, s, phrasing_side="train").phrasing for s in range(30)}
    assert held == {len(FRAMES[3]) - 1} and train == set(range(len(FRAMES[3]) - 1))


def test_steps_share_paths_and_the_wrong_answers_do_part_of_the_work() -> None:
    g = ComposeGenerator()
    req = GenRequest(seed=2, difficulty=3, template="compose/sort+head")
    tpl, lv = g.draw(req)
    # the reference is one of the chains of the steps' shapes; the first does every step its template's first way
    chains = {g.draft(req, tpl, lv, k).solve_sh for k in range(len(lv.references))}
    assert len(chains) == 3 and _gen("compose/sort+head", 2).solve_sh in chains
    d = g.draft(req, tpl, lv, 0)
    body = d.solve_sh.split("cd /app\n", 1)[1].strip().splitlines()
    assert body[0].startswith("LC_ALL=C sort ") and body[1].startswith("head -n ")
    mid = body[0].split("> ")[1]
    assert body[1].split()[3] == mid  # step 1's output is step 2's input
    assert len(d.known_wrong) == 2 and d.known_wrong[0].rstrip().endswith(body[0])  # the first step only
    t = _gen("compose/csv-sort+copy+csv-sum", 1)
    assert len(t.known_wrong) == 3  # one step, two steps, and every step with one done carelessly


def _sample() -> list[str]:
    """A seeded sample: for every operation a pair with it, and 16 triples (every composition of seeds 0 and 1 was
    checked so once; the whole set takes minutes)."""
    pairs = random.Random(0).sample(compositions(3), len(compositions(3)))
    chosen = {next(p for p in pairs if op.name in p.removeprefix("compose/").split("+")) for op in OPS}
    return sorted(chosen) + random.Random(1).sample(compositions(4), 16)


@pytest.mark.timeout(600)
def test_reference_passes_and_nop_partial_and_careless_fail_on_the_host(tmp_path: Path) -> None:
    bad = []
    for i, tid in enumerate(_sample()):
        d = _gen(tid, i)
        where = tmp_path / str(i)
        if not _run_on_host(d, d.solve_sh, where / "oracle"):
            bad.append((tid, "oracle failed"))
        if _run_on_host(d, None, where / "nop"):
            bad.append((tid, "nop passed"))
        for k, w in enumerate(d.known_wrong):
            if _run_on_host(d, w, where / f"w{k}"):
                bad.append((tid, f"known-wrong {k} passed"))
    assert not bad, bad


def test_the_verifier_scores_each_step_apart_and_rewards_only_the_whole(tmp_path: Path) -> None:
    """reward.json holds a 1/0 per step whose effect is left to check, beside `reward`: the reference gets every
    step, doing nothing none, and a partial answer (the known-wrong that stops after the first step) its first step
    and no reward: which step an agent got wrong is measured, never rewarded."""
    import json

    seen = 0
    for i, tid in enumerate(_sample()):
        d = _gen(tid, i)
        where = tmp_path / str(i)
        assert _run_on_host(d, d.solve_sh, where / "oracle")
        full = json.loads((where / "oracle" / "logs" / "verifier" / "reward.json").read_text())
        steps = sorted(k for k in full if k.startswith("step_"))
        assert steps and full == {"reward": 1, **{k: 1 for k in steps}}, (tid, full)
        assert not _run_on_host(d, None, where / "nop")
        nop = json.loads((where / "nop" / "logs" / "verifier" / "reward.json").read_text())
        assert nop["reward"] == 0 and nop.keys() == full.keys(), (tid, nop)
        assert not _run_on_host(d, d.known_wrong[0], where / "first")  # the first step's commands only
        first = json.loads((where / "first" / "logs" / "verifier" / "reward.json").read_text())
        assert first["reward"] == 0, (tid, first)
        if "step_1" in first:
            seen += 1
            assert first["step_1"] == 1, (tid, first)
    assert seen >= 3
