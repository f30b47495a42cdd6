"""Tests of a pass-rate difference against a margin (pure): non-inferiority and family regression.

Both ask about D = candidate - parent, the mean over evaluation units (templates, or tasks) of each unit's
mean per-task difference, against a margin, one-sided:

- **non-inferiority** (`direction="greater"`): the burden is on the candidate. H0: D <= -margin (worse by
  at least the margin) is rejected at level `bound` only when the data say so: the gate passes on
  p < bound, equivalently on the one-sided (1 - bound) lower confidence bound on D lying above -margin;
- **regression** (`direction="less"`): the burden is on the evidence of harm. H0: D >= -ceiling is rejected
  (a regression shown) on p < bound; noise alone rejects it at most `bound` of the time.

The statistic is a Farrington-Manning score test (the standard test of a risk difference against a
margin) clustered on units: Z = (D - delta0) / sqrt(V), V the larger of
- the model variance at delta0: both arms' pooled rates re-estimated by maximum likelihood under the
  constraint candidate - parent = delta0 (Farrington & Manning 1990), each unit's variance that binomial
  variance over its effective trials (T_u^2 / sum over its tasks of 1/n_t). Conditional on the units this
  is an upper bound of the true variance (binomial variance is concave), and, unlike a variance read off the
  data, it does not vanish when the observed rates are all 0 or all 1 (with 32 failed trials the parent's
  rate may still be 0.08);
- the clustered (empirical) variance: the sample variance of the per-unit differences over the number
  of units (effects that differ between units widen it).
The normal reference gives p; the confidence bound inverts the same test (bisection over delta0).
benchmarks/noninferiority.py and tests/unit/test_noninferiority.py simulate both rules' type-I error and
power at the demo's shape. Nothing here imports scipy (`rsi diff` prints these on every run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

Direction = Literal["greater", "less"]
_NORMAL = NormalDist()


@dataclass(frozen=True)
class UnitCounts:
    """One evaluation unit in both arms: the mean of its tasks' pass rates and its effective trials."""

    parent: float
    candidate: float
    parent_trials: float  # effective graded trials: T^2 / sum_t 1/n_t (T tasks of n_t trials; T * n when equal)
    candidate_trials: float


@dataclass(frozen=True)
class MarginTest:
    """One one-sided test of D against delta0 = -margin, with its confidence bound."""

    direction: Direction  # greater: non-inferiority (candidate not worse by margin); less: regression shown
    units: int
    trials: tuple[int, int]  # graded trials (parent, candidate), rounded
    parent: float  # pooled rates over the effective trials
    candidate: float
    delta: float  # mean over units of the per-unit difference
    margin: float
    level: float  # the p bound it was judged at (alpha, or a sequential look's bound)
    p_value: float | None  # None: no unit measured in both arms
    confidence_bound: float | None  # NI: lower (1 - level) bound on D; regression: the upper bound

    @property
    def rejected(self) -> bool:
        """H0 rejected at `level`: non-inferiority shown (greater) or a regression shown (less)."""
        return self.p_value is not None and self.p_value < self.level


def effective_trials(trials: Sequence[int]) -> float:
    """A unit's effective trials for the variance of its mean per-task rate: T^2 / sum_t 1/n_t."""
    inv = sum(1 / n for n in trials if n > 0)
    return len([n for n in trials if n > 0]) ** 2 / inv if inv else 0.0


def restricted_rates(x_p: float, n_p: float, x_c: float, n_c: float, delta0: float) -> tuple[float, float]:
    """Maximum-likelihood (parent, candidate) rates under candidate - parent = delta0: Farrington & Manning's
    closed form (the root of the score equation's cubic), bisection on the concave log-likelihood's slope
    where the closed form degenerates."""
    lo, hi = max(0.0, -delta0), min(1.0, 1.0 - delta0)
    c1, p2 = x_c / n_c, x_p / n_p  # FM's group 1 (the candidate) and group 2 (the parent)
    theta = n_p / n_c
    a = 1 + theta
    b = -(1 + theta + c1 + theta * p2 + delta0 * (theta + 2))
    c = delta0**2 + delta0 * (2 * c1 + theta + 1) + c1 + theta * p2
    d = -c1 * delta0 * (1 + delta0)
    v = b**3 / (3 * a) ** 3 - b * c / (6 * a**2) + d / (2 * a)
    uu = b**2 / (3 * a) ** 2 - c / (3 * a)
    if uu > 1e-15:
        u = math.copysign(math.sqrt(uu), v) if v else math.sqrt(uu)
        ratio = v / u**3
        if -1.0 <= ratio <= 1.0:
            cand = 2 * u * math.cos((math.pi + math.acos(ratio)) / 3) - b / (3 * a)
            par = cand - delta0
            if lo - 1e-9 <= par <= hi + 1e-9:
                par = min(max(par, lo), hi)
                return par, min(max(par + delta0, 0.0), 1.0)
    eps = 1e-12

    def slope(p: float) -> float:
        q = p + delta0
        return (x_p / max(p, eps) - (n_p - x_p) / max(1 - p, eps)
                + x_c / max(q, eps) - (n_c - x_c) / max(1 - q, eps))

    a_, b_ = lo, hi
    for _ in range(60):
        m = (a_ + b_) / 2
        if slope(m) > 0:
            a_ = m
        else:
            b_ = m
    par = min(max((a_ + b_) / 2, lo), hi)
    return par, min(max(par + delta0, 0.0), 1.0)


def _z(units: Sequence[UnitCounts], delta: float, delta0: float) -> float:
    n = len(units)
    n_p = sum(u.parent_trials for u in units)
    n_c = sum(u.candidate_trials for u in units)
    p_t, c_t = restricted_rates(sum(u.parent * u.parent_trials for u in units), n_p,
                                sum(u.candidate * u.candidate_trials for u in units), n_c, delta0)
    model = sum(p_t * (1 - p_t) / u.parent_trials + c_t * (1 - c_t) / u.candidate_trials for u in units) / n**2
    ds = [u.candidate - u.parent for u in units]
    empirical = sum((d - delta) ** 2 for d in ds) / (n - 1) / n if n > 1 else 0.0
    var = max(model, empirical)
    diff = delta - delta0
    if var <= 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / math.sqrt(var)


def margin_test(units: Sequence[UnitCounts], margin: float, level: float, direction: Direction = "greater",
                *, with_bound: bool = True) -> MarginTest:
    """The clustered score test of D against delta0 = -margin (see the module docstring).

    greater: p = P(Z >= z) under D = -margin (small: non-inferiority shown);
    less: p = P(Z <= z) under D = -margin (small: a drop beyond the margin shown).
    with_bound=False skips the confidence bound (simulations call this thousands of times)."""
    units = [u for u in units if u.parent_trials > 0 and u.candidate_trials > 0]
    n_p = sum(u.parent_trials for u in units)
    n_c = sum(u.candidate_trials for u in units)
    if not units:
        return MarginTest(direction, 0, (0, 0), 0.0, 0.0, 0.0, margin, level, None, None)
    delta = sum(u.candidate - u.parent for u in units) / len(units)
    z = _z(units, delta, -margin)
    p = 1 - _NORMAL.cdf(z) if direction == "greater" else _NORMAL.cdf(z)
    return MarginTest(direction, len(units), (round(n_p), round(n_c)),
                      sum(u.parent * u.parent_trials for u in units) / n_p,
                      sum(u.candidate * u.candidate_trials for u in units) / n_c, delta, margin, level,
                      min(max(p, 0.0), 1.0),
                      confidence_bound(units, delta, level, direction) if with_bound else None)


def confidence_bound(units: Sequence[UnitCounts], delta: float, level: float, direction: Direction) -> float:
    """The one-sided (1 - level) confidence bound on D that inverts the test: greater, the smallest delta0
    the test does not reject (the lower bound); less, the largest (the upper bound)."""
    crit = _NORMAL.inv_cdf(1 - level)
    if direction == "greater":  # lower bound: Z(delta0) falls as delta0 rises; find Z = crit in [-1, delta]
        if _z(units, delta, -1.0) < crit:
            return -1.0
        a, b = -1.0, delta
        for _ in range(40):
            m = (a + b) / 2
            a, b = (m, b) if _z(units, delta, m) >= crit else (a, m)
        return (a + b) / 2
    if _z(units, delta, 1.0) > -crit:
        return 1.0
    a, b = delta, 1.0
    for _ in range(40):
        m = (a + b) / 2
        a, b = (m, b) if _z(units, delta, m) > -crit else (a, m)
    return (a + b) / 2


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error): reject where adjusted p < alpha."""
    order = sorted(p_values, key=lambda k: p_values[k])
    m, out, run = len(order), {}, 0.0
    for i, k in enumerate(order):
        run = max(run, min(1.0, (m - i) * p_values[k]))
        out[k] = run
    return out


def design_margin(trials: float, level: float, power: float = 0.8, rate: float = 0.5) -> float:
    """The smallest margin (in hundredths, rounded up) at which a candidate truly equal to its parent at `rate`
    (0.5: the worst case, no result needed) passes the non-inferiority test with probability `power`, with
    `trials` graded trials per arm, judged at `level`: the normal approximation (D ~ N(0, V)) of the test.
    A design figure from a part's size alone, never from its results (benchmarks/noninferiority.py simulates
    the power it gives)."""
    need = _NORMAL.inv_cdf(1 - level) + _NORMAL.inv_cdf(power)
    for hundredths in range(1, 101):
        m = hundredths / 100
        p_t, c_t = restricted_rates(rate * trials, trials, rate * trials, trials, -m)
        if m / math.sqrt((p_t * (1 - p_t) + c_t * (1 - c_t)) / trials) >= need:
            return m
    return 1.0


__all__ = ["Direction", "MarginTest", "UnitCounts", "confidence_bound", "design_margin", "effective_trials", "holm",
           "margin_test", "restricted_rates"]
