"""What each viewer page shows, assembled from the read-only store and the workspace's files (no HTTP here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsi.core.errors import NotFoundError
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
                           "unit": v.get("unit"), "suite": v.get("suite")})
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
            "rates": rates_per_generation(promotions)}


def rates_per_generation(promotions: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """generation -> {holdout, suite, in_template} at its latest promotion measurement (the chart's series)."""
    out: dict[str, dict[str, float | None]] = {}
    for p in promotions:
        suite = p.get("suite") or {}
        for gid, rate, srate in ((p["parent"], p["parent_rate"], suite.get("parent")),
                                 (p["candidate"], p["candidate_rate"], suite.get("candidate"))):
            if not gid:
                continue
            row = out.setdefault(gid, {"holdout": None, "suite": None, "in_template": None})
            if rate is not None:
                row["holdout"] = float(rate)
            if srate is not None and suite.get("tasks"):
                row["suite"] = float(srate)
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


def compare_grid(ctx: ViewContext, by: str, split: str | None, family: str | None,
                 cols: list[str]) -> dict[str, Any]:
    """Tasks x generations (or arms): per cell passes / graded trials; columns limited to `cols` when given."""
    if by not in ("generation", "arm"):
        raise ValueError(f"by must be generation or arm; got {by!r}")
    cells = ctx.store.pass_grid(by, split=split, family=family)
    all_cols = sorted({c["col"] for c in cells})
    shown = [c for c in cols if c in all_cols] if cols else all_cols
    grid: dict[str, dict[str, dict[str, Any]]] = {}
    for c in cells:
        if c["col"] not in shown:
            continue
        graded = int(c["trials"]) - int(c["infra"] or 0)
        grid.setdefault(c["task"], {})[c["col"]] = {
            "passes": int(c["passes"] or 0), "graded": graded, "trials": int(c["trials"]),
            "rate": (int(c["passes"] or 0) / graded) if graded else None}
    totals = {}
    for col in shown:
        ps = sum(grid[t][col]["passes"] for t in grid if col in grid[t])
        gr = sum(grid[t][col]["graded"] for t in grid if col in grid[t])
        totals[col] = {"passes": ps, "graded": gr, "rate": ps / gr if gr else None}
    return {"by": by, "cols": shown, "all_cols": all_cols, "grid": dict(sorted(grid.items())), "totals": totals}


def step_diff(ctx: ViewContext, task: str, a: str, b: str, by: str, ta: str | None, tb: str | None) -> dict[str, Any]:
    """Two trajectories of `task` (under A and under B) aligned on their actions; trial choices for each side."""
    store = ctx.store
    if by == "generation":
        ca, cb = store.trial_choices(task, generation=a), store.trial_choices(task, generation=b)
    else:
        ca, cb = store.trial_choices(task, arm=a), store.trial_choices(task, arm=b)
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


def diff_agent(ctx: ViewContext, a: str, b: str) -> str:
    """The agent whose trials the diff compares: the one the promotion of B over A measured, else the harness."""
    for p in reversed(ctx.store.promote_jobs()):
        if p.get("parent") == a and p.get("candidate") == b and p.get("agent"):
            return str(p["agent"])
    return "harness"


def config_text(ctx: ViewContext, digest: str) -> str:
    try:
        return ctx.store.get_config(digest).canonical_yaml
    except NotFoundError:
        return yaml.safe_dump({"missing": digest})


__all__ = ["TrialDetail", "compare_grid", "config_text", "default_pair", "diff_agent", "generations",
           "rates_per_generation", "step_diff", "trial_detail", "trial_query"]
