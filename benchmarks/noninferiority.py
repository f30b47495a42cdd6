"""Promote's non-inferiority and family-regression tests, simulated at the demo's shape: type-I error and power of
each rule (the simulation tests/unit/test_noninferiority.py asserts on, with more runs), beside the rule each
replaced (measured in the same run), recorded for the results page.

    python benchmarks/noninferiority.py              # 4000 runs per cell (a few minutes on 2 cores)
    python benchmarks/noninferiority.py --runs 1000  # quicker, noisier

Shapes (rsi.loop.cycle.demo and the contract): the unseen part 16 templates x 1 task x 2 trials and the starter
suite (every task of suites/starter x the contract's suite_trials_per_task), both in 2 looks (O'Brien-Fleming
spending for non-inferiority, a pass at either look counted), margins from design_margin; family regression over the
32 holdout tasks (unseen and in-skill) in 7 families x 2 trials, ceiling 0.1, Holm at alpha 0.05. Type-I error: the
candidate worse by exactly the margin (non-inferiority passes) or every family down by exactly the ceiling (the gate
fails), the worst of the base-rate cases simulated.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.holdout_rates import TaskOutcome, family_rates, paired_p  # noqa: E402
from rsi.core.noninferiority import UnitCounts  # noqa: E402
from tests.unit.test_noninferiority import (  # noqa: E402
    ALPHA,
    CEILING,
    DEMO_HOLDOUT_TEMPLATES,
    DEMO_TRIALS,
    SUITE_TASKS,
    SUITE_TRIALS,
    demo_margin,
    simulate_family,
    simulate_ni,
)


def old_noninferiority(units: list[UnitCounts], margin: float, _level: float) -> bool:
    """The rule before: pass unless a one-sided paired test shows the candidate below the parent by more than
    the margin (p < alpha): the burden on the evidence of harm."""
    p = paired_p([u.parent for u in units], [u.candidate + margin for u in units], alternative="less")
    return not (p is not None and p < ALPHA)


def old_family(p: dict[str, TaskOutcome], c: dict[str, TaskOutcome], ceiling: float) -> bool:
    """The rule before: any family's pooled rate down by more than the ceiling fails (a point estimate)."""
    return any(-f.delta > ceiling + 1e-12 for f in family_rates(p, c, sorted(p)))


def say(rec: Recorder) -> None:
    """Print the figure just added: one line, the old rule's figure beside it."""
    f = rec.figures[-1]
    old = f.compare[0].value if f.compare else None
    print(f"{f.label}: {f.value:.4f}" + (f" (old rule {old})" if old is not None else "")
          + (f", target {f.target}" if f.target else "") + (f"; {f.note}" if f.note else ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=4000)
    args = ap.parse_args()
    n = args.runs
    rec = Recorder("noninferiority", "Promote's non-inferiority and family-regression tests (simulated)",
                   context=f"demo's shape: unseen {DEMO_HOLDOUT_TEMPLATES} templates x {DEMO_TRIALS} trials, suite "
                           f"{SUITE_TASKS} tasks x {SUITE_TRIALS} trials, 2 looks; family regression over 32 tasks "
                           f"in 7 families; one-sided alpha {ALPHA}; {n} simulated promotes per cell; the old rule "
                           "in the same run as the baseline")
    ceiling = ALPHA + 2.5 * math.sqrt(ALPHA * (1 - ALPHA) / n)
    for part, units, trials in (("unseen", DEMO_HOLDOUT_TEMPLATES, DEMO_TRIALS), ("suite", SUITE_TASKS, SUITE_TRIALS)):
        m = demo_margin(units * trials)
        cases = {"rates U(m, m+0.5)": (m, m + 0.5), "rate 0.5": (0.5, 0.5), "rate m": (m, m)}
        worst, worst_case, old = 0.0, "", 0.0
        for case, (lo, hi) in cases.items():
            x = simulate_ni(m, -m, units=units, trials=trials, lo=lo, hi=hi, runs=n)
            if x >= worst:
                worst, worst_case = x, case
            old = max(old, simulate_ni(m, -m, units=units, trials=trials, lo=lo, hi=hi, runs=n,
                                       test=old_noninferiority))
        rec.add(f"{part}_type1", f"{part}: non-inferiority passes a candidate worse by the margin {m:.2f} (type-I)",
                worst, target=f"<= {ceiling:.4f}", compare={"old rule": round(old, 4)},
                note=f"worst of {', '.join(cases)}: {worst_case}")
        say(rec)
        for gain in (0.0, 0.1, 0.2):
            x = simulate_ni(m, gain, units=units, trials=trials, runs=n)
            y = simulate_ni(m, gain, units=units, trials=trials, runs=n, test=old_noninferiority)
            rec.add(f"{part}_power_{gain:g}", f"{part}: passes a candidate {gain:+.1f} vs its parent (power)", x,
                    compare={"old rule": round(y, 4)}, note="parent rates U(0.1, 0.6)")
            say(rec)
    t1 = simulate_family({"*": CEILING}, lo=CEILING, hi=CEILING + 0.5, runs=n)
    t1_old = simulate_family({"*": CEILING}, lo=CEILING, hi=CEILING + 0.5, runs=n, rule=old_family)
    rec.add("family_type1", f"family regression fails when every family drops by exactly {CEILING} (type-I)", t1,
            target=f"<= {ceiling:.4f}", compare={"old rule": round(t1_old, 4)})
    say(rec)
    for label, key, drops, lo, hi in (("no change (noise alone)", "family_noise", {}, 0.1, 0.6),
                                      ("one family down 0.5", "family_power_half", {"f0": 0.5}, 0.6, 0.9),
                                      ("one family lost outright (1.0 -> 0.0)", "family_power_all", {"f0": 1.0},
                                       1.0, 1.0)):
        x = simulate_family(drops, lo=lo, hi=hi, runs=n)
        y = simulate_family(drops, lo=lo, hi=hi, runs=n, rule=old_family)
        rec.add(key, f"family regression fails: {label}", x, compare={"old rule": round(y, 4)})
        say(rec)
    rec.write()


if __name__ == "__main__":
    main()
