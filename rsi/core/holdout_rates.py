"""What promote measures on each arm (pure): per-task outcomes, per-unit and per-family rates, the holdout
parts, the suite and in-template figures, and the tests they use (rsi.core.promotion gates on them).

Non-inferiority (unseen part, suites) and family regression are score tests against a margin, clustered on
units (rsi.core.noninferiority). The superiority tests are one-sided and paired: per-unit (template) mean
differences when the outcomes carry units (tasks of one template are not independent), per task otherwise; the
exact permutation test up to EXACT_TASKS pairs, Wilcoxon signed-rank beyond (rsi.core.stats: scipy's answers
without importing scipy.stats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from rsi.core.noninferiority import MarginTest, UnitCounts, effective_trials, holm, margin_test
from rsi.core.stats import paired_permutation_p, sign_test_p, wilcoxon_p

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
    part: str = ""  # the holdout part: in_skill | unseen; "" = the task names none (counted as unseen)

    @property
    def rate(self) -> float:
        return self.passes / self.trials if self.trials else 0.0

    @property
    def unit_key(self) -> str:
        return self.unit or self.task

    @property
    def part_key(self) -> str:
        return self.part or "unseen"


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



@dataclass
class FamilyRates:
    family: str
    tasks: int
    parent: tuple[int, int]  # (passes, graded trials)
    candidate: tuple[int, int]
    # the regression test (rsi.core.noninferiority, direction less): H0 "the family drops by at most the
    # ceiling"; p small shows a drop beyond it. `adjusted`: Holm's p across the families (the gate's figure)
    p_value: float | None = None
    adjusted: float | None = None

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
    """Parent and candidate on the fixed regression suites, with the non-inferiority test (each task a unit)."""

    tasks: int
    parent: float  # pooled pass rate
    candidate: float
    delta: float  # mean per-task difference
    margin: float
    # non-inferiority (rsi.core.noninferiority): H0 "the candidate is worse by at least the margin"; p small
    # (below `level`) shows it is not, as the lower confidence bound above -margin does
    p_value: float | None
    lower: float | None = None  # one-sided (1 - level) lower confidence bound on delta
    level: float = 0.05
    tie_passes: bool = True  # whether a candidate equal to its parent could pass at this size

    @property
    def passed_rate(self) -> str:
        return f"{100 * self.parent:.1f}% -> {100 * self.candidate:.1f}%"

    @property
    def noninferior(self) -> bool:
        return self.p_value is not None and self.p_value < self.level


def unit_counts(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
                common: Sequence[str]) -> list[UnitCounts]:
    """Per unit (sorted, as unit_rates): the mean per-task rate in each arm and its effective trials."""
    groups: dict[str, list[str]] = {}
    for t in common:
        groups.setdefault(candidate[t].unit_key if candidate[t].unit else parent[t].unit_key, []).append(t)
    return [UnitCounts(sum(parent[t].rate for t in ts) / len(ts), sum(candidate[t].rate for t in ts) / len(ts),
                       effective_trials([parent[t].trials for t in ts]),
                       effective_trials([candidate[t].trials for t in ts])) for _u, ts in sorted(groups.items())]


def noninferiority(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], common: Sequence[str],
                   margin: float, level: float) -> tuple[MarginTest, bool]:
    """The non-inferiority test clustered on units over `common`, and whether a candidate equal to its parent
    (every unit's rate the parent's) could pass at this size: False says the part is too small to pass
    anything but a candidate better than its parent."""
    units = unit_counts(parent, candidate, common)
    tie = [UnitCounts(u.parent, u.parent, u.parent_trials, u.candidate_trials) for u in units]
    return margin_test(units, margin, level), bool(units) and margin_test(tie, margin, level, with_bound=False).rejected


def suite_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
                margin: float, level: float = 0.05) -> SuiteRates:
    """The suite's figures: pooled rates, the mean per-task difference, and the non-inferiority test within
    `margin` at `level` (each task its own unit)."""
    common = sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)
    p_n, c_n = sum(parent[t].trials for t in common), sum(candidate[t].trials for t in common)
    p_rate = sum(parent[t].passes for t in common) / p_n if p_n else 0.0
    c_rate = sum(candidate[t].passes for t in common) / c_n if c_n else 0.0
    delta = (sum(candidate[t].rate - parent[t].rate for t in common)) / len(common) if common else 0.0
    solo = {t: TaskOutcome(t, parent[t].family, parent[t].passes, parent[t].trials) for t in common}
    solo_c = {t: TaskOutcome(t, candidate[t].family, candidate[t].passes, candidate[t].trials) for t in common}
    test, tie = noninferiority(solo, solo_c, common, margin, level)
    return SuiteRates(len(common), p_rate, c_rate, delta, margin, test.p_value, test.confidence_bound, level, tie)


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



def family_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome],
                 common: Sequence[str], ceiling: float | None = None, level: float = 0.05) -> list[FamilyRates]:
    """Pooled pass rates per family over the common tasks, sorted by family. With a `ceiling`, each family's
    regression test (clustered on its units: H0 "it drops by at most the ceiling", one-sided at `level`) and
    Holm's adjusted p across the families: the family_regression gate fails where an adjusted p < level."""
    out: dict[str, FamilyRates] = {}
    members: dict[str, list[str]] = {}
    for t in common:
        fam = candidate[t].family or parent[t].family
        f = out.setdefault(fam, FamilyRates(fam, 0, (0, 0), (0, 0)))
        members.setdefault(fam, []).append(t)
        f.tasks += 1
        f.parent = (f.parent[0] + parent[t].passes, f.parent[1] + parent[t].trials)
        f.candidate = (f.candidate[0] + candidate[t].passes, f.candidate[1] + candidate[t].trials)
    if ceiling is not None:
        for fam, f in out.items():
            f.p_value = margin_test(unit_counts(parent, candidate, members[fam]), ceiling, level, "less",
                                    with_bound=False).p_value
        adjusted = holm({k: f.p_value for k, f in out.items() if f.p_value is not None})
        for k, a in adjusted.items():
            out[k].adjusted = a
    return [out[k] for k in sorted(out)]


@dataclass
class PartRates:
    """One part of the sealed holdout (in_skill | unseen): its figures parent -> candidate and how it gates.

    `p_value` is always the superiority test (one-sided, the candidate better, clustered on units), reported
    for every part (for `unseen`, the transfer); `ni_p_value` the non-inferiority test (rsi.core.
    noninferiority: H0 "the candidate is worse by at least `margin`", small p shows it is not), computed
    where the part's role is `non_inferiority`, with its lower confidence bound at `ni_level`."""

    part: str
    role: str  # superiority | non_inferiority | report
    tasks: int
    units: int
    parent: float  # pooled pass rate
    candidate: float
    delta: float  # mean over units of the per-unit mean difference
    p_value: float | None
    margin: float | None = None
    ni_p_value: float | None = None
    ni_lower: float | None = None  # one-sided (1 - ni_level) lower confidence bound on delta
    ni_level: float | None = None  # the p bound non-inferiority is judged at
    tie_passes: bool = True  # whether a candidate equal to its parent could pass at this size

    @property
    def passed_rate(self) -> str:
        return f"{100 * self.parent:.1f}% -> {100 * self.candidate:.1f}%"

    @property
    def noninferior(self) -> bool:
        return self.ni_p_value is not None and self.ni_level is not None and self.ni_p_value < self.ni_level


def common_tasks(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome]) -> list[str]:
    """Tasks with graded trials in both arms, sorted."""
    return sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)


def pooled(arm: Mapping[str, TaskOutcome], tasks: Sequence[str]) -> float:
    n = sum(arm[t].trials for t in tasks)
    return sum(arm[t].passes for t in tasks) / n if n else 0.0


def part_rates(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], part: str, role: str,
               margin: float | None = None, level: float = 0.05) -> PartRates:
    """The figures of one holdout part over its tasks measured in both arms (non-inferiority at `level`)."""
    common = [t for t in common_tasks(parent, candidate) if candidate[t].part_key == part]
    units, delta, p = clustered(parent, candidate, common) if common else ([], 0.0, None)
    out = PartRates(part, role, len(common), len(units), pooled(parent, common), pooled(candidate, common), delta,
                    p, margin if role == "non_inferiority" else None)
    if role == "non_inferiority" and units and margin is not None:
        test, tie = noninferiority(parent, candidate, common, margin, level)
        out.ni_p_value, out.ni_lower, out.ni_level, out.tie_passes = test.p_value, test.confidence_bound, level, tie
    return out


__all__ = ["EXACT_TASKS", "FamilyRates", "InTemplateRates", "PartRates", "SuiteRates", "TaskOutcome", "UnitRates",
           "clustered", "common_tasks", "family_rates", "holdout_advice", "in_template_rates", "min_tasks",
           "noninferiority", "paired_p", "part_rates", "pooled", "suite_rates", "test_name", "unit_counts",
           "unit_rates", "unit_word"]
