"""Search outcome (pure): per-task Pareto front, coverage, best single config, adoption.

Input is one tally per (config, task): attempts and passes over finished, non-infra trials.
- the per-task front (as GEPA keeps it): for each task, the configs with the best pass rate on it
  (a task no config solved has an empty front);
- coverage: train tasks solved by any config; an upper bound, not one config's skill;
- best single config: among configs run on the whole split, most tasks solved, then the higher
  pass rate (with its Wilson interval);
- compared at equal attempts: on each task both ran, a config's passes in its first n attempts
  against the baseline's in its first n, n the smaller of the two attempt counts (the baseline runs
  k attempts per task, a candidate's sweep one: counting the baseline's k against the candidate's
  one would favour whoever ran more). Without the attempt order (`seqs`), the baseline's expected
  passes in n attempts (passes * n / attempts) stand in;
- adopted: the best single config that shows no verified regression against the baseline (it
  failed every attempt, at least two, on a task the baseline solved) and beats the baseline on
  the train split beyond noise: a one-sided exact sign test (scipy's binomtest) on the per-task
  differences at equal attempts (tasks it did better on against tasks it did worse on, ties left
  out) at p < ADOPT_ALPHA (0.1). With no losses that takes 4 tasks won; with one loss, 6. Tasks a
  config was built from (`held_out`: a few-shot candidate's demonstration tasks) are left out of
  its test. The baseline if none passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rsi.core.stats import sign_test_p, wilson

Tally = Mapping[tuple[str, str], tuple[int, int]]  # (config, task) -> (attempts, passes)
Seqs = Mapping[tuple[str, str], Sequence[bool]]  # (config, task) -> pass/fail in attempt order
ADOPT_ALPHA = 0.1  # one-sided sign test, candidate better than the baseline at equal attempts


def sign_test(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(at least `wins` of wins + losses under a fair coin); 1.0 if none."""
    return sign_test_p(wins, wins + losses)


@dataclass
class ConfigScore:
    config: str
    tasks_run: int
    tasks_solved: int
    attempts: int
    passes: int
    full_split: bool
    regressions: list[str] = field(default_factory=list)
    # against the baseline at equal attempts, per task: better, worse, and the sign test's p
    wins: int = 0
    losses: int = 0
    p_value: float = 1.0

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


def _at(tally: Tally, seqs: Seqs | None, key: tuple[str, str], n: int) -> float:
    """Passes of `key` in its first `n` attempts (expected passes when the order is not known)."""
    if seqs is not None and key in seqs and len(seqs[key]) >= n:
        return float(sum(bool(x) for x in list(seqs[key])[:n]))
    a, p = tally[key]
    return p * n / a if a else 0.0


def paired(tally: Tally, tasks: list[str], config: str, baseline: str, seqs: Seqs | None = None,
           leave_out: set[str] | frozenset[str] = frozenset()) -> tuple[int, int]:
    """(tasks better, tasks worse) of `config` against `baseline` at equal attempts."""
    wins = losses = 0
    for t in tasks:
        c, b = (config, t), (baseline, t)
        if t in leave_out or tally.get(c, (0, 0))[0] <= 0 or tally.get(b, (0, 0))[0] <= 0:
            continue
        n = min(tally[c][0], tally[b][0])
        d = _at(tally, seqs, c, n) - _at(tally, seqs, b, n)
        wins += d > 0
        losses += d < 0
    return wins, losses


def outcome(tally: Tally, tasks: list[str], baseline: str, skip: set[str] | frozenset[str] = frozenset(),
            *, seqs: Seqs | None = None, held_out: Mapping[str, set[str]] | None = None) -> Outcome:
    """`skip`: tasks a config need not have run to count as swept over the split (task/infra verdicts);
    `seqs`: the attempt order per (config, task), for comparisons at equal attempts; `held_out`: per
    config, tasks left out of its comparison with the baseline (what it was built from)."""
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
        wins, losses = (0, 0) if c == baseline else paired(tally, tasks, c, baseline, seqs,
                                                           (held_out or {}).get(c, set()))
        scores[c] = ConfigScore(c, len(runs), sum(1 for a, p in runs.values() if p > 0),
                                sum(a for a, _ in runs.values()), sum(p for _, p in runs.values()),
                                full_split=all(t in runs or t in skip for t in tasks), regressions=regress,
                                wins=wins, losses=losses, p_value=sign_test(wins, losses))

    def rank(c: str) -> tuple[int, float, int]:
        s = scores[c]
        return (s.tasks_solved, s.rate, int(c == baseline))

    full = [c for c in configs if scores[c].full_split] or [baseline]
    best = max(full, key=rank)
    clean = [c for c in full if c != baseline and not scores[c].regressions and scores[c].p_value < ADOPT_ALPHA]
    adopted = max(clean, key=rank) if clean else baseline  # no gain beyond noise: keep the baseline
    return Outcome(tasks=list(tasks), covered=covered, front=front, scores=scores, best=best, adopted=adopted)


__all__ = ["ADOPT_ALPHA", "ConfigScore", "Outcome", "Seqs", "outcome", "paired", "sign_test", "wilson"]
