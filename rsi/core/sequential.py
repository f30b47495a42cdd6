"""The group-sequential test promote measures in rounds with (pure): bounds per look, and the decision.

Promote measures the holdout in `promotion.looks` rounds; round k brings every holdout task to
ceil(k * K / looks) graded trials per generation (K = `trials_per_task`). After each round the gate's
statistic (the paired test clustered on templates, one-sided p) is compared with that look's bound:

- **efficacy**: p < the look's nominal bound and every other gate passes -> stop, promote;
- **futility** (non-binding): the look's z = Phi^-1(1 - p) <= `futility_z` (default 0: the candidate is
  not ahead at all) -> stop, reject. Non-binding: the efficacy bounds are computed as if it were never
  obeyed, so stopping on it can only lower the type-I error;
- otherwise the next round; the last look decides with its own bound.

The bounds come from Lan-DeMets alpha spending over the information fraction t_k (trials per task at look
k over K): the overall one-sided type-I error is the contract's `alpha`. `obrien_fleming` spends
alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt t) (little early, almost all of alpha at the end), `pocock`
spends alpha(t) = alpha ln(1 + (e - 1) t) (evenly). Bound c_k solves
P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}) for Z the canonical joint
normal (corr(Z_i, Z_j) = sqrt(t_i / t_j)), with scipy's multivariate normal CDF and brentq. One look is
today's fixed test: the bound is alpha itself. tests/unit/test_sequential.py simulates the whole rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

Spending = Literal["obrien_fleming", "pocock"]
_NORMAL = NormalDist()


def schedule(trials: int, looks: int) -> list[int]:
    """Graded trials per task and generation at each look: ceil(k * trials / looks), the last = trials."""
    return [math.ceil(k * trials / looks) for k in range(1, looks + 1)]


def spent(alpha: float, t: float, rule: Spending) -> float:
    """Alpha spent by information fraction t (0..1] under the Lan-DeMets spending function `rule`."""
    if t <= 0:
        return 0.0
    if rule == "pocock":
        return alpha * math.log(1 + (math.e - 1) * min(t, 1.0))
    z = _NORMAL.inv_cdf(1 - alpha / 2)
    return 2 - 2 * _NORMAL.cdf(z / math.sqrt(min(t, 1.0)))


@lru_cache(maxsize=64)
def bounds(alpha: float, fractions: tuple[float, ...], rule: Spending = "obrien_fleming") -> tuple[float, ...]:
    """The nominal one-sided p bound of each look (p < bound stops for efficacy) at these information
    fractions (increasing, the last 1). One look: (alpha,), exactly the fixed-sample test."""
    if len(fractions) <= 1:
        return (alpha,)
    import numpy as np
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal

    t = np.asarray(fractions, dtype=float)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    rng = np.random.default_rng(0)  # the CDF integrates by quasi-Monte Carlo: fixed, so the bounds are too

    def below(cs: list[float]) -> float:  # P(Z_1 < c_1, ..., Z_k < c_k)
        k = len(cs)
        if k == 1:
            return _NORMAL.cdf(cs[0])
        return float(multivariate_normal.cdf(np.asarray(cs), mean=np.zeros(k), cov=cov[:k, :k], abseps=1e-6,
                                             releps=1e-5, rng=rng))

    cs: list[float] = []
    prev = 0.0
    for tk in fractions:
        target = spent(alpha, tk, rule) - prev
        prev = spent(alpha, tk, rule)
        stay = below(cs) if cs else 1.0  # not stopped before look k
        if target <= 0:
            cs.append(math.inf)
            continue
        c = brentq(lambda c, cs=cs, stay=stay, target=target: stay - below([*cs, c]) - target,  # type: ignore[misc]
                   -10.0, 10.0, xtol=1e-5)
        cs.append(float(c))
    return tuple(0.0 if math.isinf(c) else 1 - _NORMAL.cdf(c) for c in cs)


def z_of(p: float | None) -> float:
    """The one-sided p as a standard normal deviate (p = 1: -inf; None, nothing measured: -inf)."""
    if p is None or p >= 1:
        return -math.inf
    if p <= 0:
        return math.inf
    return _NORMAL.inv_cdf(1 - p)


@dataclass
class Look:
    """One look of the sequential test as the report shows it."""

    look: int
    trials_per_task: int
    p_value: float | None  # the gate's p at this look
    bound: float  # p < bound: efficacy
    z: float
    decision: str  # efficacy | futility | continue | final


@dataclass
class SequentialRecord:
    """How the sequential test went: rounds planned and run, the rule, and every look."""

    looks: int
    rounds_run: int = 0
    rule: str = "obrien_fleming"
    alpha: float = 0.05
    futility_z: float | None = 0.0
    stopped: str = "final"  # efficacy | futility | final (the last look decided)
    history: list[Look] = field(default_factory=list)

    @property
    def bound(self) -> float:
        """The p bound the gate used (the stopping look's)."""
        return self.history[-1].bound if self.history else self.alpha

    def line(self) -> str:
        if self.looks <= 1:
            return f"sequential: one look (fixed test), p bound {self.bound:.4g}"
        ps = ", ".join(f"look {x.look} ({x.trials_per_task}/task): p = "
                       + ("n/a" if x.p_value is None else f"{x.p_value:.4g}") + f" vs {x.bound:.4g}"
                       for x in self.history)
        fut = "no futility stop" if self.futility_z is None else f"futility z <= {self.futility_z:g}"
        return (f"sequential: {self.rounds_run} of {self.looks} rounds ({self.stopped}); {ps}; "
                f"{self.rule.replace('_', '-')} alpha spending, overall one-sided alpha {self.alpha:g}, {fut}")


def decide(k: int, looks: int, p: float | None, bound: float, others_pass: bool, futility_z: float | None) -> str:
    """The decision at look k (1-based) of `looks`: efficacy | futility | continue | final."""
    if k >= looks:
        return "final"
    if p is not None and p < bound and others_pass:
        return "efficacy"
    if futility_z is not None and z_of(p) <= futility_z:
        return "futility"
    return "continue"


__all__ = ["Look", "SequentialRecord", "Spending", "bounds", "decide", "schedule", "spent", "z_of"]
