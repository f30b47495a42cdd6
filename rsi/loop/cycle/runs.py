"""`rsi cycle --cycles N`: generations that compound. Each promoted candidate is the next cycle's parent;
a cycle that ends without a promotion (a rejected candidate, no candidate, a stop) ends the run with its
reason, because the next cycle would only repeat the same parent.

The per-generation table holds what each cycle measured: the template-disjoint holdout (parent ->
candidate, the gated p), the fixed regression suite (parent -> candidate, the non-inferiority p), and the
in-template rate (parent -> candidate on the train split, whose templates update trains on, when the
contract's `promotion.in_template_trials_per_task` asks promote to measure it; else expand's baseline of
the parent). Promote reuses
a parent's finished holdout and suite trials across candidates, so the table also counts how many trials
each cycle's promote reused rather than re-ran.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.phase import CycleOutcome, CycleRequest, cycle
from rsi.loop.hooks import CycleHooks


@dataclass
class GenerationRow:
    """One cycle's parent -> candidate figures (rates in [0, 1]; None where not measured)."""

    cycle_job: str
    parent: str
    candidate: str | None
    verdict: str | None
    holdout: tuple[float | None, float | None] = (None, None)
    holdout_p: float | None = None
    holdout_units: int = 0
    suite: tuple[float | None, float | None] = (None, None)
    suite_p: float | None = None  # the suite's non-inferiority p (small: not worse by the margin, shown)
    in_template: float | None = None  # expand's baseline pass rate of the parent on the train split
    # parent -> candidate on the train tasks, measured by promote when the contract asks (never gated)
    in_template_pair: tuple[float | None, float | None] = (None, None)
    in_template_p: float | None = None
    reused: int = 0  # promote trials reused from earlier measurements (the parent's, mostly)
    # the holdout's parts (in_skill, unseen): part -> (parent, candidate, p, role)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)  # update's samples that trained, by source
    rounds: int = 1  # promote's rounds (the group-sequential looks it ran)
    stopped: str | None = None

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class CyclesOutcome:
    outcomes: list[CycleOutcome] = field(default_factory=list)
    rows: list[GenerationRow] = field(default_factory=list)
    ended: str | None = None  # why the run ended before N cycles (None: all N ran and promoted)

    def as_json(self) -> dict[str, Any]:
        return {"cycles": [o.as_json() for o in self.outcomes], "generations": [r.as_json() for r in self.rows],
                "ended": self.ended}


def row_of(out: CycleOutcome) -> GenerationRow:
    ph = out.phases
    e, p = ph.get("expand", {}), ph.get("promote", {})
    prom = out.results.get("promote")
    return GenerationRow(
        cycle_job=out.job_id, parent=out.generation, candidate=out.candidate, verdict=out.verdict,
        holdout=(p.get("parent_rate"), p.get("candidate_rate")), holdout_p=p.get("p_value"),
        holdout_units=int(p.get("holdout_units") or 0),
        suite=(p.get("suite_parent_rate"), p.get("suite_candidate_rate")), suite_p=p.get("suite_p_value"),
        in_template=e.get("baseline_rate"),
        in_template_pair=(p.get("in_template_parent_rate"), p.get("in_template_candidate_rate")),
        in_template_p=p.get("in_template_p_value"), reused=int(prom.trials.get("reused", 0)) if prom is not None else 0,
        stopped=out.stopped, parts={x["part"]: x for x in p.get("parts") or []},
        samples=dict(ph.get("update", {}).get("samples") or {}), rounds=int(p.get("rounds") or 1))


def run_cycles(ctx: WorkspaceContext, req: CycleRequest, n: int, hooks: CycleHooks | None = None) -> CyclesOutcome:
    """Up to `n` cycles, each on the generation the previous one promoted (see the module docstring)."""
    hooks = hooks or CycleHooks()
    res = CyclesOutcome()
    for i in range(n):
        if n > 1:
            hooks.phase(f"cycle {i + 1} of {n}")
        one = dataclasses.replace(req, resume=req.resume if i == 0 else None, generation=None if i else req.generation)
        out = cycle(ctx, one, hooks)
        res.outcomes.append(out)
        res.rows.append(row_of(out))
        if out.verdict != "promoted":
            if i + 1 < n:
                why = out.stopped or (f"{out.candidate} was {out.verdict}" if out.candidate else "no candidate")
                res.ended = f"cycle {i + 1} of {n} ended without a promotion ({why}); no later cycle was run"
            break
    return res


__all__ = ["CyclesOutcome", "GenerationRow", "row_of", "run_cycles"]
