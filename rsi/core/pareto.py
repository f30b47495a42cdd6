"""Search outcome (pure): per-task Pareto front, coverage, best single config, adoption.

Input is one tally per (config, task): attempts and passes over finished, non-infra trials.
- the per-task front (as GEPA keeps it): for each task, the configs with the best pass rate on it
  (a task no config solved has an empty front);
- coverage: train tasks solved by any config; an upper bound, not one config's skill;
- best single config: among configs run on the whole split, most tasks solved, then the higher
  pass rate (with its Wilson interval);
- adopted: the best single config that shows no verified regression against the baseline (it
  failed every attempt, at least two, on a task the baseline solved); the baseline if none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Tally = Mapping[tuple[str, str], tuple[int, int]]  # (config, task) -> (attempts, passes)


def wilson(passes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a pass rate (scipy's binomtest)."""
    if n <= 0:
        return (0.0, 1.0)
    from scipy.stats import binomtest

    ci = binomtest(passes, n).proportion_ci(confidence_level=level, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass
class ConfigScore:
    config: str
    tasks_run: int
    tasks_solved: int
    attempts: int
    passes: int
    full_split: bool
    regressions: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.passes / self.attempts if self.attempts else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.passes, self.attempts)


@dataclass
class Outcome:
    tasks: list[str]
    covered: list[str]
    front: dict[str, list[str]]  # task -> configs with the best pass rate on it (empty: unsolved)
    scores: dict[str, ConfigScore]
    best: str
    adopted: str

    @property
    def coverage(self) -> float:
        return len(self.covered) / len(self.tasks) if self.tasks else 0.0


def outcome(tally: Tally, tasks: list[str], baseline: str, skip: set[str] | frozenset[str] = frozenset()) -> Outcome:
    """`skip`: tasks a config need not have run to count as swept over the split (task/infra verdicts)."""
    configs = sorted({c for c, _ in tally} | {baseline})
    front: dict[str, list[str]] = {}
    for t in tasks:
        rates = {c: p / a for (c, tt), (a, p) in tally.items() if tt == t and a > 0}
        top = max(rates.values(), default=0.0)
        front[t] = sorted(c for c, r in rates.items() if r == top) if top > 0 else []
    covered = [t for t in tasks if front[t]]
    base_solved = {t for t in tasks if tally.get((baseline, t), (0, 0))[1] > 0}
    scores: dict[str, ConfigScore] = {}
    for c in configs:
        runs = {t: tally[(c, t)] for t in tasks if (c, t) in tally and tally[(c, t)][0] > 0}
        regress = [t for t in sorted(base_solved) if t in runs and runs[t][1] == 0 and runs[t][0] >= 2]
        scores[c] = ConfigScore(c, len(runs), sum(1 for a, p in runs.values() if p > 0),
                                sum(a for a, _ in runs.values()), sum(p for _, p in runs.values()),
                                full_split=all(t in runs or t in skip for t in tasks), regressions=regress)

    def rank(c: str) -> tuple[int, float, int]:
        s = scores[c]
        return (s.tasks_solved, s.rate, int(c == baseline))

    full = [c for c in configs if scores[c].full_split] or [baseline]
    best = max(full, key=rank)
    clean = [c for c in full if not scores[c].regressions]
    adopted = max(clean, key=rank) if clean else baseline
    if scores[adopted].tasks_solved <= scores[baseline].tasks_solved:
        adopted = baseline  # no verified gain: keep the baseline
    return Outcome(tasks=list(tasks), covered=covered, front=front, scores=scores, best=best, adopted=adopted)


__all__ = ["ConfigScore", "Outcome", "outcome", "wilson"]
