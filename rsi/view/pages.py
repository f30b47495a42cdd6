"""What each viewer page shows, assembled from the read-only store and the workspace's files (no HTTP here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsi.core.errors import NotFoundError
from rsi.core.promotion import PART_LABEL
from rsi.report.rates import COUNTS, common_names, gate_figures, gate_scope, look_scope, role_words
from rsi.store.queries_rates import HOLDOUT_PARTS, PassTally, RateScope
from rsi.store.queries_view import FILTERS, SORTS, TrialQuery
from rsi.view.context import ViewContext
from rsi.view.trajectory import align, read_trajectory, verifier_output


def trial_query(params: dict[str, str], ids: tuple[str, ...] | None = None) -> TrialQuery:
    """The trial list a URL's query parameters describe (unknown parameters are ignored)."""
    kw: dict[str, Any] = {k: params[k] for k in FILTERS if params.get(k)}
    sort = params.get("sort") or "newest"
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
    return TrialQuery(**kw, ids=ids, sort=sort, desc=params.get("dir", "desc") != "asc",
                      after=params.get("after") or None, before=params.get("before") or None)


def generations(ctx: ViewContext) -> dict[str, Any]:
    """The lineage tree, each generation's manifest fields and events, and every promotion's gate table."""
    store = ctx.store
    gens = store.list_generations()
    events: dict[str, list[Any]] = {}
    for ev in store.generation_events():
        events.setdefault(ev.generation, []).append(ev)
    promotions = []
    for job in store.promote_jobs():
        v = job.get("verdict")
        if not v:
            continue
        promotions.append({"job": job["id"], "candidate": job.get("candidate"), "parent": job.get("parent"),
                           "passed": bool(v.get("passed")), "failing": v.get("failing") or [],
                           "gates": v.get("gates") or [], "parent_rate": v.get("parent_rate"),
                           "candidate_rate": v.get("candidate_rate"), "p_value": v.get("p_value"),
                           "unit": v.get("unit"), "suite": v.get("suite"), "agent": job.get("agent"),
                           "in_template": v.get("in_template"), "parts": _verdict_parts(v),
                           "sequential": v.get("sequential")})
    children: dict[str | None, list[str]] = {}
    for g in gens:
        children.setdefault(g.parent, []).append(g.id)
    order: list[tuple[int, str]] = []

    def walk(gid: str, depth: int) -> None:
        order.append((depth, gid))
        for c in children.get(gid, []):
            walk(c, depth + 1)

    known = {g.id for g in gens}
    for g in gens:
        if g.parent is None or g.parent not in known:
            walk(g.id, 0)
    return {"gens": {g.id: g for g in gens}, "tree": order, "events": events, "promotions": promotions,
            "rates": rates_per_generation(ctx, promotions)}


def _verdict_parts(v: dict[str, Any]) -> list[dict[str, Any]]:
    """A recorded verdict's holdout parts (both, or the one a holdout naming no part has), labelled."""
    return [{**x, "label": f"{PART_LABEL.get(x.get('part', ''), x.get('part', ''))} holdout",
             "how": role_words(x)} for x in v.get("parts") or [] if isinstance(x, dict) and x.get("role")]


def rates_per_generation(ctx: ViewContext, promotions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """generation -> {in_skill, unseen, no_forgetting, suite, in_template, holdout, parts, ...}: the chart's series
    and the table beside it. Each generation at its latest promotion: its model arms' pass rate per holdout part and
    on the suite, over the tasks both sides of that promotion counted (the parts as they were then), through the one
    computation (pass_tally, the gate's scope) and the gate's own per-part functions (rsi.report.rates.gate_figures),
    so each figure is the one the gate used. `holdout` pools the parts (labelled so: no gate uses it on a
    holdout with parts); in-template is the gate's recorded figure (it is reported, never gated)."""
    store = ctx.store
    tallies: dict[tuple[str, tuple[tuple[str, int], ...]], PassTally] = {}
    base = gate_scope(ctx, ("holdout", "suite"))

    def tally(gen: str, scope: RateScope) -> PassTally:
        key = (gen, tuple(sorted(scope.per_task.items())))
        if key not in tallies:
            tallies[key] = store.pass_tally(scope, generation=gen)
        return tallies[key]

    out: dict[str, dict[str, Any]] = {}
    for p in promotions:
        pair = [g for g in (p.get("parent"), p.get("candidate")) if g]
        if len(pair) != 2:
            continue
        it = p.get("in_template") or {}
        # the trials per task the deciding look counted (a promote that stopped early saw fewer)
        scope = look_scope(base, {"sequential": p.get("sequential")}, ctx.contract.promotion)
        ts = [tally(g, scope) for g in pair]
        figs = gate_figures(ctx, ts[0], ts[1]).rows()
        common = [n for n in common_names(ts[0], ts[1]) if ts[0].tasks[n].part == "holdout"]
        for gid, t, side, key in zip(pair, ts, ("parent", "candidate"), ("a", "b"), strict=True):
            row = out.setdefault(gid, {"holdout": None, "in_skill": None, "unseen": None, "no_forgetting": None,
                                       "suite": None, "in_template": None, "holdout_tasks": 0,
                                       "holdout_counted": "", "covers": "", "parts": {}})
            other = pair[1] if gid == pair[0] else pair[0]
            row["parts"] = {}
            for f in figs:
                rate = f[f"{key}_rate"]
                row[f["part"]] = rate
                row["parts"][f["part"]] = {"rate": rate, "counted": f"{f[f'{key}_passes']}/{f[f'{key}_trials']}",
                                           "tasks": f["tasks"], "label": f["label"], "how": role_words(f)}
            if common:
                ps, n = t.over(common)
                row.update(holdout=ps / n if n else None, holdout_tasks=len(common), holdout_counted=f"{ps}/{n}",
                           covers=t.covers(), among=f"gen:{other}")
            if it.get(side) is not None:
                row["in_template"] = float(it[side])
    return dict(sorted(out.items()))


@dataclass
class TrialDetail:
    row: Any
    task: Any | None
    header: dict[str, Any]
    steps: list[Any]
    problem: str | None
    verifier: dict[str, str]
    config_yaml: str | None
    attribution: dict[str, Any] | None
    cited_by: list[dict[str, Any]]
    trial_dir: Path
    result_extra: dict[str, Any]


def trial_detail(ctx: ViewContext, trial_id: str) -> TrialDetail:
    store = ctx.store
    row = store.get_trial(trial_id)
    task = store.task_row(row.task_digest)
    tdir = ctx.ws.resolve(row.trial_dir)
    header, steps, problem = read_trajectory(tdir / "trajectory.json")
    cfg = None
    if row.harness_config_digest:
        try:
            cfg = store.get_config(row.harness_config_digest).canonical_yaml
        except NotFoundError:
            cfg = None
    extra: dict[str, Any] = {}
    try:
        extra = dict(json.loads((tdir / "result.json").read_text()).get("extra") or {})
    except (OSError, ValueError, AttributeError):
        extra = {}
    return TrialDetail(row, task, header, steps, problem, verifier_output(tdir), cfg,
                       store.attribution_of(row.task_digest, row.generation), store.cited_by(row.id), tdir, extra)


TASK_SETS = ("holdout", *HOLDOUT_PARTS, "suite", "train")  # a compare grid's (and a counted list's) task sets


def _parts(split: str | None) -> tuple[tuple[str, ...] | None, str | None]:
    """(task-set parts, holdout part) of a `split=` value: a part, a holdout part (in_skill | unseen), or all."""
    if split and split not in TASK_SETS:
        raise ValueError(f"split must be one of {', '.join(TASK_SETS)} or empty (all); got {split!r}")
    if split in HOLDOUT_PARTS:
        return ("holdout",), split
    return ((split,) if split else None), None


def tally_of(ctx: ViewContext, counted: str, split: str | None, family: str | None) -> PassTally:
    """The tally a compare-grid column shows: `gen:<id>` (the generation's model arms, own config), `arm:<id>`
    (one arm) or `ctl:<agent>` (one control agent, any generation), over `split` (a part, or one holdout part:
    in_skill | unseen) and `family`."""
    parts, holdout_part = _parts(split)
    scope = gate_scope(ctx, parts, family, holdout_part)
    kind, _, value = counted.partition(":")
    if not value or kind not in ("gen", "arm", "ctl"):
        raise ValueError(f"counted must be gen:<generation>, arm:<arm id> or ctl:<agent>; got {counted!r}")
    if kind == "gen":
        return ctx.store.pass_tally(scope, generation=value)
    if kind == "arm":
        return ctx.store.pass_tally(scope, arm=value)
    return ctx.store.pass_tally(scope, agents=[value])


def compare_grid(ctx: ViewContext, by: str, split: str | None, family: str | None,
                 cols: list[str]) -> dict[str, Any]:
    """Tasks x generations (their model arms, each under its own config: the promote gate's figure) or tasks x
    arms (generation x config x agent, controls included); per cell passes / counted trials, each cell linking
    to exactly those trials. Controls get their own columns beside the generations (a task's oracle pass says it
    is valid; it is no score). Columns limited to `cols` when given."""
    if by not in ("generation", "arm"):
        raise ValueError(f"by must be generation or arm; got {by!r}")
    store = ctx.store
    parts, holdout_part = _parts(split)
    scope = gate_scope(ctx, parts, family, holdout_part)
    model = store.model_agents()
    if by == "generation":
        all_cols = [g.id for g in store.list_generations()]
    else:
        all_cols = [a["id"] for a in store.arms_in(scope.parts if scope.parts and "suite" not in scope.parts
                                                   else None)]
    shown = [c for c in cols if c in all_cols] if cols else all_cols
    tallies = {c: (store.pass_tally(scope, generation=c) if by == "generation" else store.pass_tally(scope, arm=c))
               for c in shown}
    if by == "generation":  # a generation with nothing counted in this task set is no column
        tallies = {c: t for c, t in tallies.items() if t.tasks}
        shown = [c for c in shown if c in tallies]
    controls: dict[str, PassTally] = {}
    if by == "generation":
        for agent in store.control_agents():
            t = store.pass_tally(scope, agents=[agent])
            if t.tasks:
                controls[agent] = t
    heads = {c: {"counted": f"{'gen' if by == 'generation' else 'arm'}:{c}", "covers": t.covers(),
                 "role": "model" if any(a in model for a in t.agents) else "control"} for c, t in tallies.items()}
    tasks = sorted({n for t in [*tallies.values(), *controls.values()] for n in t.tasks})
    grid: dict[str, dict[str, dict[str, Any]]] = {}
    for n in tasks:
        row: dict[str, dict[str, Any]] = {}
        for c, t in [*tallies.items(), *((f"ctl:{a}", t) for a, t in controls.items())]:
            x = t.tasks.get(n)
            if x is not None:
                row[c] = {"passes": x.passes, "graded": x.graded, "infra": x.infra, "left_out": x.left_out,
                          "rate": x.rate}
        grid[n] = row
    # the headline row: tasks every generation column counted (what a paired comparison, and the gate, uses)
    common = sorted(n for n in tasks if all(n in t.tasks and t.tasks[n].graded for t in tallies.values()))
    totals = {}
    for c, t in tallies.items():
        p, g = t.over(common)
        pa, ga = t.over()
        totals[c] = {"passes": p, "graded": g, "rate": p / g if g else None,
                     "all_passes": pa, "all_graded": ga, "all_rate": pa / ga if ga else None,
                     "all_tasks": sum(1 for x in t.tasks.values() if x.graded)}
    ctl_totals = {f"ctl:{a}": dict(zip(("passes", "graded"), t.over(), strict=True)) for a, t in controls.items()}
    # per holdout part, over the common tasks of that part: what the gate pools for that part (a holdout naming
    # no part has one, `unseen`, which is the holdout row itself: no rows then)
    held = {n: x.holdout_part for t in tallies.values() for n, x in t.tasks.items() if x.holdout_part}
    present = [p for p in HOLDOUT_PARTS if p in held.values()]
    part_totals: dict[str, dict[str, Any]] = {}
    if holdout_part is None and present != ["unseen"]:
        for part in present:
            names = [n for n in common if held.get(n) == part]
            cells = {}
            for c, t in tallies.items():
                p, g = t.over(names)
                cells[c] = {"passes": p, "graded": g, "rate": p / g if g else None}
            part_totals[part] = {"label": f"{PART_LABEL[part]} holdout", "tasks": len(names), "cells": cells}
    return {"by": by, "cols": shown, "all_cols": all_cols, "grid": grid, "totals": totals, "heads": heads,
            "controls": [f"ctl:{a}" for a in controls], "ctl_totals": ctl_totals, "common": common,
            "among": ",".join(h["counted"] for h in heads.values()), "parts": TASK_SETS,
            "part_labels": {p: f"holdout: {PART_LABEL[p]} part" for p in HOLDOUT_PARTS},
            "part_totals": part_totals, "task_parts": held, "part_names": dict(PART_LABEL), "pooled": bool(part_totals),
            "scope": scope.describe(), "counts": COUNTS}


def counted_ids(ctx: ViewContext, params: dict[str, str],
                ids: tuple[str, ...] | None) -> tuple[tuple[str, ...] | None, dict[str, Any] | None]:
    """A trial list's `counted=` (a compare cell: gen:<id>, arm:<id> or ctl:<agent>, over `part` and the list's
    family and task): the ids that cell counted, intersected with `ids` (a search's hits); and what to say
    about them. Without `counted`: `ids` as given."""
    counted = params.get("counted")
    if not counted:
        return ids, None
    part, family = params.get("part") or None, params.get("family") or None
    tally = tally_of(ctx, counted, part, family)
    task = params.get("task") or None
    names: list[str] | None = [task] if task else None
    if params.get("among"):  # a total over the tasks every one of these columns counted (the grid's headline)
        others = [tally_of(ctx, c, part, family) for c in params["among"].split(",") if c]
        names = sorted(n for n in tally.tasks if all(n in o.tasks and o.tasks[n].graded for o in others)
                       and (task is None or n == task))
    got = tally.counted_ids(names)
    keep = tuple(got) if ids is None else tuple(i for i in got if i in set(ids))
    p, n = tally.over(names)
    return keep, {"column": tally.column, "covers": tally.covers(), "scope": tally.scope.describe(),
                  "passes": p, "graded": n, "task": task}


def step_diff(ctx: ViewContext, task: str, a: str, b: str, by: str, ta: str | None, tb: str | None,
              split: str | None = "holdout") -> dict[str, Any]:
    """Two trajectories of `task` (under A and under B) aligned on their actions; trial choices for each side:
    the trials the compare grid's cells counted (a generation: its model arms under its own config)."""
    store = ctx.store
    kind = "gen" if by == "generation" else "arm"
    if by not in ("generation", "arm"):
        raise ValueError(f"by must be generation or arm; got {by!r}")
    choices = []
    for col in (a, b):
        ids = tally_of(ctx, f"{kind}:{col}", split, None).counted_ids([task])
        if not ids and split:  # the task is in another part: its counted trials there
            ids = tally_of(ctx, f"{kind}:{col}", None, None).counted_ids([task])
        choices.append(store.trial_choices(task, ids=ids))
    ca, cb = choices
    pick_b = next((t for t in cb if t["id"] == tb), cb[0] if cb else None)
    pick_a = next((t for t in ca if t["id"] == ta), None)
    if pick_a is None and ca:  # by default the A attempt whose outcome differs from B's (what changed)
        pick_a = next((t for t in ca if pick_b is not None and bool(t["passed"]) != bool(pick_b["passed"])), ca[0])
    sides: dict[str, dict[str, Any]] = {}
    for name, pick in (("a", pick_a), ("b", pick_b)):
        if pick is None:
            sides[name] = {"trial": None, "steps": [], "problem": f"no finished trial of {task} under "
                                                                  f"{a if name == 'a' else b}"}
            continue
        _, steps, problem = read_trajectory(ctx.ws.resolve(pick["trial_dir"]) / "trajectory.json")
        sides[name] = {"trial": pick, "steps": steps, "problem": problem}
    rows = align(sides["a"]["steps"], sides["b"]["steps"])
    return {"task": task, "a": a, "b": b, "by": by, "choices": {"a": ca, "b": cb}, "sides": sides, "rows": rows,
            "counts": {k: sum(1 for r in rows if r.kind == k) for k in ("same", "changed", "only_a", "only_b")}}


def default_pair(ctx: ViewContext) -> tuple[str, str] | None:
    """The pair the Diff page opens on: the newest promotion's parent and candidate, else the newest two."""
    promos = [p for p in ctx.store.promote_jobs() if p.get("candidate") and p.get("parent")]
    if promos:
        return str(promos[-1]["parent"]), str(promos[-1]["candidate"])
    gens = ctx.store.list_generations()
    if len(gens) >= 2:
        return gens[-1].parent or gens[-2].id, gens[-1].id
    return None


def config_text(ctx: ViewContext, digest: str) -> str:
    try:
        return ctx.store.get_config(digest).canonical_yaml
    except NotFoundError:
        return yaml.safe_dump({"missing": digest})


__all__ = ["TASK_SETS", "TrialDetail", "compare_grid", "config_text", "counted_ids", "default_pair", "generations",
           "rates_per_generation", "step_diff", "tally_of", "trial_detail", "trial_query"]
