"""The group-sequential test promote measures in rounds with (rsi.core.sequential), simulated.

Each simulated promote draws a holdout of UNITS templates x TASKS tasks with per-task pass rates, both
generations' trials (Bernoulli), and runs the real rule: at each look the gate's statistic (the paired test
clustered on templates, rsi.core.promotion.clustered) on the first ceil(k K / looks) trials per task against
the look's Lan-DeMets bound, futility at z <= 0. Under the null (the candidate is its parent) the share of
runs it promotes must stay at or below the contract's alpha (within Monte-Carlo error); under a clear gain
it must need fewer rounds on average than the single look, losing (almost) no power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from rsi.core.contract import Promotion
from rsi.core.promotion import TaskOutcome, clustered, evaluate
from rsi.core.sequential import bounds, decide, schedule, spent

ALPHA, RUNS, UNITS, TASKS, TRIALS = 0.05, 2000, 16, 2, 4


@dataclass
class Sim:
    rejected: float  # share of runs the rule promoted (efficacy at some look)
    rounds: float  # mean rounds run


def simulate(looks: int, gain: float, rule: str = "obrien_fleming", runs: int = RUNS, seed: int = 7,
             futility: float | None = 0.0, units: int = UNITS, tasks: int = TASKS, trials: int = TRIALS,
             learned: float | None = None) -> Sim:
    """The share of `runs` simulated promotes the rule passes, and their mean rounds. Each task's parent rate is
    uniform in 0.05-0.6 and the candidate's that plus `gain`; with `learned`, a share of units that learned
    instead (parent 0-0.1, candidate uniform in 0.2-0.8 on a learned unit, the parent's elsewhere): gains
    spread unevenly over templates, as a model's learning is."""
    rng = np.random.default_rng(seed)
    sched = schedule(trials, looks)
    bnd = bounds(ALPHA, tuple(n / trials for n in sched), rule)  # type: ignore[arg-type]
    wins = rounds = 0
    names = [f"t{u}.{i}" for u in range(units) for i in range(tasks)]
    for _ in range(runs):
        if learned is None:
            base = rng.uniform(0.05, 0.6, size=len(names))
            better = np.minimum(base + gain, 1.0)
        else:
            base = np.repeat(rng.uniform(0.0, 0.1, size=units), tasks)
            hit = np.repeat(rng.random(units) < learned, tasks)
            better = np.where(hit, np.maximum(base, rng.uniform(0.2, 0.8, size=len(names))), base)
        par = rng.random((len(names), trials)) < base[:, None]
        cand = rng.random((len(names), trials)) < better[:, None]
        for k in range(1, looks + 1):
            n = sched[k - 1]

            def arm(x: np.ndarray, n: int = n) -> dict[str, TaskOutcome]:
                return {t: TaskOutcome(t, "f", int(x[i, :n].sum()), n, unit=t.split(".")[0])
                        for i, t in enumerate(names)}

            _, _, p = clustered(arm(par), arm(cand), names)
            d = decide(k, looks, p, bnd[k - 1], True, futility)
            if d == "final":
                d = "efficacy" if p is not None and p < bnd[k - 1] else "futility"
            if d != "continue":
                wins += d == "efficacy"
                rounds += k
                break
    return Sim(wins / runs, rounds / runs)


def mc_ceiling(p: float, n: int) -> float:
    return p + 2.5 * math.sqrt(p * (1 - p) / n)


def test_bounds_match_published_values_and_one_look_is_the_fixed_test() -> None:
    z = [-_ppf(b) for b in bounds(0.025, (0.5, 1.0))]
    assert z == pytest.approx([2.963, 1.969], abs=2e-3)  # Lan-DeMets O'Brien-Fleming, K = 2 (gsDesign)
    z = [-_ppf(b) for b in bounds(0.025, (0.25, 0.5, 0.75, 1.0))]
    assert z == pytest.approx([4.333, 2.963, 2.359, 2.014], abs=2e-3)
    z = [-_ppf(b) for b in bounds(0.025, (0.5, 1.0), "pocock")]
    assert z == pytest.approx([2.157, 2.201], abs=2e-3)
    assert bounds(0.05, (1.0,)) == (0.05,)
    assert spent(0.05, 1.0, "obrien_fleming") == pytest.approx(0.05) and spent(0.05, 1.0, "pocock") == \
        pytest.approx(0.05)
    assert schedule(4, 2) == [2, 4] and schedule(4, 3) == [2, 3, 4] and schedule(2, 4) == [1, 1, 2, 2]


def _ppf(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


@pytest.mark.parametrize("looks,rule", [(2, "obrien_fleming"), (4, "obrien_fleming"), (2, "pocock")])
def test_type_one_error_under_the_null_stays_at_alpha(looks: int, rule: str) -> None:
    seq = simulate(looks, 0.0, rule)
    assert seq.rejected <= mc_ceiling(ALPHA, RUNS), seq
    assert seq.rounds < looks  # the futility bound stops most null runs early


def test_a_clear_gain_stops_sooner_with_almost_the_power_of_one_look() -> None:
    one, seq = simulate(1, 0.25), simulate(2, 0.25)
    assert one.rounds == 1
    assert seq.rounds <= 1.75, seq  # most runs stop at the first look
    assert seq.rejected >= one.rejected - 0.03, (one, seq)
    assert seq.rejected >= 0.8


def test_at_the_demos_eight_templates_pocock_stops_early_where_obrien_fleming_cannot_and_both_keep_alpha() -> None:
    """8 templates x 1 task x 4 trials in 2 looks (the demo's in-skill part before it took 16 x 2). The clustered
    test's smallest p-values there are 1/256 (every template better) and 1/128 (one ties): O'Brien-Fleming's first
    bound (0.0056) admits only the first, Pocock's (0.031) both, so a clear gain stops after one round far more
    often under Pocock, for a few points of power (simulated: 0.93 against 0.98 at +0.5); the overall type-I
    error stays at alpha under either."""
    assert bounds(ALPHA, (0.5, 1.0))[0] < 1 / 128 < bounds(ALPHA, (0.5, 1.0), "pocock")[0]
    runs = 1500
    for rule in ("obrien_fleming", "pocock"):
        null = simulate(2, 0.0, rule, runs=runs, units=8, tasks=1)
        assert null.rejected <= mc_ceiling(ALPHA, runs), (rule, null)
    obf = simulate(2, 0.5, "obrien_fleming", runs=runs, units=8, tasks=1)
    poc = simulate(2, 0.5, "pocock", runs=runs, units=8, tasks=1)
    assert poc.rounds < obf.rounds - 0.1, (obf, poc)
    assert poc.rejected >= obf.rejected - 0.08, (obf, poc)


def test_the_demos_sixteen_templates_by_two_trials_keep_alpha_and_find_uneven_gains_eight_by_four_miss() -> None:
    """The demo's holdout parts are 16 templates x 2 trials, not 8 x 4: the same trials per generation, twice the
    clusters. With 8 the exact clustered test is so coarse (1/256 steps) that a candidate which learned half the
    compositions passes about one time in eight; with 16 about two times in three, and a candidate equal to its
    parent still passes at most alpha of the time."""
    from rsi.loop.cycle.demo import DEMO_IN_SKILL_TEMPLATES, DEMO_LOOKS, DEMO_SPENDING, DEMO_TRIALS

    runs = 600
    demo = {"units": DEMO_IN_SKILL_TEMPLATES, "tasks": 1, "trials": DEMO_TRIALS}
    assert DEMO_IN_SKILL_TEMPLATES * DEMO_TRIALS == 8 * 4
    null = simulate(DEMO_LOOKS, 0.0, DEMO_SPENDING, runs=runs, **demo)
    assert null.rejected <= mc_ceiling(ALPHA, runs), null
    wide = simulate(DEMO_LOOKS, 0.0, DEMO_SPENDING, runs=runs, learned=0.5, **demo)
    narrow = simulate(DEMO_LOOKS, 0.0, DEMO_SPENDING, runs=runs, learned=0.5, units=8, tasks=1, trials=4)
    assert wide.rejected >= 0.5 and wide.rejected >= narrow.rejected + 0.3, (wide, narrow)


def test_evaluate_gates_significance_on_the_looks_bound() -> None:
    parent = {f"t{i}": TaskOutcome(f"t{i}", "a", 0, 4) for i in range(6)}
    cand = {f"t{i}": TaskOutcome(f"t{i}", "a", 3, 4) for i in range(6)}  # p = 1/64 over 6 tasks
    kw = {"parent_major": 1, "candidate_major": 1, "contract_major": 1}
    assert evaluate(parent, cand, Promotion(), **kw).passed
    tight = evaluate(parent, cand, Promotion(), bound=bounds(0.05, (0.5, 1.0))[0], **kw)
    g = {x.name: x for x in tight.gates}["significance"]
    assert not g.passed and g.threshold.startswith("p < 0.005") and "group-sequential" in g.threshold


def test_the_simulation_sees_the_error_of_peeking_at_alpha_every_look(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same simulation with alpha at each of 4 looks, no spending and no futility stop (the mistake the
    bounds prevent) promotes far more than alpha of null runs: the type-I test above can fail."""
    monkeypatch.setitem(globals(), "bounds", lambda a, f, r="obrien_fleming": tuple([a] * len(f)))
    assert simulate(4, 0.0, futility=None).rejected > mc_ceiling(ALPHA, RUNS)


def test_the_diff_counts_the_trials_per_task_the_deciding_look_counted() -> None:
    """A promote that stopped at look 1 of 2 gated on 2 trials per holdout task (K = 4) and 1 per suite task
    (K_suite = 2); `rsi diff` must count the same, even for a parent measured to 4 in its own promotion."""
    from rsi.core.contract import Promotion
    from rsi.report.rates import look_scope
    from rsi.store.queries_rates import RateScope

    scope = RateScope(parts=None, per_task={"holdout": 4, "suite": 2, "train": 1})
    promo = Promotion(looks=2)
    stopped = {"sequential": {"looks": 2, "rounds_run": 1, "history": [{"look": 1, "trials_per_task": 2}]}}
    assert dict(look_scope(scope, stopped, promo).per_task) == {"holdout": 2, "suite": 1, "train": 1}
    full = {"sequential": {"looks": 2, "rounds_run": 2, "history": [{"trials_per_task": 2}, {"trials_per_task": 4}]}}
    assert look_scope(scope, full, promo) is scope
    assert look_scope(scope, {"p_value": 0.01}, promo) is scope and look_scope(scope, None, promo) is scope
