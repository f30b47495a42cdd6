"""Config search over harness-config candidates: which (candidate, task, attempts) cells to run next.

Pure and deterministic for a given seed and evidence, so a resumed search plans the same rounds.
The state is what was run: per (candidate, task) the attempts and passes (infra excluded).

Strategies:
- `adaptive`: spend on unsolved tasks and on candidates that fix things. A candidate's score is its
  posterior mean fix rate on the tasks the baseline failed, from a Beta(PRIOR) prior that expects a
  candidate to fix about one unsolved task in eleven (in real search spaces most values fix
  nothing). Each cell goes to the best-scoring candidate that has an unsolved task it has not tried
  (one cheap attempt, on the task tried least, spread over the round's tasks): an untried candidate
  scores above one that missed, so every candidate gets a first look, and one that fixed something
  scores far above both and keeps the cells until its rate falls to the prior's. The model samples, so
  one miss is weak evidence: once every unsolved task has seen every candidate, exploration goes round
  again (a second, then a third attempt per cell, EXPLORE_ATTEMPTS in all) while the budget lasts. When the budget
  left (`left`, in trials) would no longer pay for it, or when every unsolved task has seen every
  candidate, the leading candidates are swept over the rest of the train split, most tasks solved
  first (successive halving: the top half first), with one more attempt where a sweep fails a task
  the baseline solved, so a regression is confirmed before it counts, and a best single config can
  be named. A fix is one pass; an attribution `config` verdict needs two (rsi.core.attribution), so
  each task a candidate fixed once gets one more attempt (two more at most) before the budget ends:
  these confirmations come first in the last rounds, ahead of the sweep (when the budget cannot pay
  for both, the leader's own confirmations and sweep come first). Rounds are as small as the
  caller asks (`rsi expand` asks for as many cells as it runs at once), so a fix is exploited on the
  very next round.
- `random`: a uniformly random candidate on a uniformly random train task, one attempt each.
- `grid`: every candidate on every train task, in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

STRATEGIES = ("adaptive", "random", "grid")
Cell = tuple[str, str, int]  # (candidate, task, attempts)
PRIOR = (0.2, 2.0)  # Beta(a, b) over a candidate's fix rate on unsolved tasks: mean 1/11
CONFIRM = 2  # passes that make a fix a `config` verdict (rsi.core.attribution.CONFIG_PASSES)
CONFIRM_ATTEMPTS = 3  # attempts a once-passed fix may get before the search stops confirming it
EXPLORE_ATTEMPTS = 3  # attempts exploration gives one (candidate, unsolved task) at most, one round at a time


@dataclass
class SearchState:
    candidates: list[str]  # candidate ids in priority order (the baseline is not one)
    tasks: list[str]  # every train task of the search
    base_solved: set[str] = field(default_factory=set)  # tasks the baseline solved
    excluded: set[str] = field(default_factory=set)  # task/infra verdicts: searching them says nothing
    runs: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # (cand, task) -> [attempts, passes]

    def add(self, cand: str, task: str, passed: bool) -> None:
        r = self.runs.setdefault((cand, task), [0, 0])
        r[0] += 1
        r[1] += int(passed)

    def tried(self, cand: str, task: str) -> int:
        return self.runs.get((cand, task), [0, 0])[0]

    def passes(self, cand: str, task: str) -> int:
        return self.runs.get((cand, task), [0, 0])[1]

    def solved_by(self, cand: str) -> set[str]:
        return {t for (c, t), (_, p) in self.runs.items() if c == cand and p > 0}

    def solved(self) -> set[str]:
        """Tasks some config (baseline included) solved."""
        return set(self.base_solved) | {t for (_, t), (_, p) in self.runs.items() if p > 0}

    def targets(self) -> list[str]:
        """Unsolved tasks worth searching, fewest tries first (stable)."""
        done = self.solved() | self.excluded
        left = [t for t in self.tasks if t not in done]
        return sorted(left, key=lambda t: (sum(self.tried(c, t) for c in self.candidates), self.tasks.index(t)))

    def record(self, cand: str) -> tuple[int, int]:
        """(tasks fixed, tasks tried) by `cand` among the tasks the baseline failed."""
        hard = [t for t in self.tasks if t not in self.base_solved and t not in self.excluded]
        return (sum(1 for t in hard if self.passes(cand, t) > 0), sum(1 for t in hard if self.tried(cand, t) > 0))

    def confirm_cells(self) -> list[Cell]:
        """One more attempt for each fix not yet confirmed: a (candidate, task) with one pass on a task
        the baseline failed, fewer than CONFIRM passes and CONFIRM_ATTEMPTS attempts (sorted, so the plan is
        stable)."""
        out: list[Cell] = []
        for (c, t), (a, p) in sorted(self.runs.items()):
            if (0 < p < CONFIRM and a < CONFIRM_ATTEMPTS and t not in self.base_solved and t not in self.excluded
                    and c in self.candidates):
                out.append((c, t, 1))
        return out

    def sweep_cells(self, cand: str) -> list[Cell]:
        """What sweeping `cand` over the split still needs: every task it has not run, and one more
        attempt where its only attempt failed a task the baseline solved (a regression to confirm)."""
        out: list[Cell] = []
        for t in self.tasks:
            if t in self.excluded:
                continue
            a, p = self.tried(cand, t), self.passes(cand, t)
            if a == 0 or (t in self.base_solved and p == 0 and a == 1):
                out.append((cand, t, 1))
        return out


def next_cells(strategy: str, state: SearchState, n: int, seed: int, round_no: int,
               left: int | None = None, explore: int = EXPLORE_ATTEMPTS) -> list[Cell]:
    """Up to `n` cells to run next; empty when the strategy has nothing left worth running.

    `left`: trials the budget still pays for, this round's included (None: not known); `explore`: attempts
    `adaptive` gives one (candidate, unsolved task) at most (1: a single look, for a model that does not sample)."""
    if n <= 0 or not state.candidates:
        return []
    if strategy == "random":
        rng = random.Random(f"{seed}:{round_no}")
        pool = [t for t in state.tasks if t not in state.excluded]
        return [(rng.choice(state.candidates), rng.choice(pool), 1) for _ in range(n)] if pool else []
    if strategy == "grid":
        out = [(c, t, 1) for c in state.candidates for t in state.tasks
               if t not in state.excluded and state.tried(c, t) == 0]
        return out[:n]
    if strategy != "adaptive":
        raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    return _adaptive(state, n, seed, round_no, left, explore)


def _order(state: SearchState, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    return {c: i for i, c in enumerate(rng.sample(state.candidates, len(state.candidates)))}


def _leaders(state: SearchState, order: dict[str, int]) -> list[str]:
    """Candidates that fixed something, most tasks fixed first."""
    return sorted((c for c in state.candidates if state.solved_by(c)),
                  key=lambda c: (-len(state.solved_by(c)), -state.record(c)[0], order[c]))


def _adaptive(state: SearchState, n: int, seed: int, round_no: int, left: int | None,
              explore: int = EXPLORE_ATTEMPTS) -> list[Cell]:
    order = _order(state, seed)
    leaders = _leaders(state, order)
    confirm = state.confirm_cells()
    if left is not None:
        sweep = state.sweep_cells(leaders[0]) if leaders else []
        mine = [c for c in confirm if c[0] == leaders[0]] if leaders else []
        # the last round that still pays for every confirmation and the leader's sweep, else for the
        # leader's own confirmations and sweep (a best single config matters more than the others' fixes)
        for due in (confirm + sweep, mine + sweep):
            if sweep and left - n <= len(due) <= left:
                return due[:n]
        if confirm and len(confirm) >= left - n:  # what is left goes to confirming the fixes
            return confirm[:n]
    out = _explore(state, n, seed, round_no, order, explore)
    return out or (confirm + _sweep(state, n, leaders))[:n]


def _explore(state: SearchState, n: int, seed: int, round_no: int, order: dict[str, int],
             explore: int = EXPLORE_ATTEMPTS) -> list[Cell]:
    rng = random.Random(f"{seed}:{round_no}")
    targets = state.targets()
    if not targets:
        return []
    a0, b0 = PRIOR
    # the round's depth: cells with fewer attempts than it may run (a first look for every cell before any
    # second attempt, and so on)
    depth = 1 + min(state.tried(c, t) for c in state.candidates for t in targets)
    if depth > explore:
        return []
    hard = [t for t in state.tasks if t not in state.base_solved and t not in state.excluded]
    # a candidate's score counts attempts, so one that missed a cell twice ranks below one that missed once
    record = {c: [state.record(c)[0], sum(state.tried(c, t) for t in hard)] for c in state.candidates}
    load = {t: sum(state.tried(c, t) for c in state.candidates) for t in targets}
    planned: set[tuple[str, str]] = set()
    busy = dict.fromkeys(targets, 0)
    out: list[Cell] = []
    while len(out) < n:
        best: tuple[tuple[float, int, int], str, list[str]] | None = None
        for c in state.candidates:
            opts = [t for t in targets if state.tried(c, t) < depth and (c, t) not in planned]
            if not opts:
                continue
            fixed, tried = record[c]
            key = ((a0 + fixed) / (a0 + b0 + tried), -tried, -order[c])
            if best is None or key > best[0]:
                best = (key, c, opts)
        if best is None:
            break
        _, cand, opts = best
        fewest = min((busy[t], load[t]) for t in opts)
        task = rng.choice([t for t in opts if (busy[t], load[t]) == fewest])
        planned.add((cand, task))
        busy[task] += 1
        record[cand][1] += 1  # counted as a miss until it runs, so a round spreads when scores are close
        out.append((cand, task, 1))
    return out


def _sweep(state: SearchState, n: int, leaders: list[str]) -> list[Cell]:
    half = leaders[: max(1, (len(leaders) + 1) // 2)]
    for group in (half, leaders[len(half):]):
        out = [cell for c in group for cell in state.sweep_cells(c)]
        if out:
            return out[:n]
    return []


__all__ = ["CONFIRM", "CONFIRM_ATTEMPTS", "EXPLORE_ATTEMPTS", "PRIOR", "STRATEGIES", "Cell", "SearchState",
           "next_cells"]
