"""rsi.core.stats answers without importing scipy.stats (so `rsi diff` stays fast); every figure must be the
very number scipy gives, or the report's p-value and the gate's would differ. Compared on random inputs shaped
like the loop's: per-task pass rates (ties and zeros everywhere) and per-template mean rates."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import binomtest, permutation_test, wilcoxon

from rsi.core.promotion import EXACT_TASKS, paired_p
from rsi.core.stats import paired_permutation_p, sign_test_p, wilcoxon_p, wilson


def _rates(rng: random.Random, n: int, trials: int) -> list[float]:
    return [rng.randint(0, trials) / trials for _ in range(n)]


def test_wilson_is_scipys_interval() -> None:
    for n in range(1, 60):
        for k in range(n + 1):
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            assert wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-12), (k, n)
    ci = binomtest(7, 20).proportion_ci(confidence_level=0.8, method="wilson")
    assert wilson(7, 20, 0.8) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert wilson(0, 0) == (0.0, 1.0)


def _scipy_perm(parent: list[float], cand: list[float], alternative: str) -> float:
    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x - y, axis=axis)

    return float(permutation_test((np.asarray(cand), np.asarray(parent)), stat, permutation_type="samples",
                                  vectorized=True, n_resamples=2**EXACT_TASKS, alternative=alternative).pvalue)


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_permutation_is_scipys(alternative: str) -> None:
    rng = random.Random(0)
    for case in range(120):
        n = rng.randint(2, EXACT_TASKS)
        trials = rng.choice([1, 2, 3, 4, 6])
        parent, cand = _rates(rng, n, trials), _rates(rng, n, trials)
        diffs = [c - p for p, c in zip(parent, cand, strict=True)]
        if not any(diffs):
            continue
        assert paired_permutation_p(diffs, alternative) == pytest.approx(
            _scipy_perm(parent, cand, alternative), abs=1e-12), (case, parent, cand)


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_wilcoxon_is_scipys(alternative: str) -> None:
    rng = random.Random(1)
    for case in range(200):  # (13 pairs with a tie: scipy runs a 5-second permutation test, and so does rsi)
        n = rng.choice([14, 20, 40, 51, 80, 500, 2000])
        if rng.random() < 0.2:  # no ties and no zeros: scipy's exact branch for n <= 50
            diffs = [rng.uniform(-1, 1) for _ in range(n)]
        else:
            trials = rng.choice([2, 4, 6])
            diffs = [c - p for p, c in zip(_rates(rng, n, trials), _rates(rng, n, trials), strict=True)]
        if not any(diffs):
            continue
        want = float(wilcoxon(diffs, alternative=alternative, zero_method="wilcox").pvalue)
        assert wilcoxon_p(diffs, alternative) == pytest.approx(want, rel=1e-9, abs=1e-12), (case, n)


def test_sign_test_is_scipys() -> None:
    for n in range(0, 40):
        for w in range(n + 1):
            want = float(binomtest(w, n, 0.5, alternative="greater").pvalue) if n else 1.0
            assert sign_test_p(w, n) == pytest.approx(want, rel=1e-9), (w, n)


def test_paired_p_edges() -> None:
    assert paired_p([], []) is None
    assert paired_p([0.5, 0.5], [0.5, 0.5]) == 1.0
    assert paired_p([0.0], [1.0]) == 0.5 and paired_p([1.0], [0.0]) == 1.0
    assert paired_p([0.0] * 5, [1.0] * 5) == pytest.approx(1 / 32)
    with pytest.raises(ValueError):
        paired_p([0.0], [0.0, 1.0])


def test_report_figures_do_not_import_scipy_stats() -> None:
    """The diff's figures on a holdout of 8 templates and of 2000 tasks leave scipy.stats unimported."""
    code = ("import sys; from rsi.core.promotion import paired_p, wilson; import random; r = random.Random(0); "
            "paired_p([r.random() for _ in range(8)], [r.random() for _ in range(8)]); "
            "paired_p([r.randint(0, 4) / 4 for _ in range(2000)], [r.randint(0, 4) / 4 for _ in range(2000)]); "
            "wilson(3, 10); print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
