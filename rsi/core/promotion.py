"""Promotion gates (pure): may a candidate generation replace its parent on the sealed holdout?

The contract's `promotion` section sets the thresholds. Every gate is a row (name, threshold,
measured, pass/fail) so a verdict can be printed and recorded as it is:

- `contract_major`: candidate and parent were built under the same contract major as the
  contract the holdout is graded under (rates are not comparable across majors);
- `holdout_units`: enough evaluation units (the contract's `promotion.holdout_unit`: templates by
  default) with graded trials in both arms for the paired test to be able to reach p < alpha at all
  (the minimum is computed, and the advice names `rsi discover --holdout-only`);
- `min_delta`: holdout improvement >= min_delta, and more than nothing: the mean over units of each
  unit's mean per-task difference;
- `significance`: a paired test clustered on units: tasks of one template are not independent, so
  each unit contributes one paired difference, its tasks' mean (exact permutation test, Wilcoxon
  signed-rank beyond EXACT_TASKS units; one-sided: the candidate is better), p < alpha, with scipy.
  With unit `task` every task is its own unit. The per-task figure (delta and p over tasks) is
  reported beside it, never gated on;
- `family_regression`: no task family's pass rate drops by more than the ceiling;
- `suite_noninferiority` (when the contract names `suites`): on fixed tasks no generator wrote, the
  candidate is not worse than its parent by more than `suite_margin`: the gate fails when a one-sided
  paired test over the suite's tasks shows the per-task difference below -margin (p < alpha);
- `infra_errors`: the share of trials that ended on infra (per arm, the worse one) <= the ceiling.

Statistics come from scipy (permutation_test, binomtest's Wilson interval); nothing hand-rolled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from rsi.core.contract import Promotion
from rsi.core.stats import paired_permutation_p, sign_test_p, wilcoxon_p, wilson

EXACT_TASKS = 12  # up to this many tasks the permutation test enumerates all 2^n sign flips


@dataclass(frozen=True)
class TaskOutcome:
    """One arm's graded trials of one holdout task (infra trials counted apart, not graded)."""

    task: str
    family: str
    passes: int
    trials: int  # graded (non-infra) trials
    infra: int = 0
    unit: str = ""  # the evaluation unit (a template id); "" = the task is its own unit

    @property
    def rate(self) -> float:
        return self.passes / self.trials if self.trials else 0.0

    @property
    def unit_key(self) -> str:
        return self.unit or self.task


@dataclass
class UnitRates:
    """One evaluation unit (template) of the holdout: its tasks and the mean of their per-task rates."""

    unit: str
    tasks: int
    parent: float
    candidate: float

    @property
    def delta(self) -> float:
        return self.candidate - self.parent


@dataclass(frozen=True)
class Gate:
    name: str
    threshold: str
    measured: str
    passed: bool
    detail: str = ""


@dataclass
class FamilyRates:
    family: str
    tasks: int
    parent: tuple[int, int]  # (passes, graded trials)
    candidate: tuple[int, int]

    @property
    def parent_rate(self) -> float:
        return self.parent[0] / self.parent[1] if self.parent[1] else 0.0

    @property
    def candidate_rate(self) -> float:
        return self.candidate[0] / self.candidate[1] if self.candidate[1] else 0.0

    @property
    def delta(self) -> float:
        return self.candidate_rate - self.parent_rate


@dataclass
class SuiteRates:
    """Parent and candidate on the fixed regression suites, with the non-inferiority test."""

    tasks: int
    parent: float  # pooled pass rate
    candidate: float
    delta: float  # mean per-task difference
    margin: float
    p_value: float | None  # one-sided: the candidate is worse than the parent by more than the margin

    @property
    def passed_rate(self) -> str:
        return f"{100 * self.parent:.1f}% -> {100 * self.candidate:.1f}%"


def suite_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
                margin: float) -> SuiteRates:
    """The suite's figures: pooled rates, the mean per-task difference, and p of a one-sided paired test
    of "the candidate is below the parent by more than `margin`" (per-task differences shifted by it)."""
    common = sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)
    p_rates = [parent[t].rate for t in common]
    c_rates = [candidate[t].rate for t in common]
    p_n, c_n = sum(parent[t].trials for t in common), sum(candidate[t].trials for t in common)
    p_rate = sum(parent[t].passes for t in common) / p_n if p_n else 0.0
    c_rate = sum(candidate[t].passes for t in common) / c_n if c_n else 0.0
    delta = (sum(c_rates) - sum(p_rates)) / len(common) if common else 0.0
    p = paired_p(p_rates, [c + margin for c in c_rates], alternative="less") if common else None
    return SuiteRates(len(common), p_rate, c_rate, delta, margin, p)


@dataclass
class InTemplateRates:
    """Parent and candidate on the train tasks (the templates update trained on): measured, never gated.
    Beside the template-disjoint holdout it tells learning a template from getting better in general."""

    tasks: int
    units: int  # templates (a task without one is its own)
    parent: float  # pooled pass rate
    candidate: float
    delta: float  # mean over units of the per-unit mean difference
    p_value: float | None  # one-sided (the candidate is better), clustered on units

    @property
    def passed_rate(self) -> str:
        return f"{100 * self.parent:.1f}% -> {100 * self.candidate:.1f}%"


def in_template_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome]) -> InTemplateRates:
    """The in-template figures over the tasks measured in both arms."""
    common = sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)
    p_n, c_n = sum(parent[t].trials for t in common), sum(candidate[t].trials for t in common)
    p_rate = sum(parent[t].passes for t in common) / p_n if p_n else 0.0
    c_rate = sum(candidate[t].passes for t in common) / c_n if c_n else 0.0
    units, delta, p = clustered(parent, candidate, common) if common else ([], 0.0, None)
    return InTemplateRates(len(common), len(units), p_rate, c_rate, delta, p)


@dataclass
class PromotionVerdict:
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

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failing(self) -> list[Gate]:
        return [g for g in self.gates if not g.passed]

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["failing"] = [g.name for g in self.failing]
        return out


def paired_p(parent: Sequence[float], candidate: Sequence[float], alternative: str = "greater") -> float | None:
    """p of a paired test over tasks on per-task pass rates (`greater`: the candidate is better).

    Up to EXACT_TASKS tasks: the exact paired permutation test (every sign flip of the per-task
    differences, statistic their mean: scipy.stats.permutation_test's answer). Beyond: the Wilcoxon
    signed-rank test (scipy.stats.wilcoxon's answer, tasks that did not change dropped), which answers
    in milliseconds on thousands of tasks. Both come from rsi.core.stats, which imports scipy.stats only
    where scipy's answer is not closed-form (see there: the import alone would cost `rsi diff` seconds).
    None when there is no pair; 1.0 when no task differs.
    """
    if len(parent) != len(candidate):
        raise ValueError("paired samples differ in length")
    if not parent:
        return None
    diffs = [c - p for p, c in zip(parent, candidate, strict=True)]
    if not any(diffs):
        return 1.0
    if len(diffs) < 2:  # one pair: the sign test (permutation_test wants two or more)
        return sign_test_p(int(diffs[0] > 0), 1) if alternative == "greater" else sign_test_p(int(diffs[0] < 0), 1)
    if len(diffs) > EXACT_TASKS:
        return wilcoxon_p(diffs, alternative)
    return paired_permutation_p(diffs, alternative)


def test_name(n_tasks: int) -> str:
    return "permutation" if n_tasks <= EXACT_TASKS else "Wilcoxon signed-rank"


@lru_cache(maxsize=32)
def min_tasks(alpha: float, limit: int = 40) -> int:
    """The fewest tasks with which the paired test can reach p < alpha at all: every task improved."""
    for n in range(1, limit + 1):
        p = paired_p([0.0] * n, [1.0] * n)
        if p is not None and p < alpha:
            return n
    return limit


def unit_word(unit: str, n: int = 2) -> str:
    return unit if n == 1 else f"{unit}s" if unit != "family" else "families"


def holdout_advice(have: int, need: int, unit: str = "task") -> str:
    short = max(need - have, 1)
    return (f"{have} holdout {unit_word(unit, have)} measured in both generations; the paired test needs at least "
            f"{need} to be able to pass; add holdout {unit_word(unit)} with `rsi discover --holdout-only --n {short}`")


def unit_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
               common: Sequence[str]) -> list[UnitRates]:
    """Per unit (sorted): how many common tasks it has and the mean of their per-task rates in each arm."""
    groups: dict[str, list[str]] = {}
    for t in common:
        groups.setdefault(candidate[t].unit_key if candidate[t].unit else parent[t].unit_key, []).append(t)
    return [UnitRates(u, len(ts), sum(parent[t].rate for t in ts) / len(ts),
                      sum(candidate[t].rate for t in ts) / len(ts)) for u, ts in sorted(groups.items())]


def clustered(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], common: Sequence[str],
              alternative: str = "greater") -> tuple[list[UnitRates], float, float | None]:
    """The paired test clustered on units: (per-unit rates, mean of the per-unit differences, p)."""
    units = unit_rates(parent, candidate, common)
    delta = sum(u.delta for u in units) / len(units) if units else 0.0
    return units, delta, paired_p([u.parent for u in units], [u.candidate for u in units], alternative)


def figures(v: PromotionVerdict) -> list[str]:
    """The holdout figures a report prints: per unit (the gated one) and per task (beside it)."""
    def p(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.4g}"

    per_task = (f"per task: {v.n_tasks} tasks, delta {v.task_delta:+.3f}, p = {p(v.task_p_value)} "
                f"(paired {test_name(v.n_tasks)}, one-sided)")
    tail = []
    if v.in_template is not None and v.in_template.tasks:
        it = v.in_template
        tail.append(f"in-template (train tasks, the templates update trained on; not gated): {it.tasks} tasks on "
                    f"{it.units} {unit_word('template', it.units)}, {it.passed_rate}, delta {it.delta:+.3f}, "
                    f"p = {p(it.p_value)} (one-sided, clustered on templates)")
    if v.unit == "task":
        return [per_task + " (gated)", *tail]
    return [f"per {v.unit} (gated): {v.n_units} {unit_word(v.unit, v.n_units)}, delta {v.delta:+.3f}, p = "
            f"{p(v.p_value)} (paired {test_name(v.n_units)} over per-{v.unit} mean differences, one-sided)",
            per_task + f"; not gated: tasks of one {v.unit} are not independent", *tail]


def evaluate(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], promotion: Promotion, *,
             parent_major: int, candidate_major: int, contract_major: int,
             suite: tuple[Mapping[str, TaskOutcome], Mapping[str, TaskOutcome]] | None = None,
             in_template: tuple[Mapping[str, TaskOutcome], Mapping[str, TaskOutcome]] | None = None,
             ) -> PromotionVerdict:
    """Every gate of the contract's `promotion` section over per-task outcomes of both arms; the paired test
    and min_delta are taken over units (each TaskOutcome's `unit`, the task itself where it has none).
    `suite`: (parent, candidate) outcomes on the contract's regression suites, gated when it names any;
    `in_template`: (parent, candidate) outcomes on the train tasks, reported and never gated."""
    common = sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)
    need = min_tasks(promotion.alpha)
    # outcomes without units (every task its own) are counted and labelled as tasks, whatever the contract says
    unit = promotion.holdout_unit if any(parent[t].unit or candidate[t].unit for t in common) else "task"
    p_rates = [parent[t].rate for t in common]
    c_rates = [candidate[t].rate for t in common]
    p_pass, p_n = sum(parent[t].passes for t in common), sum(parent[t].trials for t in common)
    c_pass, c_n = sum(candidate[t].passes for t in common), sum(candidate[t].trials for t in common)
    p_rate, c_rate = (p_pass / p_n if p_n else 0.0), (c_pass / c_n if c_n else 0.0)
    task_delta = (sum(c_rates) - sum(p_rates)) / len(common) if common else 0.0
    task_p = paired_p(p_rates, c_rates)
    units, delta, p_value = clustered(parent, candidate, common)
    n_units = len(units)

    gates: list[Gate] = []
    majors_ok = parent_major == candidate_major == contract_major
    gates.append(Gate("contract_major", f"same as hcp {contract_major}.x",
                      f"parent {parent_major}, candidate {candidate_major}", majors_ok,
                      "" if majors_ok else "rates are not comparable across contract majors"))
    gates.append(Gate("holdout_units", f">= {need} {unit_word(unit)}", f"{n_units} ({len(common)} tasks)",
                      n_units >= need, "" if n_units >= need else holdout_advice(n_units, need, unit)))
    gates.append(Gate("min_delta", f">= {promotion.min_delta:+.3f} and > 0", f"{delta:+.3f}",
                      bool(common) and delta >= promotion.min_delta and delta > 0,
                      f"holdout pass rate {p_rate:.3f} -> {c_rate:.3f}; mean over {n_units} {unit_word(unit, n_units)}"
                      + (f" (per task {task_delta:+.3f})" if unit != "task" else "")))
    per_task = "" if unit == "task" else \
        f"; per task: {'n/a' if task_p is None else f'p = {task_p:.4g}'} over {len(common)} tasks (not gated)"
    how = " (clustered: per-unit mean differences)" if unit != "task" else ""
    gates.append(Gate("significance", f"p < {promotion.alpha:g}", "n/a" if p_value is None else f"{p_value:.4g}",
                      p_value is not None and p_value < promotion.alpha,
                      f"paired {test_name(n_units)} test over {n_units} {unit_word(unit, n_units)}{how}, "
                      f"one-sided{per_task}"))

    families = family_rates(parent, candidate, common)
    worst = max(families, key=lambda f: -f.delta, default=None)
    drop = -worst.delta if worst is not None else 0.0
    gates.append(Gate("family_regression", f"<= {promotion.family_regression_ceiling:.3f} drop",
                      f"{max(drop, 0.0):.3f}" + (f" ({worst.family})" if worst is not None and drop > 0 else ""),
                      drop <= promotion.family_regression_ceiling + 1e-12))

    def infra_share(arm: Mapping[str, TaskOutcome]) -> float:
        inf = sum(o.infra for o in arm.values())
        tot = inf + sum(o.trials for o in arm.values())
        return inf / tot if tot else 0.0

    infra = max(infra_share(parent), infra_share(candidate))
    suite_out = None
    if promotion.suites:
        sp, sc = suite or ({}, {})
        suite_out = suite_rates(sp, sc, promotion.suite_margin)
        worse = suite_out.p_value is not None and suite_out.p_value < promotion.alpha
        measured = ("n/a" if not suite_out.tasks else
                    f"{suite_out.delta:+.3f} ({suite_out.passed_rate}), p = "
                    + ("n/a" if suite_out.p_value is None else f"{suite_out.p_value:.4g}"))
        threshold = f">= -{promotion.suite_margin:.3f} (one-sided p >= {promotion.alpha:g})"
        gates.append(Gate("suite_noninferiority", threshold, measured, bool(suite_out.tasks) and not worse,
                          f"{suite_out.tasks} suite tasks ({', '.join(promotion.suites)}); paired "
                          f"{test_name(suite_out.tasks)} test that the candidate is below the parent by more "
                          f"than the margin" if suite_out.tasks else "no suite task was measured in both arms"))
        infra = max(infra, infra_share(sp), infra_share(sc))
    gates.append(Gate("infra_errors", f"<= {promotion.infra_error_ceiling:.3f}", f"{infra:.3f}",
                      infra <= promotion.infra_error_ceiling + 1e-12))
    return PromotionVerdict(gates=gates, n_tasks=len(common), min_tasks=need, parent_rate=p_rate,
                            candidate_rate=c_rate, delta=delta, p_value=p_value, families=families, unit=unit,
                            n_units=n_units, task_delta=task_delta, task_p_value=task_p, units=units, suite=suite_out,
                            in_template=in_template_rates(*in_template) if in_template is not None else None)


def family_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
                 common: Sequence[str]) -> list[FamilyRates]:
    """Pooled pass rates per family over the common tasks, sorted by family."""
    out: dict[str, FamilyRates] = {}
    for t in common:
        fam = candidate[t].family or parent[t].family
        f = out.setdefault(fam, FamilyRates(fam, 0, (0, 0), (0, 0)))
        f.tasks += 1
        f.parent = (f.parent[0] + parent[t].passes, f.parent[1] + parent[t].trials)
        f.candidate = (f.candidate[0] + candidate[t].passes, f.candidate[1] + candidate[t].trials)
    return [out[k] for k in sorted(out)]


__all__ = ["FamilyRates", "Gate", "InTemplateRates", "PromotionVerdict", "SuiteRates", "TaskOutcome", "UnitRates",
           "clustered", "evaluate", "family_rates", "figures", "holdout_advice", "in_template_rates", "min_tasks",
           "paired_p", "suite_rates", "test_name", "unit_rates", "unit_word", "wilson"]
