"""Config search over harness-config candidates: which (candidate, task, attempts) cells to run next.

Pure and deterministic for a given seed and evidence, so a resumed search plans the same rounds.
The state is what was run: per (candidate, task) the attempts and passes (infra excluded).

Strategies:
- `adaptive`: spend on unsolved tasks and promising candidates. Round after round, every task no
  config has solved yet gets one cheap 1-attempt check of the candidate with the best score that
  has not tried it (a Beta-mean + UCB bandit over candidates, fed by what each solved elsewhere).
  When every unsolved task has seen every candidate, the candidates that solved something are
  swept over the rest of the train split, most solved first (successive halving: the top half
  first), with one more attempt where a sweep fails a task the baseline solved, so a regression
  is confirmed before it counts.
- `random`: a uniformly random candidate on a uniformly random train task, one attempt each.
- `grid`: every candidate on every train task, in order.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

STRATEGIES = ("adaptive", "random", "grid")
Cell = tuple[str, str, int]  # (candidate, task, attempts)


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


def _score(state: SearchState, cand: str, total: int) -> float:
    tries = sum(a for (c, _), (a, _) in state.runs.items() if c == cand)
    wins = sum(p for (c, _), (_, p) in state.runs.items() if c == cand)
    return (wins + 1) / (tries + 2) + math.sqrt(2 * math.log(total + 2) / (tries + 1))


def next_cells(strategy: str, state: SearchState, n: int, seed: int, round_no: int) -> list[Cell]:
    """Up to `n` cells to run next; empty when the strategy has nothing left worth running."""
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
    return _adaptive(state, n, seed)


def _adaptive(state: SearchState, n: int, seed: int) -> list[Cell]:
    rng = random.Random(seed)
    order = {c: i for i, c in enumerate(rng.sample(state.candidates, len(state.candidates)))}
    total = sum(a for a, _ in state.runs.values())
    scores = {c: _score(state, c, total) for c in state.candidates}
    out: list[Cell] = []
    picked = dict.fromkeys(state.candidates, 0)  # spread one round over candidates that score alike
    for t in state.targets():
        untried = [c for c in state.candidates if state.tried(c, t) == 0]
        if untried:
            best = max(untried, key=lambda c: (scores[c] - 0.05 * picked[c], -order[c]))
            picked[best] += 1
            out.append((best, t, 1))
            if len(out) >= n:
                return out
    if out:
        return out
    # Sweep: promising candidates over the rest of the split (regressions on baseline-solved tasks
    # get one confirming attempt); most tasks solved first, top half before the rest.
    promising = sorted((c for c in state.candidates if state.solved_by(c)),
                       key=lambda c: (-len(state.solved_by(c)), order[c]))
    half = promising[: max(1, (len(promising) + 1) // 2)]
    for group in (half, promising[len(half):]):
        for c in group:
            for t in state.tasks:
                if t in state.excluded:
                    continue
                a, p = state.tried(c, t), state.passes(c, t)
                if a == 0 or (t in state.base_solved and p == 0 and a == 1):
                    out.append((c, t, 1))
                    if len(out) >= n:
                        return out
        if out:
            return out
    return out


__all__ = ["STRATEGIES", "Cell", "SearchState", "next_cells"]
