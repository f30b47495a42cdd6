"""Config search planning (rsi.core.search) on a simulated world whose answer is known.

The world mirrors benchmarks/search_efficiency.py without sandboxes: 24 train tasks, 4 any config
solves (the baseline too), 18 that one specific candidate fixes (5/4/3/3/2/1 per useful candidate),
2 that nothing fixes; 20 candidates, 14 of them decoys that fix nothing.
"""

from __future__ import annotations

import statistics

import pytest

from rsi.core.pareto import outcome
from rsi.core.search import SearchState, next_cells

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
    for t in state.tasks:  # every unsolved task has seen every candidate
        if t not in state.base_solved:
            for c in state.candidates:
                state.add(c, t, False)
    state.runs[("turns=8", "need-turns=8-0")] = [1, 1]
    state.add("turns=8", "any-0", False)
    cells = next_cells("adaptive", state, 50, 0, 9, None)
    assert ("turns=8", "any-0", 1) in cells  # the second look before a regression counts
    state.add("turns=8", "any-0", False)
    assert ("turns=8", "any-0", 1) not in next_cells("adaptive", state, 50, 0, 10, None)


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
