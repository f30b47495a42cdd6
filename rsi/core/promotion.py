"""Promotion gates (pure): may a candidate generation replace its parent on the sealed holdout?

The contract's `promotion` section sets the thresholds. Every gate is a row (name, threshold,
measured, pass/fail) so a verdict can be printed and recorded as it is:

- `contract_major`: candidate and parent were built under the same contract major as the
  contract the holdout is graded under (rates are not comparable across majors);
- `holdout_tasks`: enough tasks with graded trials in both arms for the paired test to be able to
  reach p < alpha at all (the minimum is computed, and the advice names `rsi discover --holdout-only`);
- `min_delta`: holdout pass rate improvement >= min_delta, and more than nothing;
- `significance`: a paired test over tasks on per-task pass rates (exact permutation test, Wilcoxon
  signed-rank beyond EXACT_TASKS tasks; one-sided: the candidate is better), p < alpha, with scipy;
- `family_regression`: no task family's pass rate drops by more than the ceiling;
- `infra_errors`: the share of trials that ended on infra (per arm, the worse one) <= the ceiling.

Statistics come from scipy (permutation_test, binomtest's Wilson interval); nothing hand-rolled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from rsi.core.contract import Promotion

EXACT_TASKS = 12  # up to this many tasks the permutation test enumerates all 2^n sign flips


@dataclass(frozen=True)
class TaskOutcome:
    """One arm's graded trials of one holdout task (infra trials counted apart, not graded)."""

    task: str
    family: str
    passes: int
    trials: int  # graded (non-infra) trials
    infra: int = 0

    @property
    def rate(self) -> float:
        return self.passes / self.trials if self.trials else 0.0


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
class PromotionVerdict:
    gates: list[Gate]
    n_tasks: int
    min_tasks: int
    parent_rate: float
    candidate_rate: float
    delta: float
    p_value: float | None
    families: list[FamilyRates] = field(default_factory=list)

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


def wilson(passes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a pass rate (scipy's binomtest); (0, 1) when nothing was graded."""
    if n <= 0:
        return (0.0, 1.0)
    from scipy.stats import binomtest

    ci = binomtest(passes, n).proportion_ci(confidence_level=level, method="wilson")
    return (float(ci.low), float(ci.high))


def paired_p(parent: Sequence[float], candidate: Sequence[float], alternative: str = "greater") -> float | None:
    """p of a paired test over tasks on per-task pass rates (`greater`: the candidate is better).

    Up to EXACT_TASKS tasks: the exact paired permutation test (every sign flip of the per-task
    differences, statistic their mean; scipy.stats.permutation_test). Beyond: the Wilcoxon
    signed-rank test (scipy.stats.wilcoxon, tasks that did not change dropped), which answers in
    milliseconds on thousands of tasks. None when there is no pair; 1.0 when no task differs.
    """
    if len(parent) != len(candidate):
        raise ValueError("paired samples differ in length")
    if not parent:
        return None
    diffs = [c - p for p, c in zip(parent, candidate, strict=True)]
    if not any(diffs):
        return 1.0
    import numpy as np
    from scipy.stats import binomtest, permutation_test, wilcoxon

    if len(diffs) < 2:  # one pair: the sign test (permutation_test wants two or more)
        return float(binomtest(int(diffs[0] > 0), 1, alternative=alternative).pvalue)
    if len(diffs) > EXACT_TASKS:
        return float(wilcoxon(np.asarray(diffs, float), alternative=alternative, zero_method="wilcox").pvalue)

    def stat(x: Any, y: Any, axis: int = -1) -> Any:
        return np.mean(x - y, axis=axis)

    res = permutation_test((np.asarray(candidate, float), np.asarray(parent, float)), stat,
                           permutation_type="samples", vectorized=True, n_resamples=2**EXACT_TASKS,
                           alternative=alternative)
    return float(res.pvalue)


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


def holdout_advice(have: int, need: int) -> str:
    short = max(need - have, 1)
    return (f"{have} holdout task(s) measured in both generations; the paired test needs at least {need} to "
            f"be able to pass; add holdout tasks with `rsi discover --holdout-only --n {short}`")


def evaluate(parent: Mapping[str, TaskOutcome], candidate: Mapping[str, TaskOutcome], promotion: Promotion, *,
             parent_major: int, candidate_major: int, contract_major: int) -> PromotionVerdict:
    """Every gate of the contract's `promotion` section over per-task outcomes of both arms."""
    common = sorted(t for t in set(parent) & set(candidate) if parent[t].trials and candidate[t].trials)
    need = min_tasks(promotion.alpha)
    p_rates = [parent[t].rate for t in common]
    c_rates = [candidate[t].rate for t in common]
    p_pass, p_n = sum(parent[t].passes for t in common), sum(parent[t].trials for t in common)
    c_pass, c_n = sum(candidate[t].passes for t in common), sum(candidate[t].trials for t in common)
    p_rate, c_rate = (p_pass / p_n if p_n else 0.0), (c_pass / c_n if c_n else 0.0)
    delta = (sum(c_rates) - sum(p_rates)) / len(common) if common else 0.0
    p_value = paired_p(p_rates, c_rates)

    gates: list[Gate] = []
    majors_ok = parent_major == candidate_major == contract_major
    gates.append(Gate("contract_major", f"same as hcp {contract_major}.x",
                      f"parent {parent_major}, candidate {candidate_major}", majors_ok,
                      "" if majors_ok else "rates are not comparable across contract majors"))
    gates.append(Gate("holdout_tasks", f">= {need} tasks", str(len(common)), len(common) >= need,
                      "" if len(common) >= need else holdout_advice(len(common), need)))
    gates.append(Gate("min_delta", f">= {promotion.min_delta:+.3f} and > 0", f"{delta:+.3f}",
                      bool(common) and delta >= promotion.min_delta and delta > 0,
                      f"holdout pass rate {p_rate:.3f} -> {c_rate:.3f}"))
    gates.append(Gate("significance", f"p < {promotion.alpha:g}", "n/a" if p_value is None else f"{p_value:.4g}",
                      p_value is not None and p_value < promotion.alpha,
                      f"paired {test_name(len(common))} test over {len(common)} task(s), one-sided"))

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
    gates.append(Gate("infra_errors", f"<= {promotion.infra_error_ceiling:.3f}", f"{infra:.3f}",
                      infra <= promotion.infra_error_ceiling + 1e-12))
    return PromotionVerdict(gates=gates, n_tasks=len(common), min_tasks=need, parent_rate=p_rate,
                            candidate_rate=c_rate, delta=delta, p_value=p_value, families=families)


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


__all__ = ["FamilyRates", "Gate", "PromotionVerdict", "TaskOutcome", "evaluate", "family_rates", "holdout_advice",
           "min_tasks", "paired_p", "test_name", "wilson"]
