"""Every template of the six procedural families: at least 4 distinct ones per family at levels 1 and 2,
byte-reproducible, 3+ phrasings drawn by the seed, the template id recorded in task.toml, and on the host
the oracle passes while doing nothing and every known-wrong answer fail (the Docker test repeats a sample)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from rsi.core.discover import TaskDraft, content_digest, render_task
from rsi.core.task import parse_task_toml
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import USERS, WORDS, ProceduralFamily, Template
from tests.unit.test_discover_rules import _run_on_host

load_generators()
FAMILIES = ["files", "text", "data", "logs", "pyfix", "pipeline", "shell"]


def _family(name: str) -> ProceduralFamily:
    g = GENERATORS.create(name)
    assert isinstance(g, ProceduralFamily)
    return g


TEMPLATES: list[tuple[str, Template]] = [(f, t) for f in FAMILIES for t in _family(f).templates]
IDS = [f"{f}/{t.id}" for f, t in TEMPLATES]


def _gen(family: str, t: Template, seed: int) -> TaskDraft:
    return _family(family).generate(GenRequest(seed=seed, difficulty=t.level, template=f"{family}/{t.id}"))


def _shape(script: str) -> str:
    """A solution with its names, words and numbers blanked: what is left is the operation."""
    names = "|".join(sorted((re.escape(w) for w in (*WORDS, *USERS)), key=len, reverse=True))
    return re.sub(r"\d+", "N", re.sub(rf"\b({names})\b", "W", script))


@pytest.mark.parametrize("family", FAMILIES)
def test_four_or_more_distinct_templates_at_levels_1_and_2(family: str) -> None:
    g = _family(family)
    assert len({t.id for t in g.templates}) == len(g.templates)  # ids unique within the family
    for level in (1, 2):
        tids = g.template_ids(level)
        assert len(tids) >= 4, (family, level, tids)
        drafts = [g.generate(GenRequest(seed=3, difficulty=level, template=tid)) for tid in tids]
        shapes = {_shape(d.solve_sh) for d in drafts}
        assert len(shapes) == len(tids), f"{family} level {level}: two templates solve the same way"
    # the seed draws among a level's templates: many seeds reach every one of them
    for level in (1, 2):
        seen = {g.generate(GenRequest(seed=s, difficulty=level)).template for s in range(60)}
        assert seen == set(g.template_ids(level))


@pytest.mark.parametrize(("family", "template"), TEMPLATES, ids=IDS)
def test_template_reproduces_byte_for_byte_and_records_its_id(family: str, template: Template) -> None:
    g, tid = _family(family), f"{family}/{template.id}"
    for seed in (0, 7, 123):
        a = g.generate(GenRequest(seed=seed, difficulty=template.level, template=tid))
        b = _family(family).generate(GenRequest(seed=seed, difficulty=template.level, template=tid))
        fa = render_task(a, name=a.name(), split="train", discovered_by=None)
        fb = render_task(b, name=b.name(), split="train", discovered_by=None)
        assert fa == fb and content_digest(fa) == content_digest(fb) and a.known_wrong == b.known_wrong
        assert a.template == tid and a.family == family and a.difficulty == template.level
        assert parse_task_toml(fa["task.toml"], "task.toml").metadata.rsi.template == tid
        assert a.known_wrong and all(w != a.solve_sh for w in a.known_wrong) and a.reads
    # the seed's own draw of this template gives the same bytes as asking for it by name
    natural = next(d for s in range(200)
                   if (d := g.generate(GenRequest(seed=s, difficulty=template.level))).template == tid)
    asked = g.generate(GenRequest(seed=natural.seed or 0, difficulty=template.level, template=tid))
    assert natural == asked


@pytest.mark.parametrize(("family", "template"), TEMPLATES, ids=IDS)
def test_template_has_four_or_more_phrasings_drawn_by_the_seed(family: str, template: Template) -> None:
    seen: dict[int, str] = {}
    count = 0
    for seed in range(80):
        lv = template.fn(random.Random(f"phrasing:{seed}"))
        which, count = lv.phrasing
        seen.setdefault(which, lv.instruction)
    # levels 1 and 2 (what the demo trains on) hold one phrasing out and keep 3+ to train on
    assert count >= (4 if template.level <= 2 else 3) and len(seen) == count, (family, template.id, lv.phrasing)
    # the phrasings differ in wording, not only in names: blank the names and compare
    assert len({_shape(text) for text in seen.values()}) == count
    # and not by one swapped word: any two differ in 6 or more words (as sets, names blanked)
    words = {i: set(re.findall(r"[a-z]+", _shape(t).lower())) for i, t in seen.items()}
    close = [(i, j, sorted(words[i] ^ words[j])) for i in words for j in words
             if i < j and len(words[i] ^ words[j]) < 6]
    assert not close, (family, template.id, close)


@pytest.mark.parametrize(("family", "template"), TEMPLATES, ids=IDS)
def test_oracle_passes_and_nop_and_every_known_wrong_fail_on_the_host(family: str, template: Template,
                                                                      tmp_path: Path) -> None:
    for seed in (0, 1):
        d = _gen(family, template, seed)
        where = tmp_path / str(seed)
        name = f"{family}/{template.id} s{seed}"
        assert _run_on_host(d, d.solve_sh, where / "oracle"), f"{name}: oracle failed"
        assert not _run_on_host(d, None, where / "nop"), f"{name}: nop passed"
        for i, w in enumerate(d.known_wrong):
            assert not _run_on_host(d, w, where / f"w{i}"), f"{name}: known-wrong {i} passed"
