"""Config search planning (rsi.core.search) on a simulated world whose answer is known.

The world mirrors benchmarks/search_efficiency.py without sandboxes: 24 train tasks, 4 any config
solves (the baseline too), 18 that one specific candidate fixes (5/4/3/3/2/1 per useful candidate),
2 that nothing fixes; 20 candidates, 14 of them decoys that fix nothing.
"""

from __future__ import annotations

import statistics

import pytest

from rsi.core.pareto import ADOPT_ALPHA, outcome, paired, sign_test
from rsi.core.search import EXPLORE_ATTEMPTS, SearchState, next_cells

USEFUL = ["temp=0.2", "temp=1.0", "turns=3", "turns=8", "variant=B", "few_shot=[]"]
COUNTS = [5, 4, 3, 3, 2, 1]


def world(decoys: int = 14) -> tuple[list[str], list[str], dict[str, str]]:
    cands = sorted([*USEFUL, *(f"decoy-{i:02d}" for i in range(decoys))])
    fix: dict[str, str] = {}
    tasks = [f"any-{i}" for i in range(4)]
    for c, n in zip(USEFUL, COUNTS, strict=True):
        for i in range(n):
            tasks.append(f"need-{c}-{i}")
            fix[tasks[-1]] = c
    return cands, [*tasks, "never-0", "never-1"], fix


def fresh(decoys: int = 14) -> tuple[SearchState, dict[str, str]]:
    cands, tasks, fix = world(decoys)
    return SearchState(candidates=cands, tasks=tasks, base_solved={t for t in tasks if t.startswith("any")}), fix


def passes(cand: str, task: str, fix: dict[str, str]) -> bool:
    return task.startswith("any") or fix.get(task) == cand


def simulate(strategy: str, budget: int, seed: int, decoys: int = 14, round_size: int = 8) -> SearchState:
    state, fix = fresh(decoys)
    spent = r = 0
    while spent < budget:
        cells = next_cells(strategy, state, min(round_size, budget - spent), seed, r, budget - spent)
        if not cells:
            break
        for cand, task, attempts in cells:
            for _ in range(attempts):
                state.add(cand, task, passes(cand, task, fix))
                spent += 1
        r += 1
    return state


def new_coverage(state: SearchState) -> int:
    return len(state.solved() - state.base_solved)


def adopted(state: SearchState) -> str:
    tally = {k: (v[0], v[1]) for k, v in state.runs.items()}
    for t in state.tasks:
        tally[("baseline", t)] = (1, int(t in state.base_solved))
    return outcome(tally, state.tasks, "baseline").adopted


@pytest.mark.parametrize("budget", [25, 50, 100, 200])
def test_adaptive_covers_about_twice_what_random_covers(budget: int) -> None:
    seeds = range(40)
    a = statistics.mean(new_coverage(simulate("adaptive", budget, s)) for s in seeds)
    r = statistics.mean(new_coverage(simulate("random", budget, s)) for s in seeds)
    assert a >= 1.8 * r, (budget, a, r)


def test_adaptive_names_the_true_best_config_once_the_budget_pays_for_a_sweep() -> None:
    hits = [adopted(simulate("adaptive", 200, s)) for s in range(8)]
    assert hits.count("temp=0.2") >= 6, hits
    # random spreads its trials: no candidate ever runs on the whole split, so nothing is adopted
    assert {adopted(simulate("random", 200, s)) for s in range(4)} == {"baseline"}


def test_a_limited_budget_still_ends_with_a_candidate_swept_over_the_split() -> None:
    for seed in range(6):
        state = simulate("adaptive", 60, seed, decoys=0)
        swept = [c for c in state.candidates if all(state.tried(c, t) for t in state.tasks)]
        assert swept, f"seed {seed}: no candidate ran on every task, so no best single config"


def test_same_evidence_and_seed_plan_the_same_round() -> None:
    state = simulate("adaptive", 40, 3)
    assert next_cells("adaptive", state, 8, 3, 5, 60) == next_cells("adaptive", state, 8, 3, 5, 60)


def test_exploration_spends_only_on_unsolved_tasks_and_never_repeats_a_cell() -> None:
    state = simulate("adaptive", 30, 1)
    cells = next_cells("adaptive", state, 8, 1, 4, None)
    assert cells
    solved = state.solved()
    for cand, task, attempts in cells:
        assert attempts == 1 and task not in solved and state.tried(cand, task) == 0
    assert len(set(cells)) == len(cells)


def test_a_candidate_that_fixed_a_task_gets_the_next_cells() -> None:
    state, fix = fresh()
    for c in state.candidates:  # every candidate missed once, then one fixed a task
        state.add(c, "never-0", False)
    state.add("turns=3", "need-turns=3-0", True)
    cells = next_cells("adaptive", state, 8, 0, 1, None)
    assert [c for c, _, _ in cells] == ["turns=3"] * 8
    assert len({t for _, t, _ in cells}) == 8  # on eight different unsolved tasks


def test_excluded_tasks_are_never_searched() -> None:
    state, _ = fresh()
    state.excluded = {t for t in state.tasks if t.startswith("need-temp=0.2")}
    seen = {t for r in range(10) for _, t, _ in next_cells("adaptive", state, 8, 0, r, None)}
    assert not seen & state.excluded


def test_a_failed_sweep_on_a_baseline_task_gets_one_confirming_attempt() -> None:
    state, _ = fresh(decoys=0)
    for t in state.tasks:  # every unsolved task has seen every candidate as often as exploration allows
        if t not in state.base_solved:
            for c in state.candidates:
                for _ in range(EXPLORE_ATTEMPTS):
                    state.add(c, t, False)
    state.runs[("turns=8", "need-turns=8-0")] = [1, 1]
    state.add("turns=8", "any-0", False)
    cells = next_cells("adaptive", state, 50, 0, 9, None)
    assert ("turns=8", "any-0", 1) in cells  # the second look before a regression counts
    state.add("turns=8", "any-0", False)
    assert ("turns=8", "any-0", 1) not in next_cells("adaptive", state, 50, 0, 10, None)


def test_a_miss_is_tried_again_once_every_cell_had_a_first_look() -> None:
    """The model samples: a candidate that missed an unsolved task once may pass on a second attempt, so
    a budget left after every first look goes to second (then third) attempts, never beyond."""
    state, _ = fresh(decoys=2)
    hard = [t for t in state.tasks if t not in state.base_solved]
    for t in hard:
        for c in state.candidates:
            state.add(c, t, False)
    cells = next_cells("adaptive", state, 8, 0, 1, None)
    assert len(cells) == 8 and all(state.tried(c, t) == 1 and t in hard for c, t, _ in cells)
    for t in hard:
        for c in state.candidates:
            while state.tried(c, t) < EXPLORE_ATTEMPTS:
                state.add(c, t, False)
    assert all(state.tried(c, t) == 0 for c, t, _ in next_cells("adaptive", state, 8, 0, 2, None)
               if t in hard), "exploration must stop at EXPLORE_ATTEMPTS per cell"


def test_random_and_grid_plans() -> None:
    state, _ = fresh(decoys=0)
    r = next_cells("random", state, 8, 0, 0)
    assert len(r) == 8 and all(c in state.candidates and t in state.tasks for c, t, _ in r)
    g = next_cells("grid", state, 500, 0, 0)
    assert len(g) == len(state.candidates) * len(state.tasks)


def test_unknown_strategy_names_the_known_ones() -> None:
    state, _ = fresh()
    with pytest.raises(ValueError, match="adaptive, random, grid"):
        next_cells("bandit", state, 8, 0, 0)


def test_configs_are_compared_with_the_baseline_at_equal_attempts() -> None:
    # the baseline ran 2 attempts per task, the candidate 1: its one attempt meets the baseline's first
    tally = {("baseline", "a"): (2, 1), ("baseline", "b"): (2, 1), ("baseline", "c"): (2, 0),
             ("x", "a"): (1, 1), ("x", "b"): (1, 1), ("x", "c"): (1, 0)}
    seqs = {("baseline", "a"): [False, True], ("baseline", "b"): [True, False], ("baseline", "c"): [False, False],
            ("x", "a"): [True], ("x", "b"): [True], ("x", "c"): [False]}
    assert paired(tally, ["a", "b", "c"], "x", "baseline", seqs) == (1, 0)  # a won; b and c tied
    # without the order, the baseline's expected passes in one attempt (1 of 2 -> 0.5) stand in
    assert paired(tally, ["a", "b", "c"], "x", "baseline") == (2, 0)
    # a task the baseline solved in one of its two attempts and x in neither of its two is a loss
    worse = {**tally, ("x", "b"): (2, 0)}
    assert paired(worse, ["a", "b", "c"], "x", "baseline", {**seqs, ("x", "b"): [False, False]}) == (1, 1)
    assert paired(tally, ["a", "b", "c"], "x", "baseline", seqs, leave_out={"a"}) == (0, 0)


def _tally(wins: int, losses: int, ties: int) -> dict[tuple[str, str], tuple[int, int]]:
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for i in range(wins):
        out[("baseline", f"w{i}")], out[("x", f"w{i}")] = (1, 0), (1, 1)
    for i in range(losses):
        out[("baseline", f"l{i}")], out[("x", f"l{i}")] = (1, 1), (1, 0)
    for i in range(ties):
        out[("baseline", f"t{i}")], out[("x", f"t{i}")] = (1, 0), (1, 0)
    return out


@pytest.mark.parametrize(("wins", "losses", "adopt"), [(3, 0, False), (4, 0, True), (5, 1, False), (6, 1, True)])
def test_a_config_is_adopted_only_when_it_beats_the_baseline_beyond_noise(wins: int, losses: int,
                                                                          adopt: bool) -> None:
    tally = _tally(wins, losses, ties=4)
    tasks = sorted({t for _, t in tally})
    o = outcome(tally, tasks, "baseline")
    assert o.scores["x"].tasks_solved > o.scores["baseline"].tasks_solved  # more solved is not enough
    assert (o.scores["x"].wins, o.scores["x"].losses) == (wins, losses)
    assert (o.scores["x"].p_value < ADOPT_ALPHA) is adopt
    assert o.adopted == ("x" if adopt else "baseline") and o.best == "x"
    # tasks a candidate was built from (a few-shot candidate's demonstrations) do not count for it
    kept = sign_test(wins - 1, losses) < ADOPT_ALPHA
    assert outcome(tally, tasks, "baseline", held_out={"x": {"w0"}}).adopted == ("x" if kept else "baseline")
    assert outcome(_tally(wins + 1, losses, 4), [*tasks, f"w{wins}"], "baseline",
                   held_out={"x": {"w0"}}).adopted == ("x" if adopt else "baseline")


def test_a_fix_gets_a_confirming_attempt_before_the_budget_ends() -> None:
    state, fix = fresh(decoys=0)
    state.add("turns=3", "need-turns=3-0", True)
    assert state.confirm_cells() == [("turns=3", "need-turns=3-0", 1)]
    # with budget to spare the search explores first; the last trials confirm the fix
    assert ("turns=3", "need-turns=3-0", 1) not in next_cells("adaptive", state, 2, 0, 1, 40)
    assert next_cells("adaptive", state, 2, 0, 1, 1) == [("turns=3", "need-turns=3-0", 1)]
    state.add("turns=3", "need-turns=3-0", False)  # 1 of 2: one more attempt, then it stops asking
    assert state.confirm_cells() == [("turns=3", "need-turns=3-0", 1)]
    state.add("turns=3", "need-turns=3-0", False)
    assert state.confirm_cells() == []
    state.add("turns=8", "need-turns=8-0", True)
    state.add("turns=8", "need-turns=8-0", True)  # two passes: confirmed
    assert state.confirm_cells() == []


def test_every_fix_found_before_the_last_round_is_confirmed() -> None:
    for seed in range(4):
        state, fix = fresh()
        spent = r = 0
        found: dict[tuple[str, str], int] = {}  # (candidate, task) -> the round it first passed in
        while spent < 100:
            cells = next_cells("adaptive", state, min(2, 100 - spent), seed, r, 100 - spent)
            if not cells:
                break
            for cand, task, _ in cells:
                ok = passes(cand, task, fix)
                state.add(cand, task, ok)
                spent += 1
                if ok and task not in state.base_solved:
                    found.setdefault((cand, task), r)
            r += 1
        assert found and all(state.passes(c, t) >= 2 for (c, t), at in found.items() if at < r - 1), seed


@pytest.mark.parametrize("budget", [50, 100])
def test_adaptive_covers_twice_what_random_covers_on_tables_drawn_at_random(budget: int) -> None:
    """The P5 benchmark's random solving tables (benchmarks/search_tables.py): other counts per useful value,
    another best value, another decoy order; rounds one wave (2 cells) wide, as rsi expand plans them."""
    from benchmarks.search_tables import draw_table
    from benchmarks.search_tables import new_coverage as new
    from benchmarks.search_tables import simulate as sim

    tables = [draw_table(i) for i in range(100, 112)]
    a = statistics.mean(new(sim(t, "adaptive", budget, 1000 * t.index + s, round_size=2)) for t in tables
                        for s in range(4))
    r = statistics.mean(new(sim(t, "random", budget, 1000 * t.index + s, round_size=2)) for t in tables
                        for s in range(4))
    assert a >= 2.0 * r, (budget, a, r)
