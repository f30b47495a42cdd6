"""Attribution rules (DESIGN §7): a verdict for a failed (task, generation) from executed evidence.

Pure: the caller hands over what was run (`Evidence`, one per finished trial) and gets a verdict
back, or None when the evidence decides nothing yet. The rules, in order:

- not failed: some baseline trial passed -> no verdict;
- `infra`: every baseline trial (or every oracle re-run) ended on a sandbox or endpoint error, so
  nothing was learnt; such trials are re-run and never count towards a rate;
- `task`: every baseline trial ended on a `verifier_error` (the verifier could not set itself up), nop
  passes, or the oracle fails (every run) or flips (passes and fails across re-runs);
- `config`: some variant within the contract passed with the same model, confirmed: at least
  CONFIG_PASSES (2) passes on the task, or fewer passes that a one-sided Fisher exact test (scipy)
  still sets apart from the baseline's failures at p < CONFIG_ALPHA (one lucky sample is never
  enough; the best confirmed variant is named);
- `model`: the oracle passed every re-run and no variant tried is confirmed; the confidence grows
  with how many variants were tried (`config_probes` of them reach full weight), and is lower while
  fewer oracle re-runs than the contract asks (`oracle_runs`) are in. A variant that passed once,
  unconfirmed, is named in the reason and caps the confidence at 0.3: the search gives it another
  attempt (rsi.core.search), after which the verdict is revised.

`plan_controls` orders the oracle and nop runs behind these rules by what they tell, so that a tight
budget buys the decisive ones first.
A model (reflection) may propose variants; it never decides a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

KINDS = ("model", "task", "config", "infra")
CONFIG_PASSES = 2  # passes of one variant on the task that make a `config` verdict
CONFIG_ALPHA = 0.05  # ... or a one-sided Fisher exact test against the baseline's attempts below this


def confirmed(passes: int, attempts: int, base_attempts: int) -> bool:
    """Whether a variant's `passes` of `attempts` on a task the baseline failed `base_attempts` times
    is a fix beyond one lucky sample: CONFIG_PASSES passes, or a one-sided Fisher exact test (the
    variant's pass rate above the baseline's 0) at p < CONFIG_ALPHA."""
    if passes >= CONFIG_PASSES:
        return True
    if passes <= 0:
        return False
    from scipy.stats import fisher_exact

    res = fisher_exact([[passes, attempts - passes], [0, base_attempts]], alternative="greater")
    return float(res.pvalue) < CONFIG_ALPHA


@dataclass(frozen=True)
class Evidence:
    """One finished trial as attribution sees it."""

    trial_id: str
    agent: str  # harness | oracle | nop
    passed: bool
    infra: bool = False
    # Ended on an error of the task's own verifier (`verifier_error`: it could not set itself up, or
    # exited non-zero over a passing reward): evidence against the task, never the model.
    task_side: bool = False
    config_digest: str | None = None
    variant: str | None = None  # the candidate's label; None = the generation's own config


@dataclass
class Verdict:
    kind: str
    confidence: float
    reason: str
    evidence: list[str] = field(default_factory=list)
    variant: str | None = None


def _counted(ev: Sequence[Evidence]) -> list[Evidence]:
    return [e for e in ev if not e.infra]


def attribute(
    baseline: Sequence[Evidence],
    oracle: Sequence[Evidence],
    nop: Sequence[Evidence],
    variants: Sequence[Evidence],
    *,
    config_probes: int = 4,
    oracle_runs: int = 1,
) -> Verdict | None:
    """The verdict for one task under one generation (see the module docstring)."""
    base = _counted(baseline)
    if any(e.passed for e in base):
        return None
    ids = [e.trial_id for e in (*baseline, *oracle, *nop, *variants)]
    if not base:
        if baseline:
            return Verdict("infra", 1.0, f"all {len(baseline)} baseline trial(s) ended on infra errors; re-run",
                           [e.trial_id for e in baseline])
        return None
    if all(e.task_side for e in base):
        return Verdict("task", 0.9, f"the task's verifier failed in {len(base)} of {len(base)} baseline trial(s) "
                       "(verifier_error): not the model's failure", ids)
    orc, nops = _counted(oracle), _counted(nop)
    if any(e.passed for e in nops):
        return Verdict("task", 0.95, "doing nothing (nop) passes: the verifier does not check the work", ids)
    if orc and all(not e.passed for e in orc):
        return Verdict("task", 0.95, f"the reference solution fails {len(orc)} of {len(orc)} run(s)", ids)
    if orc and any(not e.passed for e in orc):
        n = sum(e.passed for e in orc)
        return Verdict("task", 0.9, f"the reference solution flips ({n} of {len(orc)} runs pass)", ids)
    var = _counted(variants)
    wins: dict[str, list[int]] = {}
    for e in var:
        key = e.variant or e.config_digest or "?"
        w = wins.setdefault(key, [0, 0])
        w[0] += int(e.passed)
        w[1] += 1
    solved = {k: v for k, v in wins.items() if confirmed(v[0], v[1], len(base))}
    if solved:
        best = max(sorted(solved), key=lambda k: (solved[k][0] / solved[k][1], solved[k][0]))
        p, n = solved[best]
        return Verdict("config", round(0.5 + 0.5 * p / n, 3),
                       f"variant {best} passes {p} of {n} attempt(s) where the baseline passed 0 of {len(base)}",
                       ids, variant=best)
    lucky = sorted(k for k, v in wins.items() if v[0] > 0)
    if not orc:
        if oracle:
            return Verdict("infra", 1.0, "every oracle re-run ended on an infra error; re-run", ids)
        return None  # not yet decidable: the oracle has not run
    tried = len(wins)
    conf = 0.3 + 0.65 * min(1.0, tried / max(config_probes, 1))
    short = len(orc) < oracle_runs
    if short:  # a flip across re-runs (a flaky task) cannot be ruled out yet
        conf *= 0.85
    if lucky:  # passed once: not yet evidence either way
        conf = min(conf, 0.3)
        k = lucky[0]
        tail = (f"{tried} variant(s) tried; {k} passed {wins[k][0]} of {wins[k][1]} attempt(s), unconfirmed "
                f"(a config verdict needs {CONFIG_PASSES} passes)"
                + (f", {len(lucky) - 1} more like it" if len(lucky) > 1 else ""))
    else:
        tail = f"{tried} variant(s) tried, none passed"
    return Verdict("model", round(conf, 3),
                   f"the reference solution passes {len(orc)} of {len(orc)} run(s)"
                   + (f" (the contract asks {oracle_runs})" if short else "")
                   + f"; baseline 0 of {len(base)}, {tail}", ids)


def plan_controls(
    failed: Sequence[str], oracle_done: Mapping[str, int], nop_done: Mapping[str, int], oracle_runs: int,
    cap: int | None = None,
) -> list[tuple[str, str, int]]:
    """The attribution controls still to run, as (task, agent, runs), most telling first: one oracle
    run per failed task (a reference solution that fails makes it a `task` verdict and keeps the
    search off it), then one nop per task, then the rest of the contract's oracle re-runs (which
    catch a flipping task). `cap` bounds the runs (None: all of them); `*_done` count finished,
    non-infra runs already recorded per task."""
    tiers = [[(t, "oracle", 1 - oracle_done.get(t, 0)) for t in failed],
             [(t, "nop", 1 - nop_done.get(t, 0)) for t in failed],
             [(t, "oracle", oracle_runs - max(oracle_done.get(t, 0), 1)) for t in failed]]
    out: dict[tuple[str, str], int] = {}
    left = cap
    for tier in tiers:
        for task, agent, n in tier:
            n = n if left is None else min(n, left)
            if n <= 0:
                continue
            out[(task, agent)] = out.get((task, agent), 0) + n
            if left is not None:
                left -= n
    return [(task, agent, n) for (task, agent), n in out.items()]


__all__ = ["CONFIG_ALPHA", "CONFIG_PASSES", "KINDS", "Evidence", "confirmed", "Verdict", "attribute", "plan_controls"]
