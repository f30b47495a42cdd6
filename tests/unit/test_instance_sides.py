"""Instances independent across sides (issue 46 item 2): a procedural instance's names, data and reference come from
a stream keyed by the side it is drawn for (train, a holdout part, a suite) and the cycle, so one (template, seed,
level) never gives a train task and a held-out task that differ only in wording; `(generator, seed, difficulty,
side, cycle)` still reproduces a task byte for byte; and `rsi update` refuses a train sample whose task equals a
holdout or suite task in environment and reference, and reports every in-skill task's nearest train reference."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rsi.core.discover import TaskDraft, render_task
from rsi.core.leakage import (
    SampleFacts,
    SealedFacts,
    find_leaks,
    instance_digest,
    nearest_references,
    reference_text,
)
from rsi.core.task import HoldoutPart, InstanceSide, parse_task_toml
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.loop.discover.requests import holdout_requests, plain_requests, train_template_requests
from rsi.loop.update.leakage import LeakageRefused
from rsi.loop.update.phase import UpdateRequest, run_update
from rsi.store.files import load_task
from tests.taskgen import DOCKERFILE, make_task
from tests.updatekit import T, add_trials, workspace

SIDES: tuple[InstanceSide, ...] = ("train", "in_skill", "unseen", "suite")
SEEDS = range(12)
MAX_IDENTICAL = 0.02  # share of (template, seed, level) whose two sides coincide in environment and reference


def _families() -> list[ProceduralFamily]:
    load_generators()
    return [g for n in GENERATORS.names() if isinstance(g := GENERATORS.create(n), ProceduralFamily)
            and type(g).__module__.startswith("rsi.")]  # the shipped families, not a test's fake


def _draw(g: ProceduralFamily, tid: str, seed: int, side: InstanceSide, cycle: int = 0) -> TaskDraft | None:
    lv = g.template(tid).level
    phrasing = "holdout" if side == "in_skill" else "train"
    try:
        return g.generate(GenRequest(seed=seed, difficulty=lv, template=tid, phrasing_side=phrasing,
                                     holdout_phrasings=1, side=side, cycle=cycle))
    except GeneratorError:
        return None


def _same(a: TaskDraft, b: TaskDraft) -> bool:
    return a.solve_sh == b.solve_sh and a.env_files == b.env_files


def _identical_share(other: InstanceSide, cycle_b: int = 0) -> tuple[int, int, dict[str, int]]:
    same = total = 0
    by_template: dict[str, int] = {}
    for g in _families():
        for tid in g.template_ids():
            for seed in SEEDS:
                a, b = _draw(g, tid, seed, "train"), _draw(g, tid, seed, other, cycle_b)
                if a is None or b is None:
                    continue
                total += 1
                if _same(a, b):
                    same += 1
                    by_template[tid] = by_template.get(tid, 0) + 1
    return same, total, by_template


@pytest.mark.parametrize("other", ["in_skill", "unseen", "suite"])
def test_one_template_seed_and_level_gives_other_instances_on_the_train_and_a_sealed_side(other: InstanceSide) -> None:
    same, total, by_template = _identical_share(other)
    assert total > 500, "every procedural template drawn on both sides for many seeds"
    # before side-keyed streams: 88 % (1395 of 1580 at 20 seeds) had the same solve.sh and environment
    assert same / total <= MAX_IDENTICAL, (same, total, by_template)


def test_another_cycle_draws_other_instances_on_the_same_side() -> None:
    same, total, by_template = _identical_share("train", cycle_b=1)
    assert total > 500 and same / total <= MAX_IDENTICAL, (same, total, by_template)


def test_a_task_reproduces_byte_for_byte_from_generator_seed_level_side_and_cycle() -> None:
    for g in _families():
        for tid in g.template_ids()[:4]:
            for side in SIDES:
                a, b = _draw(g, tid, 7, side, cycle=3), _draw(g, tid, 7, side, cycle=3)
                if a is None or b is None:
                    continue
                assert a == b
                files = render_task(a, name=a.name(), split="train", discovered_by=None)
                assert files == render_task(b, name=b.name(), split="train", discovered_by=None)
                meta = parse_task_toml(files["task.toml"], "task.toml").metadata.rsi
                assert (meta.generator, meta.seed, meta.difficulty, meta.instance_side, meta.instance_cycle) == (
                    g.name, 7, g.template(tid).level, side, 3)
                # what task.toml records is enough to draw it again
                again = g.generate(GenRequest(seed=meta.seed or 0, difficulty=meta.difficulty, template=meta.template,
                                              phrasing_side="holdout" if side == "in_skill" else "train",
                                              holdout_phrasings=1, side=meta.instance_side or "train",
                                              cycle=meta.instance_cycle or 0))
                assert render_task(again, name=again.name(), split="train", discovered_by=None) == files


def test_one_seed_on_two_sides_gives_two_names() -> None:
    g = next(f for f in _families() if f.name == "text")
    a, b = _draw(g, "text/count-lines", 4, "train"), _draw(g, "text/count-lines", 4, "unseen")
    assert a is not None and b is not None and a.name() != b.name()


# -- the requests a discover job makes carry its side and cycle ----------------------------------


@dataclass
class _Asked:
    n: int = 4
    families: list[str] = field(default_factory=list)
    holdout_only: bool = False
    part: HoldoutPart = "unseen"
    difficulty: int | None = None
    levels: list[int] = field(default_factory=lambda: [1])
    seed: int | None = 0
    cycle: int = 2


def test_discover_requests_name_the_side_they_draw_for_and_the_cycle() -> None:
    load_generators()
    gens = ["text", "files"]
    plain = plain_requests(_Asked(), gens, {}, 4, holdout_phrasings=1)
    assert plain and {(r.side, r.cycle) for _, r in plain} == {("train", 2)}
    aimed = train_template_requests(_Asked(), gens, {}, 4, "template", 0.3, holdout_phrasings=1)
    assert aimed and {(r.side, r.cycle) for _, r in aimed} == {("train", 2)}
    for part in ("unseen", "in_skill"):
        held = holdout_requests(_Asked(holdout_only=True, part=part), gens, {}, 4, "template", 0.3, set(),
                                holdout_phrasings=1)
        assert held and {(r.side, r.cycle) for _, r in held} == {(part, 2)}
        by_task = plain_requests(_Asked(holdout_only=True, part=part), gens, {}, 4, holdout_phrasings=1)
        assert {r.side for _, r in by_task} == {part}


def test_a_train_seed_equal_to_an_in_skill_seed_still_draws_another_instance() -> None:
    """The issue's case: `rsi cycle --seed 15887` after a default first cycle asked train tasks for the seeds the
    first cycle's in-skill top-up had used; the instances coincided but for wording. Now they do not."""
    load_generators()
    gens = ["text", "files", "data"]
    train = train_template_requests(_Asked(n=24, seed=15887, cycle=2), gens, {}, 4, "template", 0.3, 1)
    held = holdout_requests(_Asked(n=24, seed=15887, cycle=1, holdout_only=True, part="in_skill"), gens, {}, 4,
                            "template", 0.3, set(), holdout_phrasings=1)
    assert train and held
    drawn_train = {(r.template, r.seed): GENERATORS.create(g).generate(r) for g, r in train}
    same = checked = 0
    for g, r in held[:24]:
        t = drawn_train.get((r.template, r.seed))
        if t is None:
            continue
        checked += 1
        same += _same(t, GENERATORS.create(g).generate(r))
    assert checked >= 8 and same == 0


# -- update: refuse an equal instance, report the nearest train reference -------------------------


def _task(ctx: WorkspaceContext, root: Path, name: str, *, template: str, split: str = "train",
          part: str | None = None, phrasing: int = 0, solve: str, data: str = "a\nb\n") -> str:
    toml = (f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata.rsi]\nfamily = "{template.split("/")[0]}"\n'
            f'template = "{template}"\nsplit = "{split}"\nphrasing = {phrasing}\nphrasings = 4\n'
            + (f'holdout_part = "{part}"\n' if part else "")
            + '\n[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n[environment]\ncpus = 1\n')
    d = make_task(root, name, toml=toml, solve=solve, instruction=f"Task {name}, worded its own way.\n",
                  dockerfile=DOCKERFILE + "COPY in.txt /app/in.txt\n")
    (d / "environment" / "in.txt").write_text(data)
    return load_task(d).digest


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[WorkspaceContext]:
    c = workspace(tmp_path)
    yield c
    c.store.close()


def test_update_refuses_a_train_task_equal_to_a_holdout_task_naming_both(ctx: WorkspaceContext) -> None:
    tasks = ctx.ws.tasks_dir
    _task(ctx, tasks, "held-skill", template="text/count", split="holdout", part="in_skill", phrasing=3,
          solve="wc -l < /app/in.txt > /app/n.txt\n")
    twin = _task(ctx, tasks, "train-twin", template="text/count", solve="wc -l < /app/in.txt > /app/n.txt\n")
    other = _task(ctx, tasks, "train-other", template="text/count", solve="wc -l < /app/in.txt > /app/n.txt\n",
                  data="x\ny\nz\n")
    ids = add_trials(ctx, [T("train-twin", 1, 1.0, task_digest=twin), T("train-other", 1, 1.0, task_digest=other)])
    with pytest.raises(LeakageRefused) as err:
        run_update(UpdateRequest(backend="export", dry_run=True), ctx.ws.root)
    msg = str(err.value)
    assert "same_instance" in msg and "train-twin" in msg and "holdout task held-skill" in msg and ids[0] in msg
    assert ids[1] not in msg, "another environment is another task, whatever its reference"
    assert err.value.exit_code == 2


def test_update_refuses_a_train_task_equal_to_a_suite_task(ctx: WorkspaceContext) -> None:
    assert ctx.contract.promotion.suites == ["suites/starter"]
    _task(ctx, ctx.ws.root / "suites" / "starter", "suite-count", template="suite/count",
          solve="wc -l < /app/in.txt > /app/n.txt\n")
    twin = _task(ctx, ctx.ws.tasks_dir, "train-twin", template="text/count",
                 solve="wc -l < /app/in.txt > /app/n.txt\n")
    add_trials(ctx, [T("train-twin", 1, 1.0, task_digest=twin)])
    with pytest.raises(LeakageRefused, match="suite task suite-count"):
        run_update(UpdateRequest(backend="export", dry_run=True), ctx.ws.root)


def test_update_reports_every_in_skill_tasks_nearest_train_reference(ctx: WorkspaceContext) -> None:
    tasks = ctx.ws.tasks_dir
    for name, solve in (("skill-sort", "sort /app/in.txt > /app/sorted.txt\n"),
                        ("skill-head", "head -n 2 /app/in.txt > /app/top.txt\n")):
        _task(ctx, tasks, name, template="text/" + name.split("-")[1], split="holdout", part="in_skill",
              phrasing=3, solve=solve, data="q\nr\n")
    a = _task(ctx, tasks, "train-sort", template="text/sort", solve="sort /app/in.txt > /app/out.txt\n")
    b = _task(ctx, tasks, "train-count", template="text/count", solve="wc -l < /app/in.txt > /app/n.txt\n")
    add_trials(ctx, [T("train-sort", 1, 1.0, task_digest=a), T("train-count", 1, 1.0, task_digest=b)])
    out = run_update(UpdateRequest(backend="export"), ctx.ws.root)
    leak = out.selection["leakage"]
    near = {n["task"]: n for n in leak["in_skill_nearest_train_reference"]}
    assert set(near) == {"skill-sort", "skill-head"}
    assert near["skill-sort"]["train_task"] == "train-sort" and 0.7 < near["skill-sort"]["similarity"] < 1.0
    assert leak["in_skill_max_similarity"] == near["skill-sort"]["similarity"]
    assert leak["in_skill_max_similarity_with"] == "skill-sort ~ train-sort"
    manifest = json.loads((Path(out.dataset["path"]).parent / "manifest.json").read_text())
    assert "in_skill_nearest_train_reference" in json.dumps(manifest), "the dataset's provenance carries it"


# -- pure ------------------------------------------------------------------------------------------


def test_the_equal_instance_rule_and_the_nearest_reference_are_pure() -> None:
    inst = instance_digest("env-1", b"#!/bin/bash\nwc -l < a > b\n")
    assert inst != instance_digest("env-2", b"#!/bin/bash\nwc -l < a > b\n")
    assert inst != instance_digest("env-1", b"#!/bin/bash\nwc -w < a > b\n")
    sealed = SealedFacts(sealed_instances={inst: "holdout task h"})
    report = find_leaks([SampleFacts("s1", "d1", "text/count", 0, 4, task_name="t1", instance=inst),
                         SampleFacts("s2", "d2", "text/count", 0, 4, task_name="t2", instance="other")], sealed)
    assert [(x.sample_id, x.rule) for x in report.leaks] == [("s1", "same_instance")]
    assert "train task t1 equals holdout task h" in str(report.leaks[0])
    near = nearest_references({"h": reference_text(["sort  /app/a.txt > /app/b.txt"])},
                              {"t1": "wc -l < /app/a.txt > /app/b.txt", "t2": "sort /app/a.txt > /app/c.txt"})
    assert [(n.task, n.train_task) for n in near] == [("h", "t2")] and 0.8 < near[0].similarity < 1
    assert nearest_references({"h": "x"}, {})[0].train_task is None


def test_each_cycle_records_its_number_and_hands_it_to_discover(ctx: WorkspaceContext) -> None:
    from rsi.loop.cycle.phase import CycleRequest, _Cycle, _open_job
    from rsi.loop.hooks import CycleHooks

    numbers = []
    for _ in range(2):
        job_id, gen, split = _open_job(ctx, CycleRequest(budget=400))
        run = _Cycle(ctx, CycleRequest(budget=400), CycleHooks(), job_id, gen, split)
        numbers.append((ctx.store.get_job(job_id).params["cycle"], run.number))
        ctx.store.finish_job(job_id, "done")
    assert numbers == [(1, 1), (2, 2)]
