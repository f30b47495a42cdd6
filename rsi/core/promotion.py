"""Promotion gates (pure): may a candidate generation replace its parent on the sealed holdout?

The contract's `promotion` section sets the thresholds. The sealed holdout has three parts (a task's
`[metadata.rsi] holdout_part`, read through rsi.core.holdout_parts): **in_skill**, the question the newest cycle
drew (held-out compositions of trained operations, or train templates in phrasings never trained on: the
contract's `promotion.in_skill`), **unseen**, templates never trained on, and **no_forgetting**, every earlier
cycle's in-skill tasks, frozen. `promotion.gates` says what each part gates (default: in_skill superiority,
unseen and no_forgetting non_inferiority; exactly one part is the superiority gate). A holdout where no task
names its part (discovered before the split) is all `unseen`, template-disjoint as the old holdout was, and
gated for superiority as it was. Every gate is a row (name, threshold, measured, pass/fail):

- `contract_major`: candidate and parent were built under the same contract major as the
  contract the holdout is graded under (rates are not comparable across majors);
- `holdout_units`: the superiority part has enough evaluation units (the contract's `promotion.holdout_unit`:
  templates by default) measured in both arms for the paired test to be able to pass at all, at the largest
  bound any look uses (`unit_floor`: under Pocock with 2 looks 5 units never can; the advice names
  `rsi discover --holdout-only`);
- `min_delta`: the superiority part improves by >= min_delta, and by more than nothing: the mean over units
  of each unit's mean per-task difference;
- `significance`: a paired test clustered on units (each unit contributes its tasks' mean difference: exact
  permutation test, Wilcoxon signed-rank beyond EXACT_TASKS units; one-sided: the candidate is better),
  p below the bound: `alpha` for one look, the look's group-sequential bound when promote measures in
  rounds (rsi.core.sequential). The per-task figure is reported beside it, never gated on;
- `<part>_noninferiority` (each part gated `non_inferiority`: `unseen` and `no_forgetting` by default): the
  burden is on the candidate. A one-sided score test clustered on units (rsi.core.noninferiority) must reject
  H0 "the candidate is worse than its parent by at least the part's margin" (`unseen_margin`,
  `no_forgetting_margin`): p below the look's non-inferiority bound, the same as
  the one-sided lower confidence bound on the delta lying above -margin. A part too small for a candidate equal
  to its parent to pass says so in the gate's detail;
- `family_regression`: per family, a one-sided score test clustered on units of H0 "the family's rate drops by
  at most the ceiling"; the gate fails where Holm's adjusted p (across the families) is below alpha: a drop
  must be shown, one failed trial is not one;
- `suite_noninferiority` (when the contract names `suites`): on fixed tasks no generator wrote, the same
  non-inferiority test within `suite_margin`, each task its own unit;
- `infra_errors`: the share of trials that ended on infra (per arm, the worse one) <= the ceiling.

The figures and tests come from rsi.core.holdout_rates and rsi.core.noninferiority; benchmarks/noninferiority.py
simulates the non-inferiority and family-regression rules' type-I error and power at the demo's shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rsi.core.contract import Promotion
from rsi.core.holdout_parts import EVAL_PARTS
from rsi.core.holdout_rates import (
    EXACT_TASKS,
    FamilyRates,
    InTemplateRates,
    PartRates,
    SuiteRates,
    TaskOutcome,
    UnitRates,
    clustered,
    common_tasks,
    family_rates,
    holdout_advice,
    in_template_rates,
    min_tasks,
    paired_p,
    part_rates,
    pooled,
    suite_rates,
    test_name,
    unit_rates,
    unit_word,
)
from rsi.core.sequential import SequentialRecord, Spending, bounds, schedule
from rsi.core.stats import wilson

PART_LABEL = {"in_skill": "in-skill", "unseen": "unseen-template", "no_forgetting": "no-forgetting"}


@dataclass(frozen=True)
class Gate:
    name: str
    threshold: str
    measured: str
    passed: bool
    detail: str = ""


@dataclass
class PromotionVerdict:
    """The gates and figures of one promotion. The headline figures (n_tasks .. units) are the superiority
    part's (`superiority_part`: in_skill, or unseen on a holdout that names no part); `parts` has each."""

    gates: list[Gate]
    n_tasks: int
    min_tasks: int  # the fewest units the paired test can pass with (units, despite the name)
    parent_rate: float
    candidate_rate: float
    delta: float  # the gated figure: mean over units of the per-unit mean difference
    p_value: float | None  # the gated figure: the paired test clustered on units, one-sided
    families: list[FamilyRates] = field(default_factory=list)
    unit: str = "task"  # what a unit is: task | template | family
    n_units: int = 0
    task_delta: float = 0.0  # per task: the mean per-task difference, every task weighing the same
    task_p_value: float | None = None  # per task: the paired test over tasks (not gated: tasks cluster)
    units: list[UnitRates] = field(default_factory=list)
    suite: SuiteRates | None = None
    in_template: InTemplateRates | None = None  # measured when the contract asks, never gated
    superiority_part: str = "unseen"
    parts: list[PartRates] = field(default_factory=list)  # in_skill, unseen, no_forgetting (those it has)
    bound: float = 0.05  # the p bound the significance gate used (alpha, or the look's sequential bound)
    ni_bound: float = 0.05  # the p bound the non-inferiority gates used (alpha, or the look's own bound)
    sequential: SequentialRecord | None = None  # set by promote: the rounds it measured in

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failing(self) -> list[Gate]:
        return [g for g in self.gates if not g.passed]

    def part(self, name: str) -> PartRates | None:
        return next((p for p in self.parts if p.part == name), None)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["failing"] = [g.name for g in self.failing]
        if self.sequential is not None:
            out["sequential"]["rounds"] = self.sequential.rounds_run
            out["sequential"]["bound"] = self.sequential.bound
        return out


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _b(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def look_bounds(promotion: Promotion, rule: Spending | None = None) -> tuple[float, ...]:
    """The one-sided p bound of each look promote measures in (alpha alone for one look), under `rule`
    (default the contract's `spending`; the non-inferiority gates pass `noninferiority_spending`)."""
    looks = min(promotion.looks, promotion.trials_per_task)
    if looks <= 1:
        return (promotion.alpha,)
    fractions = tuple(n / promotion.trials_per_task for n in schedule(promotion.trials_per_task, looks))
    return bounds(promotion.alpha, fractions, rule or promotion.spending)


def unit_floor(promotion: Promotion) -> int:
    """The fewest units with which the superiority test can pass at all: every unit better reaches p = 2^-n,
    which must be below the largest bound any look uses (alpha for one look; under Pocock with 2 looks at
    alpha 0.05 both bounds are about 0.03 and 5 units, p = 1/32, never pass)."""
    return min_tasks(max(look_bounds(promotion)))


def ni_phrase(margin: float, level: float) -> str:
    """The non-inferiority gate's threshold: the test and the bound it must clear."""
    return f"lower {100 * (1 - level):.3g}% bound > -{margin:.3f} (p < {level:.4g}, H0 worse by >= {margin:.3f})"


def part_line(pr: PartRates, unit: str) -> str:
    """One printed line per holdout part: rates parent -> candidate, the p-values, units counted, its role."""
    role = {"superiority": "the superiority gate", "non_inferiority": f"non-inferiority within {pr.margin or 0:.3f}",
            "report": "reported, not gated"}[pr.role]
    ni = (f"; non-inferiority: lower bound {_b(pr.ni_lower)}, p = {_p(pr.ni_p_value)} (H0 worse by >= the margin; "
          f"passes below {_p(pr.ni_level)})" if pr.role == "non_inferiority" else "")
    return (f"{PART_LABEL.get(pr.part, pr.part)} holdout ({role}): {pr.tasks} tasks on {pr.units} "
            f"{unit_word(unit, pr.units)}, {pr.passed_rate}, delta {pr.delta:+.3f}, p = {_p(pr.p_value)} "
            f"(better, one-sided, clustered){ni}")


def figures(v: PromotionVerdict) -> list[str]:
    """The holdout figures a report prints: per unit (the gated one), per task (beside it), each holdout part,
    the suite, the in-template rate and the sequential test's rounds."""
    per_task = (f"per task: {v.n_tasks} tasks, delta {v.task_delta:+.3f}, p = {_p(v.task_p_value)} "
                f"(paired {test_name(v.n_tasks)}, one-sided)")
    tail = [part_line(pr, v.unit) for pr in v.parts if len(v.parts) > 1 or pr.part != "unseen"]
    if v.suite is not None and v.suite.tasks:
        s = v.suite
        tail.append(f"suite (non-inferiority within {s.margin:.3f}): {s.tasks} tasks, {s.passed_rate}, delta "
                    f"{s.delta:+.3f}, lower bound {_b(s.lower)}, p = {_p(s.p_value)} (H0 worse by >= the margin, "
                    f"one-sided; passes below {s.level:.4g})")
    if v.in_template is not None and v.in_template.tasks:
        it = v.in_template
        tail.append(f"in-template (train tasks, the templates update trained on; not gated): {it.tasks} tasks on "
                    f"{it.units} {unit_word('template', it.units)}, {it.passed_rate}, delta {it.delta:+.3f}, "
                    f"p = {_p(it.p_value)} (one-sided, clustered on templates)")
    if v.sequential is not None and v.sequential.looks > 1:
        tail.append(v.sequential.line())
    if v.unit == "task":
        return [per_task + " (gated)", *tail]
    return [f"per {v.unit} (gated): {v.n_units} {unit_word(v.unit, v.n_units)}, delta {v.delta:+.3f}, p = "
            f"{_p(v.p_value)} (paired {test_name(v.n_units)} over per-{v.unit} mean differences, one-sided)",
            per_task + f"; not gated: tasks of one {v.unit} are not independent", *tail]


def roles(promotion: Promotion, parent: Mapping[str, TaskOutcome],
          candidate: Mapping[str, TaskOutcome]) -> dict[str, str]:
    """part -> role: the contract's `gates`, or {unseen: superiority} when no outcome names its part (a
    holdout discovered before the two-part split: template-disjoint, gated as it always was)."""
    if not any(o.part for arm in (parent, candidate) for o in arm.values()):
        return {"unseen": "superiority"}
    return {str(p): str(r) for p, r in promotion.gates.items()}


def evaluate(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], promotion: Promotion, *,
             parent_major: int, candidate_major: int, contract_major: int,
             suite: tuple[Mapping[str, TaskOutcome], Mapping[str, TaskOutcome]] | None = None,
             in_template: tuple[Mapping[str, TaskOutcome], Mapping[str, TaskOutcome]] | None = None,
             bound: float | None = None, ni_bound: float | None = None) -> PromotionVerdict:
    """Every gate of the contract's `promotion` section over per-task outcomes of both arms (each TaskOutcome
    names its unit and holdout part); the paired tests and min_delta are taken over units.
    `suite`: (parent, candidate) outcomes on the contract's regression suites, gated when it names any;
    `in_template`: (parent, candidate) outcomes on the train tasks, reported and never gated;
    `bound`: the significance gate's p bound (a group-sequential look's), `alpha` when None;
    `ni_bound`: the non-inferiority gates' (a look's, under `noninferiority_spending`), the last look's when None."""
    bound = promotion.alpha if bound is None else bound
    ni_bound = look_bounds(promotion, promotion.noninferiority_spending)[-1] if ni_bound is None else ni_bound
    role = roles(promotion, parent, candidate)
    sup = next(p for p, r in role.items() if r == "superiority")
    every = common_tasks(parent, candidate)
    common = [t for t in every if candidate[t].part_key == sup]
    need = unit_floor(promotion)
    # outcomes without units (every task its own) are counted and labelled as tasks, whatever the contract says
    unit = promotion.holdout_unit if any(parent[t].unit or candidate[t].unit for t in every) else "task"
    p_rates = [parent[t].rate for t in common]
    c_rates = [candidate[t].rate for t in common]
    p_rate, c_rate = pooled(parent, common), pooled(candidate, common)
    task_delta = (sum(c_rates) - sum(p_rates)) / len(common) if common else 0.0
    task_p = paired_p(p_rates, c_rates)
    units, delta, p_value = clustered(parent, candidate, common)
    n_units = len(units)
    present = {o.part_key for arm in (parent, candidate) for o in arm.values()} | {sup}
    parts = [part_rates(parent, candidate, p, role.get(p, "report"),
                        promotion.margin(p) if role.get(p) == "non_inferiority" else None, ni_bound)
             for p in EVAL_PARTS if p in present]
    label = "" if role == {"unseen": "superiority"} else f"{PART_LABEL[sup]} "

    gates: list[Gate] = []
    majors_ok = parent_major == candidate_major == contract_major
    gates.append(Gate("contract_major", f"same as hcp {contract_major}.x",
                      f"parent {parent_major}, candidate {candidate_major}", majors_ok,
                      "" if majors_ok else "rates are not comparable across contract majors"))
    gates.append(Gate("holdout_units", f">= {need} {label}{unit_word(unit)}", f"{n_units} ({len(common)} tasks)",
                      n_units >= need, "" if n_units >= need else holdout_advice(n_units, need, f"{label}{unit}")))
    gates.append(Gate("min_delta", f">= {promotion.min_delta:+.3f} and > 0", f"{delta:+.3f}",
                      bool(common) and delta >= promotion.min_delta and delta > 0,
                      f"{label}holdout pass rate {p_rate:.3f} -> {c_rate:.3f}; mean over {n_units} "
                      f"{unit_word(unit, n_units)}" + (f" (per task {task_delta:+.3f})" if unit != "task" else "")))
    per_task = "" if unit == "task" else \
        f"; per task: {'n/a' if task_p is None else f'p = {task_p:.4g}'} over {len(common)} tasks (not gated)"
    how = " (clustered: per-unit mean differences)" if unit != "task" else ""
    seq = "" if bound == promotion.alpha else f" (group-sequential bound; overall alpha {promotion.alpha:g})"
    gates.append(Gate("significance", f"p < {bound:.4g}{seq}", _p(p_value),
                      p_value is not None and p_value < bound,
                      f"{label}paired {test_name(n_units)} test over {n_units} {unit_word(unit, n_units)}{how}, "
                      f"one-sided{per_task}"))
    for pr in parts:
        if pr.role != "non_inferiority":
            continue
        gates.append(Gate(f"{pr.part}_noninferiority", ni_phrase(pr.margin or 0.0, ni_bound),
                          f"{pr.delta:+.3f} ({pr.passed_rate}), bound {_b(pr.ni_lower)}, p = {_p(pr.ni_p_value)}",
                          pr.noninferior,
                          f"{PART_LABEL[pr.part]} holdout, {pr.units} {unit_word(unit, pr.units)} ({pr.tasks} tasks): "
                          f"one-sided score test clustered on {unit_word(unit)} (rsi.core.noninferiority)"
                          + _too_small(pr.tie_passes, pr.units, pr.parent, f"{PART_LABEL[pr.part]} {unit}")))

    families = family_rates(parent, candidate, every, promotion.family_regression_ceiling, promotion.alpha)
    gates.append(family_gate(families, promotion.family_regression_ceiling, promotion.alpha))

    def infra_share(arm: Mapping[str, TaskOutcome]) -> float:
        inf = sum(o.infra for o in arm.values())
        tot = inf + sum(o.trials for o in arm.values())
        return inf / tot if tot else 0.0

    infra = max(infra_share(parent), infra_share(candidate))
    suite_out = None
    if promotion.suites:
        sp, sc = suite or ({}, {})
        suite_out = suite_rates(sp, sc, promotion.suite_margin, ni_bound)
        measured = ("n/a" if not suite_out.tasks else f"{suite_out.delta:+.3f} ({suite_out.passed_rate}), bound "
                    f"{_b(suite_out.lower)}, p = {_p(suite_out.p_value)}")
        gates.append(Gate("suite_noninferiority", ni_phrase(promotion.suite_margin, ni_bound), measured,
                          suite_out.noninferior,
                          f"{suite_out.tasks} suite tasks ({', '.join(promotion.suites)}): one-sided score test, each "
                          f"task its own unit (rsi.core.noninferiority)"
                          + _too_small(suite_out.tie_passes, suite_out.tasks, suite_out.parent, "suite task")
                          if suite_out.tasks else "no suite task was measured in both arms"))
        infra = max(infra, infra_share(sp), infra_share(sc))
    gates.append(Gate("infra_errors", f"<= {promotion.infra_error_ceiling:.3f}", f"{infra:.3f}",
                      infra <= promotion.infra_error_ceiling + 1e-12))
    return PromotionVerdict(gates=gates, n_tasks=len(common), min_tasks=need, parent_rate=p_rate,
                            candidate_rate=c_rate, delta=delta, p_value=p_value, families=families, unit=unit,
                            n_units=n_units, task_delta=task_delta, task_p_value=task_p, units=units, suite=suite_out,
                            in_template=in_template_rates(*in_template) if in_template is not None else None,
                            superiority_part=sup, parts=parts, bound=bound, ni_bound=ni_bound)


def _too_small(tie_passes: bool, units: int, parent_rate: float, what: str) -> str:
    """The plain word when a part cannot pass a candidate equal to its parent at its size."""
    if tie_passes:
        return ""
    return (f"; too small to pass a candidate equal to its parent ({units} {unit_word(what, units)} at the parent's "
            f"{parent_rate:.3f}): only one measured better passes; add units or trials, or widen the margin")


def family_gate(families: list[FamilyRates], ceiling: float, alpha: float) -> Gate:
    """family_regression: fails where a family's drop beyond the ceiling is shown (Holm-adjusted p < alpha)."""
    tested = [f for f in families if f.adjusted is not None]
    worst = min(tested, key=lambda f: (f.adjusted or 1.0, f.delta), default=None)
    shown = [f.family for f in tested if f.adjusted is not None and f.adjusted < alpha]
    biggest = min(families, key=lambda f: f.delta, default=None)
    measured = ("no family measured" if worst is None else
                f"{worst.family} {worst.parent_rate:.3f} -> {worst.candidate_rate:.3f}, Holm p = {_p(worst.adjusted)}")
    drop = (f"; largest drop {-biggest.delta:.3f} ({biggest.family})" if biggest is not None and biggest.delta < 0
            else "")
    return Gate("family_regression", f"no drop > {ceiling:.3f} shown (Holm p >= {alpha:g})", measured, not shown,
                f"per family a one-sided score test clustered on units, H0 the drop is <= {ceiling:.3f}; Holm across "
                f"{len(tested)} families" + drop + (f"; shown in {', '.join(shown)}" if shown else ""))


__all__ = ["EXACT_TASKS", "PART_LABEL", "FamilyRates", "Gate", "InTemplateRates", "PartRates", "PromotionVerdict",
           "SuiteRates", "TaskOutcome", "UnitRates", "clustered", "evaluate", "family_gate", "family_rates", "figures",
           "holdout_advice", "in_template_rates", "look_bounds", "min_tasks", "ni_phrase", "paired_p", "part_line",
           "part_rates", "roles", "suite_rates", "test_name", "unit_floor", "unit_rates", "unit_word", "wilson"]
