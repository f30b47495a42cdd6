"""Statistics over trial outcomes (pure): pass@k, and the report's tests without scipy.stats where it can.

`import scipy.stats` costs 1.5-4 s on 2 cores (scipy rewrites hundreds of docstrings at import), more
than all of `rsi diff`'s SQL over 100k trials; the issue gives `rsi diff` 2 s. So the three figures the
diff, the viewer and promote print on every run are computed here, each the same number scipy gives
(the unit tests compare them with scipy on thousands of random inputs):

- `wilson`: the Wilson score interval, `binomtest(k, n).proportion_ci(method="wilson")`;
- `paired_permutation_p`: the exact paired permutation test over every sign flip of the per-pair
  differences, statistic their mean, `permutation_test(..., permutation_type="samples")` with
  `n_resamples >= 2**n` (scipy then enumerates, as here);
- `wilcoxon_p`: the Wilcoxon signed-rank test's normal approximation with zeros dropped and the tie
  correction, `wilcoxon(d, zero_method="wilcox")`, in the cases where scipy itself uses it (more than
  50 pairs, or more than 13 with a zero or a tie); anything else is handed to scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import product
from statistics import NormalDist

_NORMAL = NormalDist()
_EPS100 = 2.220446049250313e-16 * 100  # scipy's tolerance for "equal" statistics (100 float64 eps, relative)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n <= 0 or k <= 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson(passes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of `passes` of `n` (two-sided, no continuity correction); (0, 1) when n = 0."""
    if n <= 0:
        return (0.0, 1.0)
    z = _NORMAL.inv_cdf(0.5 + 0.5 * level)
    p = passes / n
    denom = 2 * (n + z * z)
    center = (2 * n * p + z * z) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z * z)
    return (0.0 if passes == 0 else center - delta, 1.0 if passes == n else center + delta)


def paired_permutation_p(diffs: Sequence[float], alternative: str = "greater") -> float:
    """Exact p of the paired permutation test on the mean of `diffs` (candidate - parent per pair): the
    share of all 2^n sign flips whose mean is at least (`greater`) / at most (`less`) the observed one."""
    n = len(diffs)
    if n < 1:
        raise ValueError("no pairs")
    observed = sum(diffs) / n
    gamma = abs(_EPS100 * observed)
    hits = 0
    for signs in product((1, -1), repeat=n):
        m = sum(s * d for s, d in zip(signs, diffs, strict=True)) / n
        if alternative == "greater":
            hits += m >= observed - gamma
        elif alternative == "less":
            hits += m <= observed + gamma
        else:
            raise ValueError(f"alternative {alternative!r}: give greater or less")
    return hits / 2**n


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of `values` and the size of each group of ties."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def wilcoxon_p(diffs: Sequence[float], alternative: str = "greater") -> float:
    """p of the Wilcoxon signed-rank test on `diffs`, zeros dropped, as scipy.stats.wilcoxon answers it."""
    n_all = len(diffs)
    has_zero = any(d == 0 for d in diffs)
    nonzero = [d for d in diffs if d != 0]
    ranks, ties = _ranks([abs(d) for d in nonzero])
    has_tie = any(t > 1 for t in ties)
    if not (n_all > 50 or (n_all > 13 and (has_zero or has_tie))):  # scipy answers exactly: let it
        from scipy.stats import wilcoxon

        return float(wilcoxon(list(diffs), alternative=alternative, zero_method="wilcox").pvalue)
    count = len(nonzero)
    if count == 0:
        return math.nan
    r_plus = sum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    mean = count * (count + 1) * 0.25
    se = math.sqrt((count * (count + 1) * (2 * count + 1) - sum(t**3 - t for t in ties) / 2) / 24)
    z = (r_plus - mean) / se
    if alternative == "greater":
        return _NORMAL.cdf(-z)
    if alternative == "less":
        return _NORMAL.cdf(z)
    raise ValueError(f"alternative {alternative!r}: give greater or less")


def sign_test_p(wins: int, n: int) -> float:
    """One-sided exact sign (binomial) test: P(X >= wins) for X ~ Binomial(n, 1/2); 1.0 when n = 0."""
    if n <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n)


__all__ = ["paired_permutation_p", "pass_at_k", "sign_test_p", "wilcoxon_p", "wilson"]
