"""Promote's group-sequential test, simulated: type-I error under the null and power under a gain, per number of
looks (the simulation tests/unit/test_sequential.py asserts on, with more runs), recorded for the results page.

    python benchmarks/sequential.py              # 4000 runs per cell (~1-2 min on 2 cores)
    python benchmarks/sequential.py --runs 1000  # quicker, noisier
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from tests.unit.test_sequential import ALPHA, TASKS, TRIALS, UNITS, simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4000)
    ap.add_argument("--gain", type=float, default=0.25)
    ap.add_argument("--demo-gain", type=float, default=0.5, help="the gain simulated at the demo's shape")
    args = ap.parse_args()
    rec = Recorder("sequential", "Promote's sequential test (simulated)",
                   context="Lan-DeMets O'Brien-Fleming-type alpha spending (and Pocock-type at the demo's shape) "
                           "with a non-binding futility stop at z <= 0; "
                           f"{UNITS} templates x {TASKS} tasks x {TRIALS} trials; the demo's holdout parts against the "
                           "8 x 1 x 4 they were, "
                           f"one-sided alpha {ALPHA}, "
                           f"{args.runs} simulated promotes per cell, the gate's own clustered test at each look.")
    ceiling = ALPHA + 2.5 * math.sqrt(ALPHA * (1 - ALPHA) / args.runs)
    for looks in (1, 2, 4):
        null = simulate(looks, 0.0, runs=args.runs)
        print(f"looks {looks}: type-I error {null.rejected:.4f} ({null.rounds:.2f} rounds)", flush=True)
        rec.add(f"type1_looks{looks}", f"type-I error, {looks} look(s)", null.rejected,
                target=f"<= {ceiling:.4f}", note=f"alpha {ALPHA} + 2.5 Monte-Carlo s.e.; {null.rounds:.2f} rounds "
                                                f"on average")
    for looks in (1, 2):
        gain = simulate(looks, args.gain, runs=args.runs)
        print(f"looks {looks}: power {gain.rejected:.4f} under +{args.gain} ({gain.rounds:.2f} rounds)", flush=True)
        rec.add(f"power_looks{looks}", f"power under a +{args.gain:g} gain, {looks} look(s)", gain.rejected,
                note=f"{gain.rounds:.2f} rounds on average")
    # the demo's holdout parts: 16 templates x 2 trials in 2 looks, against the 8 x 4 they were (the same trials per
    # generation). Under an even gain (+demo_gain on every template) and an uneven one (half the templates learned,
    # each to a rate in 0.2-0.8), the model's learning as the demos showed it: some compositions, not all.
    from rsi.loop.cycle.demo import DEMO_IN_SKILL_TEMPLATES, DEMO_TRIALS

    shapes = {"demo": (DEMO_IN_SKILL_TEMPLATES, DEMO_TRIALS), "8x4": (8, 4)}
    for name, (units, trials) in shapes.items():
        for rule in ("obrien_fleming", "pocock"):
            kw = {"runs": args.runs, "units": units, "tasks": 1, "trials": trials}
            null = simulate(2, 0.0, rule, **kw)  # type: ignore[arg-type]
            gain = simulate(2, args.demo_gain, rule, **kw)  # type: ignore[arg-type]
            half = simulate(2, 0.0, rule, learned=0.5, **kw)  # type: ignore[arg-type]
            shape = f"{units} templates x {trials} trials, 2 looks, {rule}"
            print(f"{shape}: type-I {null.rejected:.4f}, power {gain.rejected:.4f} under +{args.demo_gain}, "
                  f"{half.rejected:.4f} with half the templates learned", flush=True)
            key = f"demo_{rule}" if name == "demo" else f"shape8x4_{rule}"
            rec.add(f"{key}_type1", f"type-I error, {shape}", null.rejected, target=f"<= {ceiling:.4f}",
                    note=f"{null.rounds:.2f} rounds on average")
            rec.add(f"{key}_power", f"power under a +{args.demo_gain:g} gain, {shape}", gain.rejected,
                    note=f"{gain.rounds:.2f} rounds on average")
            rec.add(f"{key}_uneven", f"power with half the templates learned (to 0.2-0.8), {shape}",
                    half.rejected, note=f"{half.rounds:.2f} rounds on average")
    rec.write()


if __name__ == "__main__":
    main()
