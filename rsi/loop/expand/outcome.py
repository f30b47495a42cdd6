"""Expansion's preflight estimate and its outcome: coverage, best single config, adopted config.

The adopted config (the best single config with no verified regression against the baseline that
beats it on the train split beyond noise: rsi.core.pareto's sign test at equal attempts) is written
to `harness_configs/<base>-<job>.yaml` under that new name, with its digest, parent digest and the
expand job in a header, and stored by digest.
When no candidate beats the baseline nothing is written: the outcome says so, and its adopted digest
is the baseline's own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.integrity import integrity_counts
from rsi.core.pareto import Outcome
from rsi.core.trial import is_infra
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.evidence import BASELINE, Pool, read_book, search_outcome, verdicts
from rsi.loop.stages import ChildJobs
from rsi.store.files import write_atomic

FALLBACK = {"tokens": 2000.0, "minutes": 0.5}  # per harness trial when this generation has no record yet


@dataclass
class Preflight:
    """The plan in the budget's unit. Per-trial figures come from this generation's recorded trials:
    harness trials for the baseline and the search (`tokens`: prompt + completion; `minutes`: t_total),
    oracle and nop trials for the attribution controls (`minutes` only: they call no model, so they cost
    no tokens). Without a record the harness figure is FALLBACK and the controls are costed like a
    harness trial (an upper bound: they skip the model); `describe` says which figures are fallbacks."""

    unit: str
    limit: float
    baseline_trials: int
    reused: int
    control_trials: int
    per_trial: float
    estimated: bool  # True: no recorded harness trials of this generation, a fallback figure
    per_control: float = 1.0  # per oracle/nop trial, in the unit
    control_estimated: bool = False  # True: no recorded oracle/nop trials, the harness figure stands in
    recorded: int = 0  # harness trials the per-trial figure is the mean of
    recorded_controls: int = 0
    controls_reused: int = 0  # oracle/nop runs of the failed tasks already recorded
    spent: float = 0.0  # what this job spent already (a resume)
    searching: bool = True  # candidates to search: the controls then get at most half of what is left

    @property
    def controls_now(self) -> int:
        """Controls run before the search: at most half of what the baseline leaves (rsi.loop.expand.phase);
        the rest wait until the search is done. Tokens: controls spend none, all run first."""
        if not self.searching or self.unit == "tokens":
            return self.control_trials
        left = self.limit - self.spent - self.baseline_cost
        return min(self.control_trials, max(0, int(left / 2 / max(self.per_control, 1e-9))))

    @property
    def baseline_cost(self) -> float:
        return self.baseline_trials * self.per_trial

    @property
    def control_cost(self) -> float:
        return self.controls_now * self.per_control

    def describe(self) -> str:
        left = self.limit - self.spent - self.baseline_cost - self.control_cost
        if self.unit == "trials":
            how = "1 per trial"
        else:
            how = (f"{self.per_trial:.3g} {self.unit} per harness trial, "
                   + ("fallback estimate (no recorded harness trial of this generation)" if self.estimated
                      else f"mean of {self.recorded} recorded harness trial(s)"))
            if self.unit == "minutes":
                how += (f"; {self.per_control:.3g} per oracle/nop trial, "
                        + ("as a harness trial (none recorded)" if self.control_estimated
                           else f"mean of {self.recorded_controls} recorded"))
        already = f", {self.spent:.4g} spent already" if self.spent else ""
        wait = self.control_trials - self.controls_now
        later = (f", {wait} more once the search is done (half of what the baseline leaves is kept for it)"
                 if wait else "")
        return (f"plan: baseline {self.baseline_trials} trial(s) ({self.reused} reused) ~{self.baseline_cost:.4g} "
                f"{self.unit}; attribution controls {self.controls_now} trial(s) ({self.controls_reused} "
                f"reused) ~{self.control_cost:.4g}{later}; "
                + (f"training-data sources and search ~{max(left, 0):.4g}" if self.searching
                   else f"training-data sources ~{max(left, 0):.4g} (no config search)")
                + f" {self.unit} of {self.limit:g}{already} ({how})")


def preflight(ctx: WorkspaceContext, gen: str, pool: Pool, attempts: int, unit: str, limit: float,
              spent: float = 0.0, searching: bool = True) -> Preflight:
    """`spent`: what the job being resumed spent already (0 for a new job); `searching`: whether
    there are candidates to search (a search_space or proposals)."""
    book = read_book(ctx, gen, pool)
    reused = sum(min(attempts, len(book.counted(BASELINE, n))) for n in pool.names)
    new = len(pool.names) * attempts - reused
    solved = {n for n in pool.names if any(t.passed for t in book.counted(BASELINE, n))}
    runs = ctx.contract.attribution.oracle_reruns
    unsolved = [n for n in pool.names if n not in solved]
    have = sum(min(runs, sum(not is_infra(t.error_type) for t in book.oracle.get(n, [])))
               + min(1, sum(not is_infra(t.error_type) for t in book.nop.get(n, []))) for n in unsolved)
    controls = len(unsolved) * (runs + 1) - have
    if unit == "trials":
        return Preflight(unit, limit, new, reused, controls, 1.0, False, per_control=1.0, controls_reused=have,
                         spent=spent, searching=searching)

    def done(agent: str, generation: str | None = gen) -> list[Any]:
        return [t for t in ctx.store.outcomes("expand", generation=generation, agent=agent)
                if not is_infra(t.error_type)]

    rows = done("harness")
    if rows:
        per = (sum(t.prompt_tokens + t.completion_tokens for t in rows) / len(rows) if unit == "tokens"
               else sum(t.t_total for t in rows) / len(rows) / 60.0)
    else:
        per = FALLBACK[unit]
    if unit == "tokens":
        return Preflight(unit, limit, new, reused, controls, per, not rows, per_control=0.0, recorded=len(rows),
                         controls_reused=have, spent=spent, searching=searching)
    ctl = done("oracle", None) + done("nop", None)  # no model call: any generation's runs say what they cost
    per_ctl = sum(t.t_total for t in ctl) / len(ctl) / 60.0 if ctl else per
    return Preflight(unit, limit, new, reused, controls, per, not rows, per_control=per_ctl,
                     control_estimated=not ctl, recorded=len(rows), recorded_controls=len(ctl),
                     controls_reused=have, spent=spent, searching=searching)


@dataclass
class ConfigLine:
    label: str
    digest: str | None
    tasks_solved: int
    tasks_run: int
    attempts: int
    passes: int
    rate: float
    ci: tuple[float, float]
    full_split: bool
    regressions: list[str]
    # against the baseline at equal attempts (rsi.core.pareto): tasks better, worse, one-sided sign test p
    wins: int = 0
    losses: int = 0
    p_value: float = 1.0


@dataclass
class ExpandOutcome:
    job_id: str
    generation: str
    strategy: str
    tasks: int
    baseline: ConfigLine
    coverage: dict[str, Any]
    best: ConfigLine
    adopted: dict[str, Any]
    configs: list[ConfigLine]
    front: dict[str, list[str]]
    attribution: dict[str, int]
    budget: dict[str, Any]
    trials: int  # finished trials that count (infra ones are re-run and counted in infra_trials)
    wall_sec: float
    interrupted: bool = False  # stopped before the plan ran out; `--resume` continues it
    reason: str | None = None
    # the baseline and attribution finished and the search ran until done or until it spent the budget
    # (the usual end of an adaptive search): every figure above is final for this budget
    complete: bool = True
    refused: list[dict[str, Any]] = field(default_factory=list)
    infra_trials: int = 0
    # the `trials` above per integrity level they were graded at (rsi.core.integrity)
    integrity: dict[str, int] = field(default_factory=dict)
    # training-data sources (rsi.loop.expand.sources): oracle replays and hinted rollouts per level
    sources: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _line(o: Outcome, label: str, digest: str | None) -> ConfigLine:
    s = o.scores[label]
    return ConfigLine(label, digest, s.tasks_solved, s.tasks_run, s.attempts, s.passes, round(s.rate, 4),
                      (round(s.interval[0], 4), round(s.interval[1], 4)), s.full_split, s.regressions,
                      s.wins, s.losses, round(s.p_value, 4))


def config_diff(a: HarnessConfig, b: HarnessConfig) -> list[dict[str, Any]]:
    """Fields whose values differ (dotted paths), name left out."""
    out: list[dict[str, Any]] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif x != y and path != "name":
            out.append({"path": path, "from": x, "to": y})

    walk(a.identity(), b.identity(), "")
    return out


def write_adopted(ctx: WorkspaceContext, job_id: str, base: HarnessConfig, cfg: HarnessConfig, label: str,
                  origin: str, parent: str) -> dict[str, Any]:
    name = f"{base.name}-{job_id.split('-')[-1]}"
    adopted = HarnessConfig.model_validate({**cfg.model_dump(mode="json"), "name": name})
    digest = ctx.register_config(adopted, origin=origin, source=label, parent=parent)  # type: ignore[arg-type]
    path = ctx.harness_config_path(name)
    head = (f"# Adopted by `rsi expand` job {job_id}: candidate {label} (origin {origin}).\n"
            f"# digest {digest}\n# parent {parent}\n")
    write_atomic(path, head + adopted.canonical_yaml())
    return {"label": label, "name": name, "path": str(path), "digest": digest, "origin": origin,
            "behaviour_digest": cfg.digest(), "diff": config_diff(base, adopted), "new": True, "note": None}


def kept_baseline(ctx: WorkspaceContext, base: ArmPlan, base_digest: str) -> dict[str, Any]:
    """No candidate beat the baseline: nothing is adopted, no file is written, and the generation's
    own config (same digest) stays what the next step serves."""
    assert base.config is not None
    path = ctx.harness_config_path(base.generation.harness_config.name)
    return {"label": BASELINE, "name": base.config.name, "path": str(path) if path.is_file() else None,
            "digest": base_digest, "origin": "baseline", "behaviour_digest": base_digest, "diff": [],
            "new": False, "note": "no candidate beat the baseline beyond noise (one-sided sign test on "
            "per-task passes at equal attempts, p < 0.1); the generation keeps its own config"}


def build_outcome(ctx: WorkspaceContext, job_id: str, gen: GenerationManifest, base: ArmPlan, pool: Pool,
                  runner: ChildJobs, pre: Preflight, stop: str | None, wall: float,
                  complete: bool = True) -> ExpandOutcome:
    store = ctx.store
    book = read_book(ctx, gen.id, pool)
    o = search_outcome(book, pool, verdicts(book, pool, ctx.contract.attribution))
    digest_of = {label: d for d, label in pool.labels.items()}
    digest_of[BASELINE] = pool.base_digest
    rows = {r.label: r for r in store.search_candidates(job_id)}
    assert base.config is not None
    adopted_label = o.adopted
    if adopted_label == BASELINE:
        adopted = kept_baseline(ctx, base, pool.base_digest)
    else:
        adopted_cfg, origin = ctx.config_by_digest(digest_of[adopted_label]), rows[adopted_label].origin
        adopted = write_adopted(ctx, job_id, base.config, adopted_cfg, adopted_label, origin, pool.base_digest)
        store.update_search_candidate(job_id, adopted_label, state="adopted")
    counts = {k: 0 for k in ("model", "task", "config", "infra")}
    names = set(pool.names)
    for a in store.attributions(gen.id):
        if a.task_name in names and a.task_digest in {t.digest for t in pool.tasks}:
            counts[a.kind] += 1
    budget = {"unit": pre.unit, "limit": pre.limit, "spent": {b.phase: b.spent for b in store.budgets_of(job_id)}}
    done = [t for t in runner.trials() if t.status == "done"]
    trials = sum(1 for t in done if not is_infra(t.error_type))
    configs = [_line(o, c, digest_of.get(c)) for c in sorted(o.scores, key=lambda c: (-o.scores[c].tasks_solved, c))]
    refused = [{"label": r.label, "origin": r.origin, "reason": r.reason}
               for r in rows.values() if r.state == "refused"]
    return ExpandOutcome(
        job_id=job_id, generation=gen.id, strategy=str(store.get_job(job_id).params.get("strategy")),
        tasks=len(pool.names), baseline=_line(o, BASELINE, pool.base_digest),
        coverage={"solved": len(o.covered), "tasks": len(pool.names), "rate": round(o.coverage, 4),
                  "covered": o.covered},
        best=_line(o, o.best, digest_of.get(o.best)), adopted=adopted, configs=configs, front=o.front,
        attribution=counts, budget=budget, trials=trials, wall_sec=round(wall, 1), interrupted=stop is not None,
        reason=stop, complete=complete, refused=refused, infra_trials=len(done) - trials,
        integrity=integrity_counts(t.integrity for t in done if not is_infra(t.error_type)))


def minimum_budget(pre: Preflight) -> int:
    return math.ceil(pre.baseline_cost)


__all__ = ["ConfigLine", "ExpandOutcome", "Preflight", "build_outcome", "config_diff", "preflight", "write_adopted"]
