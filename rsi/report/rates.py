"""The promote gate's scope for a workspace: what the viewer, `rsi diff` and the reports pass to the one rate
computation (rsi.store.queries_rates.RateQueries.pass_tally), and the gate's per-part figures from two tallies.

The store counts; this module only says, from the workspace's contract and files, which K per task and which
integrity levels promote counts, which tasks are the regression suites' (kept out of the holdout) and which
holdout part each holdout task names (its task.toml's `[metadata.rsi] holdout_part`). A task's metadata is read
from its task.toml alone, once per file version (cached on the file's path, size and mtime), never per trial.

`gate_figures` turns two generations' tallies into the figures the promote gate computes, through the very
functions it calls (rsi.core.holdout_rates.part_rates and suite_rates, rsi.core.promotion.roles): per holdout part
(in-skill, unseen-template, no-forgetting: the parts as they were at that pair's promotion, `pair_parts`) the
pooled pass rate of each side over the part's tasks both sides counted, the per-unit delta and p, and where a
part gates non-inferiority its test (lower confidence bound and p against the last look's non-inferiority
bound); and the suite's. A page that shows a part's rate shows that figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsi.core.holdout_rates import PartRates, SuiteRates, TaskOutcome, part_rates, suite_rates
from rsi.core.promotion import PART_LABEL, look_bounds, roles
from rsi.store.queries_rates import HOLDOUT_PARTS, PassTally, RateScope, promotion_scope

# An opened workspace (rsi.loop.context.WorkspaceContext or rsi.view.context.ViewContext): .ws, .contract, .reader
Ctx = Any
# what every page says a rate counts (and what it leaves out)
COUNTS = ("model arms only (agent harness or an external harness; the oracle, nop, known-wrong and other "
          "controls are not counted), each generation under its own harness config, discover's probe left out, "
          "infra errors left out, as the promote gate counts")
ROLE_WORDS = {"superiority": "the superiority gate", "non_inferiority": "non-inferiority gate",
              "report": "reported, not gated"}


@dataclass(frozen=True)
class TaskMeta:
    """What a page needs of a task's task.toml: its split, family, template and holdout part."""

    name: str
    split: str
    family: str
    template: str | None
    holdout_part: str | None
    instance_cycle: int | None = None  # the cycle the instance was drawn for (in-skill: which cycle's question)


_META: dict[tuple[str, int, int], TaskMeta] = {}  # (task.toml path, size, mtime_ns) -> its metadata


def task_meta(ctx: Ctx) -> dict[str, TaskMeta]:
    """task name -> metadata for every task under tasks/, from each task.toml alone (cached per file version).
    A task.toml that does not parse is refused as loading the pool refuses it (one line naming file and field)."""
    from rsi.core.task import parse_task_toml

    root: Path = ctx.ws.tasks_dir
    out: dict[str, TaskMeta] = {}
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        toml = d / "task.toml"
        try:
            st = toml.stat()
        except OSError:
            continue
        key = (str(toml), st.st_size, st.st_mtime_ns)
        meta = _META.get(key)
        if meta is None:
            spec = parse_task_toml(toml.read_text(), str(toml))
            rsi = spec.metadata.rsi
            meta = _META[key] = TaskMeta(spec.task.name or d.name, str(rsi.split), rsi.family, rsi.template,
                                         str(rsi.holdout_part) if rsi.holdout_part else None, rsi.instance_cycle)
        out[meta.name] = meta
    return out


def holdout_parts(ctx: Ctx) -> dict[str, str]:
    """holdout task name -> the part promote measures it in (in_skill | unseen | no_forgetting: an in-skill task
    an earlier cycle drew; rsi.core.holdout_parts); a task naming none is absent (it counts as unseen, as promote
    counts it)."""
    from rsi.core.holdout_parts import measured_parts

    held = {n: (m.holdout_part, m.instance_cycle) for n, m in task_meta(ctx).items() if m.split == "holdout"}
    return {n: p for n, p in measured_parts(held).items() if p}


def suite_digests(ctx: Ctx) -> frozenset[str]:
    """Digests of the contract's regression suites' tasks: promote measures them beside the holdout (a starter
    task may say `split = "holdout"`), so every holdout figure keeps them out, as the gate does."""
    from rsi.store.files import find_task_dirs, load_tasks

    dirs = [d for rel in ctx.contract.promotion.suites if (d := (ctx.ws.root / rel).resolve()).is_dir()]
    return frozenset(t.digest for t in load_tasks(find_task_dirs(dirs))) if dirs else frozenset()


def gate_scope(ctx: Ctx, parts: tuple[str, ...] | None = ("holdout",), family: str | None = None,
               holdout_part: str | None = None) -> RateScope:
    """The scope promote counts under the workspace's contract, over `parts` (None: every part); every holdout
    task knows its part; `holdout_part` (in_skill | unseen | no_forgetting) keeps that part of the holdout only."""
    return promotion_scope(ctx.contract, parts, suite_digests(ctx), family, holdout_parts(ctx), holdout_part)


def look_scope(scope: RateScope, verdict: Mapping[str, Any] | None, promotion: Any) -> RateScope:
    """`scope` narrowed to the trials a promote verdict gated on. A promote that stopped at look r of L counted
    ceil(r * K / L) trials per holdout task (K = `trials_per_task`; the look's own figure, from its history) and
    ceil(r * K_suite / L) per suite task; a generation measured further before (a parent's own promotion)
    must not show more here than the gate saw. A verdict that ran every look, or none, leaves `scope` as is."""
    from dataclasses import replace

    from rsi.core.sequential import schedule

    seq = (verdict or {}).get("sequential") or {}
    r, looks = int(seq.get("rounds_run") or 0), int(seq.get("looks") or 0)
    if not r or r >= looks:
        return scope
    history = seq.get("history") or []
    per = dict(scope.per_task)
    per["holdout"] = int(history[-1]["trials_per_task"]) if history else schedule(promotion.trials_per_task,
                                                                                  looks)[r - 1]
    per["suite"] = schedule(promotion.suite_trials_per_task, looks)[r - 1]
    return replace(scope, per_task=per)


def generation_tally(ctx: Ctx, generation: str, scope: RateScope, agents: Iterable[str] | None = None) -> PassTally:
    """A generation's model-arm tally under `scope` (`agents`: narrowed to these, e.g. what a promotion measured)."""
    return ctx.reader.pass_tally(scope, generation=generation, agents=agents)


def common_names(a: PassTally, b: PassTally) -> list[str]:
    """Tasks both tallies graded, sorted: what a paired comparison (and the gate) pools over."""
    return sorted(n for n in set(a.tasks) & set(b.tasks) if a.tasks[n].graded and b.tasks[n].graded)


def _outcomes(ctx: Ctx, t: PassTally, names: list[str],
              parts: Mapping[str, str] | None = None) -> dict[str, TaskOutcome]:
    from rsi.core.discover import unit_of

    meta, unit = task_meta(ctx), ctx.contract.promotion.holdout_unit
    out = {}
    for n in names:
        x, m = t.tasks[n], meta.get(n)
        fam = m.family if m else "misc"
        key = unit_of(unit, template=m.template if m else None, family=fam, task=n)
        part = parts[n] if parts is not None and n in parts else x.holdout_part or ""
        out[n] = TaskOutcome(n, fam, x.passes, x.graded, x.infra, unit=key, part=part)
    return out


def pair_parts(ctx: Ctx, names: Iterable[str], common: Iterable[str]) -> dict[str, str]:
    """The part each holdout task of `names` had at the promotion of a pair: in-skill tasks drawn before the newest
    in-skill cycle among the tasks both sides counted (`common`) are no-forgetting (rsi.core.holdout_parts). So a
    pair compared when cycle 1's question was the in-skill part shows it so, though a later cycle froze it."""
    from rsi.core.holdout_parts import measured_part, newest_in_skill_cycle

    meta = task_meta(ctx)

    def of(n: str) -> tuple[str | None, int | None]:
        m = meta.get(n)
        return (m.holdout_part, m.instance_cycle) if m else (None, None)

    newest = newest_in_skill_cycle(of(n) for n in common)
    return {n: measured_part(*of(n), newest) for n in names}


@dataclass
class GateFigures:
    """Two generations' figures as the promote gate computes them: per holdout part present, and the suite."""

    parts: list[PartRates]
    suite: SuiteRates | None
    counts: dict[str, dict[str, tuple[int, int]]]  # part (or "suite") -> side (a|b) -> (passes, graded)

    def part(self, name: str) -> PartRates | None:
        return next((p for p in self.parts if p.part == name), None)

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-ready row per part, then the suite: label, role, tasks, units, both sides' passes/graded,
        rates, the per-unit delta and p (and the non-inferiority p where the part gates so)."""
        out = []
        for p in self.parts:
            (pa, na), (pb, nb) = self.counts[p.part]["a"], self.counts[p.part]["b"]
            out.append({"part": p.part, "label": f"{PART_LABEL.get(p.part, p.part)} holdout", "role": p.role,
                        "tasks": p.tasks, "units": p.units, "a_passes": pa, "a_trials": na, "b_passes": pb,
                        "b_trials": nb, "a_rate": p.parent if na else None, "b_rate": p.candidate if nb else None,
                        "delta": p.delta, "p_value": p.p_value, "margin": p.margin, "ni_p_value": p.ni_p_value,
                        "ni_lower": p.ni_lower, "ni_level": p.ni_level, "ni_tie_passes": p.tie_passes})
        if self.suite is not None and self.suite.tasks:
            s = self.suite
            (pa, na), (pb, nb) = self.counts["suite"]["a"], self.counts["suite"]["b"]
            out.append({"part": "suite", "label": "suite", "role": "non_inferiority", "tasks": s.tasks,
                        "units": s.tasks, "a_passes": pa, "a_trials": na, "b_passes": pb, "b_trials": nb,
                        "a_rate": s.parent, "b_rate": s.candidate, "delta": s.delta, "p_value": None,
                        "margin": s.margin, "ni_p_value": s.p_value, "ni_lower": s.lower, "ni_level": s.level,
                        "ni_tie_passes": s.tie_passes})
        return out


def gate_figures(ctx: Ctx, a: PassTally, b: PassTally) -> GateFigures:
    """The per-part and suite figures of A (the parent's side) and B (the candidate's) over the tasks both tallies
    counted, computed by the gate's own functions (see the module docstring). Tallies of any scope: the holdout
    parts come from their holdout tasks, the suite from their suite tasks."""
    promo = ctx.contract.promotion
    common = common_names(a, b)
    held = [n for n in common if a.tasks[n].part == "holdout"]
    # every holdout task either side ran, as promote passes every holdout task: roles and parts present follow
    names_a = [n for n, x in a.tasks.items() if x.part == "holdout"]
    names_b = [n for n, x in b.tasks.items() if x.part == "holdout"]
    local = pair_parts(ctx, {*names_a, *names_b}, held)  # the parts at this pair's promotion
    oa, ob = _outcomes(ctx, a, names_a, local), _outcomes(ctx, b, names_b, local)
    role = roles(promo, oa, ob)
    sup = next(p for p, r in role.items() if r == "superiority")
    have = {o.part_key for arm in (oa, ob) for o in arm.values()}
    present = [p for p in HOLDOUT_PARTS if p in have or (p == sup and have)]
    level = look_bounds(promo, promo.noninferiority_spending)[-1]  # the last look's non-inferiority bound
    parts = [part_rates(oa, ob, p, role.get(p, "report"),
                        promo.margin(p) if role.get(p) == "non_inferiority" else None, level) for p in present]
    mine = {p: [n for n in held if local.get(n) == p] for p in present}
    counts = {p: {"a": a.over(mine[p]), "b": b.over(mine[p])} for p in present}
    suite_names = [n for n in common if a.tasks[n].part == "suite"]
    suite = None
    if suite_names:
        suite = suite_rates(_outcomes(ctx, a, suite_names), _outcomes(ctx, b, suite_names), promo.suite_margin,
                            level)
        counts["suite"] = {"a": a.over(suite_names), "b": b.over(suite_names)}
    return GateFigures(parts, suite, counts)


def role_words(row: dict[str, Any]) -> str:
    """`the superiority gate`, `non-inferiority within 0.100`, `reported, not gated`: how a part gates."""
    if row["role"] == "non_inferiority" and row.get("margin") is not None:
        return f"non-inferiority within {row['margin']:.3f}"
    return ROLE_WORDS.get(row["role"], row["role"])


__all__ = ["COUNTS", "GateFigures", "TaskMeta", "common_names", "gate_figures", "gate_scope", "generation_tally",
           "holdout_parts", "pair_parts", "role_words", "suite_digests", "task_meta"]
