"""The phrasing split: the last `promotion.holdout_phrasings` wordings of every template are the in-skill
holdout's only. Train tasks never use a held-out phrasing, no unseen (held-out) template ever has a train task
(over many seeds, every family, the requests discover really makes), a task records its phrasing and holdout
part in task.toml, a draft reproduces byte for byte from (generator, seed, level, template, phrasing side), the
demo's families span 40+ train templates and 8+ unseen ones, and holdout-only discover tops up either part."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi.core.discover import TaskDraft, draft_placement, phrasing_side, phrasings_on, render_task, unit_split
from rsi.core.promotion import min_tasks
from rsi.core.task import parse_task_toml
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.demo import DEMO_FAMILIES, DEMO_HOLDOUT_TEMPLATES, DEMO_IN_SKILL_TEMPLATES
from rsi.loop.cycle.split import holdout_deficits, holdout_part_units
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.loop.discover.requests import holdout_requests, plain_requests
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.bundled import bundled_contract
from rsi.store.files import load_contract, load_tasks
from tests.unit.test_template_holdout import TplFake

load_generators()
FRACTION, HELD = 0.2, 1


def _family(name: str) -> ProceduralFamily:
    g = GENERATORS.create(name)
    assert isinstance(g, ProceduralFamily)
    return g


def test_phrasing_side_holds_out_the_last_n() -> None:
    assert [phrasing_side(i, 4, 1) for i in range(4)] == ["train", "train", "train", "holdout"]
    assert [phrasing_side(i, 5, 2) for i in range(5)] == ["train", "train", "train", "holdout", "holdout"]
    assert {phrasing_side(i, 4, 0) for i in range(4)} == {"train"}
    assert phrasings_on("train", 4, 1) == [0, 1, 2] and phrasings_on("holdout", 4, 1) == [3]
    assert phrasings_on("any", 4, 1) == [0, 1, 2, 3] and phrasings_on("holdout", 4, 0) == []
    with pytest.raises(ValueError):
        phrasing_side(4, 4, 1)


def test_the_shipped_contract_holds_out_one_phrasing() -> None:
    assert load_contract(bundled_contract()).promotion.holdout_phrasings == HELD


def _placed(gname: str, greq: GenRequest) -> tuple[TaskDraft, str, str | None]:
    d = GENERATORS.create(gname).generate(greq)
    split, part = draft_placement(d, d.name(), FRACTION, "template", HELD)
    return d, split, part


def test_split_invariants_over_many_seeds_and_every_family() -> None:
    """The requests discover makes (plain ones, and holdout-only for either part), placed as discover places
    them: train tasks use train phrasings of train templates only; unseen templates have no train task; in-skill
    tasks are train templates in held-out phrasings."""
    fams = list(DEMO_FAMILIES)
    asked = []
    for seed in range(6):
        plain = DiscoverRequest(n=60, generators=fams, levels=[1, 2], seed=seed)
        asked += plain_requests(plain, fams, {}, 10, HELD)
        for part in ("unseen", "in_skill"):
            hreq = DiscoverRequest(n=2, generators=fams, levels=[1, 2], seed=seed, holdout_only=True, part=part)
            asked += (holdout_requests(hreq, fams, {}, 10, "template", FRACTION, set(), HELD) or [])[:60]
    sides: dict[str, set[str]] = defaultdict(set)
    parts: dict[str, set[str | None]] = defaultdict(set)
    for gname, greq in asked:
        d, split, part = _placed(gname, greq)
        assert d.template and d.phrasing is not None and d.phrasings is not None
        held_out = phrasing_side(d.phrasing, d.phrasings, HELD) == "holdout"
        unseen = unit_split("template", d.template, FRACTION) == "holdout"
        sides[d.template].add(split)
        parts[d.template].add(part)
        if split == "train":
            assert not held_out and not unseen, (d.template, d.phrasing)
        elif part == "in_skill":
            assert held_out and not unseen, (d.template, d.phrasing)
        else:
            assert part == "unseen" and unseen, (d.template, part)
        # what was asked for is what came out: train requests never yield the in-skill part, in-skill ones do
        if greq.phrasing_side == "train":
            assert part != "in_skill"
        if greq.phrasing_side == "holdout":
            assert part == "in_skill" and split == "holdout"
    assert len(asked) > 900
    unseen_tpl = {t for t, s in parts.items() if "unseen" in s}
    assert unseen_tpl and all(sides[t] == {"holdout"} and parts[t] == {"unseen"} for t in unseen_tpl)
    in_skill = {t for t, s in parts.items() if "in_skill" in s}
    assert len(in_skill) >= 8 and not in_skill & unseen_tpl
    assert {t for t, s in sides.items() if "train" in s} >= in_skill  # in-skill templates are trained on


def test_a_template_drawn_on_one_side_keeps_to_that_side() -> None:
    g = _family("shell")
    for tid in g.template_ids(1) + g.template_ids(2):
        lv = g.template(tid).level
        train = {g.generate(GenRequest(seed=s, difficulty=lv, template=tid, phrasing_side="train")).phrasing
                 for s in range(60)}
        held = {g.generate(GenRequest(seed=s, difficulty=lv, template=tid, phrasing_side="holdout")).phrasing
                for s in range(10)}
        # six phrasings: the last (a person's words) held out, the other five (one in a person's words) trained
        assert train == {0, 1, 2, 3, 4} and held == {5}, (tid, train, held)


def test_task_toml_records_phrasing_phrasings_and_holdout_part() -> None:
    g = _family("text")
    tid = next(t for t in g.template_ids(1) if unit_split("template", t, FRACTION) == "train")
    d, split, part = _placed("text", GenRequest(seed=4, difficulty=1, template=tid, phrasing_side="holdout",
                                                holdout_phrasings=HELD))
    assert (split, part) == ("holdout", "in_skill")
    meta = parse_task_toml(render_task(d, name=d.name(), split=split, discovered_by=None, holdout_part=part)
                           ["task.toml"], "task.toml").metadata.rsi
    assert (meta.phrasing, meta.phrasings, meta.split, meta.holdout_part, meta.template) == (
        5, 6, "holdout", "in_skill", tid)
    t, split, part = _placed("text", GenRequest(seed=4, difficulty=1, template=tid, phrasing_side="train",
                                                holdout_phrasings=HELD))
    meta = parse_task_toml(render_task(t, name=t.name(), split=split, discovered_by=None, holdout_part=part)
                           ["task.toml"], "task.toml").metadata.rsi
    assert meta.split == "train" and meta.holdout_part is None and meta.phrasing in range(5) and meta.phrasings == 6
    assert t.name() != d.name()  # one seed on both sides: two tasks, never one name


@pytest.mark.parametrize("family", ["files", "data", "pyfix", "shell"])
def test_a_draft_reproduces_byte_for_byte_per_side(family: str) -> None:
    for tid in _family(family).template_ids(1) + _family(family).template_ids(2):
        for side in ("train", "holdout", "any"):
            lv = _family(family).template(tid).level
            a = _family(family).generate(GenRequest(seed=11, difficulty=lv, template=tid, phrasing_side=side))
            b = _family(family).generate(GenRequest(seed=11, difficulty=lv, template=tid, phrasing_side=side))
            fa = render_task(a, name=a.name(), split="train", discovered_by=None)
            assert fa == render_task(b, name=b.name(), split="train", discovered_by=None) and a == b


def test_the_demo_spans_40_train_templates_and_8_unseen() -> None:
    train, unseen = set(), set()
    for fam in DEMO_FAMILIES:
        for lv in (1, 2):
            for tid in _family(fam).template_ids(lv):
                (unseen if unit_split("template", tid, FRACTION) == "holdout" else train).add(tid)
    assert len(train) >= 40 and len(unseen) >= DEMO_HOLDOUT_TEMPLATES, (len(train), len(unseen))
    assert len(train) >= DEMO_IN_SKILL_TEMPLATES and len({t.split("/")[0] for t in train}) == len(DEMO_FAMILIES)


# -- discover, for real (fake sandbox) ---------------------------------------------------------------


class PhrasedFake(TplFake):
    """TplFake's tasks worded 4 ways, the wording drawn on the requested side."""

    name = "phrasedfake"

    def generate(self, req: GenRequest) -> TaskDraft:
        d = super().generate(req)
        allowed = phrasings_on(req.phrasing_side, 4, req.holdout_phrasings)
        i = allowed[random.Random(req.seed).randrange(len(allowed))]
        return d.model_copy(update={"generator": self.name, "phrasing": i, "phrasings": 4,
                                    "instruction": f"wording {i}: {d.instruction}"})


@pytest.fixture
def ws(workspace: WorkspaceContext) -> Iterator[WorkspaceContext]:
    GENERATORS.add("phrasedfake", PhrasedFake)
    yield workspace


def test_discover_keeps_held_out_phrasings_off_train_and_tops_up_in_skill(
        ws: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    plain = discover(ws, DiscoverRequest(n=12, generators=["phrasedfake"], attempts=1, probe_agent="oracle",
                                         band=(0.0, 1.0), seed=3), provider=provider)
    assert plain.candidates
    part_of = {t.name: t.spec.metadata.rsi for t in load_tasks([ws.ws.tasks_dir])}
    assert any(m.split == "train" for m in part_of.values())
    for m in part_of.values():
        assert m.phrasings == 4 and m.phrasing is not None
        assert (m.split, m.holdout_part) in (("train", None), ("holdout", "unseen"))  # plain asks train words
        assert m.split != "train" or m.phrasing < 3
    need = min_tasks(ws.contract.promotion.alpha)
    assert holdout_deficits(ws, None, 3)["in_skill"] == need  # the paired test's minimum is a target's floor
    more = discover(ws, DiscoverRequest(n=3, generators=["phrasedfake"], holdout_only=True, part="in_skill",
                                        attempts=1, probe_agent="oracle", seed=9), provider=provider)
    admitted = [c for c in more.candidates if c.state == "admitted"]
    assert len(admitted) == 3 and all(c.split == "holdout" for c in admitted)
    tasks = {t.name: t for t in load_tasks([ws.ws.tasks_dir])}
    for c in admitted:
        m = tasks[c.name].spec.metadata.rsi
        assert (m.holdout_part, m.phrasing) == ("in_skill", 3)
        assert unit_split("template", m.template or "", FRACTION) == "train"
        assert 'holdout_part = "in_skill"' in Path(tasks[c.name].path, "task.toml").read_text()
    assert len(holdout_part_units(ws)["in_skill"]) == 3
    assert holdout_deficits(ws, None, 3)["in_skill"] == need - 3
    assert holdout_deficits(ws, None, None)["in_skill"] == 0  # no in-skill target: no top-up


def test_cli_part_is_checked(workspace: WorkspaceContext) -> None:
    from rsi.cli.app import app

    root = str(workspace.ws.root)
    r = CliRunner().invoke(app, ["-w", root, "discover", "--holdout-only", "--part", "both"])
    assert r.exit_code == 2 and "--part" in r.output and "in_skill" in r.output, r.output
    r = CliRunner().invoke(app, ["-w", root, "discover", "--part", "in_skill"])
    assert r.exit_code == 2 and "--holdout-only" in r.output, r.output
