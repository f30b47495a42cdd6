"""The attribution rules (rsi.core.attribution) and the order the controls behind them run in."""

from __future__ import annotations

from rsi.core.attribution import Evidence, attribute, confirmed, plan_controls


def _ev(agent: str, *passed: bool, variant: str | None = None) -> list[Evidence]:
    return [Evidence(f"{agent}-{variant}-{i}", agent, p, variant=variant) for i, p in enumerate(passed)]


def test_each_kind_from_its_evidence() -> None:
    base = _ev("harness", False, False)
    assert attribute(_ev("harness", True, False), [], [], []) is None  # not failed
    assert attribute(base, _ev("oracle", True, True), _ev("nop", True), []).kind == "task"  # type: ignore[union-attr]
    flip = attribute(base, _ev("oracle", True, False), _ev("nop", False), [])
    assert flip is not None and flip.kind == "task" and "flips" in flip.reason
    fixed = attribute(base, [], [], _ev("harness", True, False, True, variant="t=0.2") + _ev("harness", False,
                                                                                            variant="x"))
    assert fixed is not None and (fixed.kind, fixed.variant) == ("config", "t=0.2")
    assert attribute(base, [], [], _ev("harness", False, variant="x")) is None  # no oracle yet: undecided
    model = attribute(base, _ev("oracle", True, True), _ev("nop", False), _ev("harness", False, variant="x"),
                      oracle_runs=2)
    assert model is not None and model.kind == "model" and len(model.evidence) == 6


def test_model_verdict_is_less_sure_while_oracle_reruns_are_missing() -> None:
    base, nop, var = _ev("harness", False), _ev("nop", False), _ev("harness", False, variant="x")
    full = attribute(base, _ev("oracle", True, True), nop, var, oracle_runs=2)
    short = attribute(base, _ev("oracle", True), nop, var, oracle_runs=2)
    assert full is not None and short is not None and short.kind == full.kind == "model"
    assert short.confidence < full.confidence and "the contract asks 2" in short.reason
    assert "contract asks" not in full.reason


def test_controls_run_the_decisive_runs_first_under_a_cap() -> None:
    tasks = ["a", "b", "c"]
    everything = plan_controls(tasks, {}, {}, oracle_runs=2)
    assert sorted(everything) == [("a", "nop", 1), ("a", "oracle", 2), ("b", "nop", 1), ("b", "oracle", 2),
                                  ("c", "nop", 1), ("c", "oracle", 2)]
    # a cap of 4: one oracle run per task first (a broken task leaves the search), then a nop
    assert plan_controls(tasks, {}, {}, oracle_runs=2, cap=4) == [("a", "oracle", 1), ("b", "oracle", 1),
                                                                  ("c", "oracle", 1), ("a", "nop", 1)]
    assert plan_controls(tasks, {}, {}, oracle_runs=2, cap=0) == []
    # what is recorded already is not asked again
    done = plan_controls(tasks, {"a": 2, "b": 1}, {"a": 1}, oracle_runs=2)
    assert sorted(done) == [("b", "nop", 1), ("b", "oracle", 1), ("c", "nop", 1), ("c", "oracle", 2)]
    assert sum(n for _, _, n in plan_controls(tasks, {}, {}, oracle_runs=3, cap=7)) == 7


def test_one_lucky_pass_is_not_a_config_verdict() -> None:
    base, orc, nop = _ev("harness", False, False), _ev("oracle", True, True), _ev("nop", False)
    once = attribute(base, orc, nop, _ev("harness", True, variant="t=0.2") + _ev("harness", False, variant="x"))
    assert once is not None and once.kind == "model" and once.variant is None
    assert once.confidence <= 0.3 and "t=0.2 passed 1 of 1 attempt(s), unconfirmed" in once.reason
    # one pass in two attempts is still one lucky sample
    half = attribute(base, orc, nop, _ev("harness", True, False, variant="t=0.2"))
    assert half is not None and half.kind == "model"
    # the second pass confirms it
    twice = attribute(base, orc, nop, _ev("harness", True, True, variant="t=0.2"))
    assert twice is not None and (twice.kind, twice.variant) == ("config", "t=0.2") and twice.confidence == 1.0
    assert "passes 2 of 2" in twice.reason
    # without the oracle a lucky pass decides nothing yet
    assert attribute(base, [], [], _ev("harness", True, variant="t=0.2")) is None


def test_a_single_pass_confirms_only_against_many_baseline_failures() -> None:
    # one-sided Fisher exact test: 1 of 1 against 0 of k has p = 1 / (k + 1)
    assert not confirmed(1, 1, 2) and not confirmed(1, 1, 18)
    assert confirmed(1, 1, 20)  # p = 1/21 < 0.05
    assert confirmed(2, 5, 1) and not confirmed(0, 3, 50)
