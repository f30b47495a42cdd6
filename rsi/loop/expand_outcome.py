"""Expansion's preflight estimate and its outcome: coverage, best single config, adopted config.

The adopted config (the best single config with no verified regression against the baseline, or
the baseline itself when nothing beat it) is written to `harness_configs/<base>-<job>.yaml` under
that new name, with its digest, parent digest and the expand job in a header, and stored by digest.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.pareto import Outcome
from rsi.core.trial import is_infra
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand_evidence import BASELINE, Pool, read_book, search_outcome, verdicts
from rsi.loop.stages import ChildJobs
from rsi.store.files import write_atomic

FALLBACK = {"tokens": 2000.0, "minutes": 0.5}  # per harness trial when this generation has no record yet


@dataclass
class Preflight:
    unit: str
    limit: float
    baseline_trials: int
    reused: int
    control_trials: int
    per_trial: float
    estimated: bool  # True: no recorded trials of this generation, a fallback figure

    @property
    def baseline_cost(self) -> float:
        return self.baseline_trials * self.per_trial

    @property
    def control_cost(self) -> float:
        return self.control_trials * (1.0 if self.unit == "trials" else 0.0 if self.unit == "tokens"
                                      else self.per_trial / 3)

    def describe(self) -> str:
        left = self.limit - self.baseline_cost - self.control_cost
        how = "fallback estimate" if self.estimated else "from recorded trials"
        return (f"plan: baseline {self.baseline_trials} trial(s) ({self.reused} reused) ~{self.baseline_cost:.4g} "
                f"{self.unit}; attribution controls up to {self.control_trials} trial(s) ~{self.control_cost:.4g}; "
                f"search ~{max(left, 0):.4g} {self.unit} of {self.limit:g} ({self.per_trial:.3g} {self.unit} "
                f"per harness trial, {how})")


def preflight(ctx: WorkspaceContext, gen: str, pool: Pool, attempts: int, unit: str, limit: float) -> Preflight:
    book = read_book(ctx, gen, pool)
    reused = sum(min(attempts, len(book.counted(BASELINE, n))) for n in pool.names)
    new = len(pool.names) * attempts - reused
    solved = {n for n in pool.names if any(t.passed for t in book.counted(BASELINE, n))}
    controls = (len(pool.names) - len(solved)) * (ctx.contract.attribution.oracle_reruns + 1)
    rows = [t for t in ctx.store.outcomes("expand", generation=gen, agent="harness") if not is_infra(t.error_type)]
    if unit == "trials":
        per, est = 1.0, False
    elif rows:
        per = (sum(t.prompt_tokens + t.completion_tokens for t in rows) / len(rows) if unit == "tokens"
               else sum(t.t_total for t in rows) / len(rows) / 60.0)
        est = False
    else:
        per, est = FALLBACK[unit], True
    return Preflight(unit, limit, new, reused, controls, per, est)


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
    interrupted: bool = False
    reason: str | None = None
    refused: list[dict[str, Any]] = field(default_factory=list)
    infra_trials: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _line(o: Outcome, label: str, digest: str | None) -> ConfigLine:
    s = o.scores[label]
    return ConfigLine(label, digest, s.tasks_solved, s.tasks_run, s.attempts, s.passes, round(s.rate, 4),
                      (round(s.interval[0], 4), round(s.interval[1], 4)), s.full_split, s.regressions)


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
            "behaviour_digest": cfg.digest(), "diff": config_diff(base, adopted)}


def build_outcome(ctx: WorkspaceContext, job_id: str, gen: GenerationManifest, base: ArmPlan, pool: Pool,
                  runner: ChildJobs, pre: Preflight, stop: str | None, wall: float) -> ExpandOutcome:
    store = ctx.store
    book = read_book(ctx, gen.id, pool)
    o = search_outcome(book, pool, verdicts(book, pool, ctx.contract.attribution.config_probes))
    digest_of = {label: d for d, label in pool.labels.items()}
    digest_of[BASELINE] = pool.base_digest
    rows = {r.label: r for r in store.search_candidates(job_id)}
    assert base.config is not None
    adopted_label = o.adopted
    if adopted_label == BASELINE:
        adopted_cfg, origin = base.config, "file"
    else:
        adopted_cfg, origin = ctx.config_by_digest(digest_of[adopted_label]), rows[adopted_label].origin
    adopted = write_adopted(ctx, job_id, base.config, adopted_cfg, adopted_label, origin, pool.base_digest)
    if adopted_label != BASELINE:
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
        reason=stop, refused=refused, infra_trials=len(done) - trials)


def minimum_budget(pre: Preflight) -> int:
    return math.ceil(pre.baseline_cost)


__all__ = ["ConfigLine", "ExpandOutcome", "Preflight", "build_outcome", "config_diff", "preflight", "write_adopted"]
