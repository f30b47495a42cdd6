"""`rsi promote GEN` and `rsi rollback`: a candidate replaces its parent only when the sealed holdout says so.

1. **holdout**: the active tasks under tasks/ whose split is `holdout`;
2. **evidence**: K = contract `promotion.trials_per_task` graded trials per (task, generation) for the
   candidate and its parent, each under its own config digest. Finished holdout trials with the same
   task digest, generation and config digest are reused (never a discover job's gate or probe trials:
   the probe selected the tasks); the rest run as one child `run` job of the promote phase job
   (rsi.loop.stages.ChildJobs), so a killed promote resumes without re-paying a trial;
3. **suites**: the same for the contract's regression suites (`promotion.suites`: fixed task directories
   no generator wrote), `promotion.suite_trials_per_task` trials per task and generation; and, when the
   contract asks (`promotion.in_template_trials_per_task` > 0), for the train tasks: the in-template rate,
   reported beside the template-disjoint holdout and never gated;
4. **gates** (rsi.core.promotion): contract major, enough holdout units (templates, by the contract's
   `promotion.holdout_unit`), min_delta, the paired test clustered on units, per-family regression,
   non-inferiority on the suites, infra errors. When the contract majors differ or there are too few
   holdout units, no trial is run: the gates could not pass whatever they showed;
5. **decision** (unless --dry-run): pass -> candidate `promoted`, parent `superseded`; fail -> candidate
   `rejected`, the failing gates in the event's reason. Both manifests get the holdout figures as
   headline metrics and are rewritten under generations/ (atomic writes). The verdict is recorded in
   the promote job's params.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.arm import Arm
from rsi.core.contract import HoldoutUnit
from rsi.core.discover import unit_of
from rsi.core.errors import ConfigError, InputError
from rsi.core.generation import GenerationManifest, GenerationState
from rsi.core.promotion import Gate, PromotionVerdict, TaskOutcome, evaluate, holdout_advice, min_tasks, unit_word
from rsi.core.task import Task
from rsi.core.trial import is_infra
from rsi.loop.arms import ArmPlan, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.loop.run import Progress, new_job_id
from rsi.loop.stages import ChildJobs, Stage
from rsi.loop.suites import suite_tasks
from rsi.sandbox.base import SandboxProvider
from rsi.store.files import load_pool, write_yaml_model
from rsi.store.tables import TrialRow

STAGE = "holdout"
SUITE_STAGE = "suite"
IN_TEMPLATE_STAGE = "in_template"


@dataclass
class PromoteRequest:
    gen: str
    dry_run: bool = False
    concurrency: int = 2
    resume: str | None = None
    agent: str = "harness"  # who acts for both generations (a scripted agent in unit tests)
    # Mixture-of-LoRA: gen id -> a client with `choose` for the routing gate (tests); None: the endpoint
    routing_client: Any = None


@dataclass
class PromoteOutcome:
    job_id: str
    candidate: str
    parent: str
    verdict: PromotionVerdict
    holdout_tasks: int
    trials: dict[str, int] = field(default_factory=dict)  # reused / planned / infra
    applied: bool = False
    changes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why no trial was run
    interrupted: str | None = None
    wall_sec: float = 0.0
    routing: dict[str, Any] = field(default_factory=dict)  # MoL: gen id -> routing accuracy on the holdout

    def as_json(self) -> dict[str, Any]:
        return {"job": self.job_id, "candidate": self.candidate, "parent": self.parent, "routing": self.routing,
                "holdout_tasks": self.holdout_tasks, "trials": self.trials, "applied": self.applied,
                "changes": self.changes, "skipped": self.skipped, "interrupted": self.interrupted,
                "wall_sec": round(self.wall_sec, 2), "verdict": self.verdict.as_json()}


def _major(version: str) -> int:
    return int(version.split(".")[0])


def holdout_tasks(ctx: WorkspaceContext) -> list[Task]:
    """Tasks under tasks/ with split holdout whose registered state (if any) is active."""
    state = {r.digest: r.state for r in ctx.store.task_rows()}
    return [t for t in load_pool(ctx.ws.tasks_dir) if t.split == "holdout" and state.get(t.digest, "active")
            == "active"]


def train_tasks(ctx: WorkspaceContext) -> list[Task]:
    """Tasks under tasks/ with split train whose registered state (if any) is active."""
    state = {r.digest: r.state for r in ctx.store.task_rows()}
    return [t for t in load_pool(ctx.ws.tasks_dir) if t.split == "train" and state.get(t.digest, "active")
            == "active"]


def task_unit(t: Task, unit: HoldoutUnit) -> str:
    """The evaluation unit of a task under the contract's `holdout_unit` (a task without a template: itself)."""
    return unit_of(unit, template=t.spec.metadata.rsi.template, family=t.family, task=t.name)


def holdout_units(ctx: WorkspaceContext, tasks: list[Task] | None = None) -> dict[str, list[Task]]:
    """The holdout's evaluation units (templates by default), each with its tasks."""
    unit = ctx.contract.promotion.holdout_unit
    out: dict[str, list[Task]] = {}
    for t in holdout_tasks(ctx) if tasks is None else tasks:
        out.setdefault(task_unit(t, unit), []).append(t)
    return out


def _arms(ctx: WorkspaceContext, agent: str, gens: list[GenerationManifest]) -> list[ArmPlan]:
    if agent == "harness":
        return resolve_arms(ctx, "harness", [g.id for g in gens], [])
    return [ArmPlan(Arm(agent=agent, generation=g.id, config_digest=g.harness_config.digest), g) for g in gens]


def _outcomes(rows: list[TrialRow], infra_rows: list[TrialRow], tasks: list[Task], k: int,
              allowed: list[str], unit: HoldoutUnit) -> dict[str, TaskOutcome]:
    """Per task: the first K graded trials (integrity allowed for promotion), and the infra count."""
    fam = {t.digest: (t.name, t.family, task_unit(t, unit)) for t in tasks}
    graded: dict[str, list[TrialRow]] = {}
    for r in rows:
        if is_infra(r.error_type) or (r.integrity is not None and r.integrity not in allowed):
            continue
        graded.setdefault(r.task_digest, []).append(r)
    infra: dict[str, int] = {}
    for r in infra_rows:
        if is_infra(r.error_type):
            infra[r.task_digest] = infra.get(r.task_digest, 0) + 1
    out = {}
    for digest, (name, family, key) in fam.items():
        used = graded.get(digest, [])[:k]
        out[name] = TaskOutcome(name, family, sum(1 for r in used if r.passed), len(used), infra.get(digest, 0),
                                unit=key)
    return out


def promote(ctx: WorkspaceContext, req: PromoteRequest, progress: Progress | None = None, *,
            provider: SandboxProvider | None = None) -> PromoteOutcome:
    """Evaluate GEN against its parent on the holdout and apply the verdict (see the module docstring)."""
    t0 = time.monotonic()
    store, contract = ctx.store, ctx.contract
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    cand = ctx.generation(req.gen)
    if cand.parent is None:
        raise ConfigError(f"{cand.id} has no parent to be compared with; promote a candidate made by `rsi update`")
    if cand.state != GenerationState.CANDIDATE and not req.dry_run:
        raise ConfigError(f"{cand.id} is {cand.state.value}, not a candidate; `rsi promote {cand.id} --dry-run` "
                          "evaluates it without changing anything")
    parent = ctx.generation(cand.parent)
    k, k_suite = contract.promotion.trials_per_task, contract.promotion.suite_trials_per_task
    k_in = contract.promotion.in_template_trials_per_task
    tasks = holdout_tasks(ctx)
    held = {t.digest for t in tasks}
    suite = [t for t in suite_tasks(ctx) if t.digest not in held]
    seen = held | {t.digest for t in suite}
    in_tpl = [t for t in train_tasks(ctx) if t.digest not in seen] if k_in else []
    need = min_tasks(contract.promotion.alpha)
    majors_ok = _major(cand.contract) == _major(parent.contract) == contract.major
    skipped = None
    if not majors_ok:
        skipped = (f"contract majors differ (parent {parent.contract}, candidate {cand.contract}, "
                   f"holdout graded under {contract.hcp}); no trial run")
    elif len(units := holdout_units(ctx, tasks)) < need:
        word = unit_word(_label(ctx, tasks), len(units))
        skipped = (f"{len(units)} holdout {word} ({len(tasks)} tasks), fewer than the {need} the paired test needs; "
                   "no trial run")

    plans = _arms(ctx, req.agent, [parent, cand])
    store.acquire_driver()
    job_id = req.resume or new_job_id().replace("job-", "prom-")
    try:
        if req.resume:
            job = store.get_job(req.resume)
            if job.kind != "promote" or job.params.get("candidate") != cand.id:
                raise ConfigError(f"--resume {job.id}: not a promote job of {cand.id}")
        else:
            store.create_job(job_id, agent=req.agent, generation=cand.id,
                             harness_config_digest=cand.harness_config.digest, attempts=k,
                             concurrency=req.concurrency, task_paths=[], tasks_fingerprint="", trials=[],
                             kind="promote", phase="promote",
                             params={"candidate": cand.id, "parent": parent.id, "dry_run": req.dry_run,
                                     "agent": req.agent})
        store.claim_job(job_id)
        reused = planned = 0
        cells: list[tuple[str, str, int]] = []
        suite_cells: list[tuple[str, str, int]] = []
        in_cells: list[tuple[str, str, int]] = []
        for group, want, out_cells in ((tasks, k, cells), (suite, k_suite, suite_cells), (in_tpl, k_in, in_cells)):
            if skipped is not None:
                break
            for p in plans:
                for t in group:
                    have = [r for r in store.evidence_trials("promote", generation=p.arm.generation or "",
                                                             config_digest=p.arm.config_digest,
                                                             task_digests=[t.digest], agent=p.arm.agent)
                            if not is_infra(r.error_type)]
                    reused += min(len(have), want)
                    if len(have) < want:
                        out_cells.append((t.name, p.arm.id, want - len(have)))
                        planned += want - len(have)
        runner = ChildJobs(ctx, job_id, phase="promote", budget=None, concurrency=req.concurrency,
                           progress_for=lambda _k: progress or Progress(),
                           resume_hint=f"resume with `rsi promote {cand.id} --resume {job_id}`", provider=provider)
        stop = None
        if skipped is None:
            stage = Stage(STAGE, plans, cells, [Path(t.path) for t in tasks], part="holdout")
            stop = runner.run(stage).stop
            if stop is None and suite:
                stop = runner.run(Stage(SUITE_STAGE, plans, suite_cells, [Path(t.path) for t in suite],
                                        part="suite")).stop
            if stop is None and in_tpl:
                stop = runner.run(Stage(IN_TEMPLATE_STAGE, plans, in_cells, [Path(t.path) for t in in_tpl],
                                        part="in-template")).stop
        own = [r for j in runner.children() for r in store.trials(j.id)]
        arms_out: list[dict[str, TaskOutcome]] = []
        suite_out: list[dict[str, TaskOutcome]] = []
        in_out: list[dict[str, TaskOutcome]] = []
        allowed: list[str] = list(contract.grading.promotion_integrity)
        for p in plans:
            mine = [r for r in own if r.arm_id == p.arm.id]
            parts: tuple[tuple[list[Task], int, HoldoutUnit, list[dict[str, TaskOutcome]]], ...] = (
                (tasks, k, contract.promotion.holdout_unit, arms_out), (suite, k_suite, "task", suite_out),
                (in_tpl, k_in, "template", in_out))
            for group, want, unit, into in parts:
                rows = store.evidence_trials("promote", generation=p.arm.generation or "",
                                             config_digest=p.arm.config_digest, task_digests=[t.digest for t in group],
                                             agent=p.arm.agent) if skipped is None and group else []
                into.append(_outcomes(rows, mine, group, want, allowed, unit))
        verdict = evaluate(arms_out[0], arms_out[1], contract.promotion, parent_major=_major(parent.contract),
                           candidate_major=_major(cand.contract), contract_major=contract.major,
                           suite=(suite_out[0], suite_out[1]),
                           in_template=(in_out[0], in_out[1]) if in_tpl and skipped is None else None)
        if skipped is not None and majors_ok:  # nothing measured: the advice counts the units the holdout has
            verdict.gates = [_units_gate(g, len(holdout_units(ctx, tasks)), len(tasks), need, _label(ctx, tasks))
                             for g in verdict.gates]
        out = PromoteOutcome(job_id, cand.id, parent.id, verdict, len(tasks),
                             {"reused": reused, "planned": planned,
                              "infra": sum(1 for r in own if is_infra(r.error_type))},
                             skipped=skipped, interrupted=stop)
        if cand.is_mol and skipped is None and stop is None and (req.agent == "harness" or req.routing_client):
            from rsi.loop.promote.routing import routing_evidence  # the routing-accuracy gate

            gate, scores = routing_evidence(ctx, cand, parent, tasks, req.routing_client)
            verdict.gates.append(gate)
            out.routing = {g: {**s.model_dump(), "accuracy": round(s.accuracy, 4), "recall": s.recall()}
                           for g, s in scores.items()}
            from rsi.loop.promote.routing import serving_figures  # hop overhead, cache reuse per adapter

            mine = store.evidence_trials("promote", generation=cand.id, config_digest=plans[1].arm.config_digest,
                                         task_digests=[t.digest for t in tasks], agent=plans[1].arm.agent)
            out.routing["serving"] = serving_figures(ctx.ws.root, [r.trial_dir for r in mine if r.trial_dir])
        if stop is not None:
            store.merge_job_params(job_id, {"verdict": verdict.as_json(), "trials": out.trials})
            store.mark_job_interrupted(job_id, stop)
            out.wall_sec = time.monotonic() - t0
            return out
        if not req.dry_run:
            for g, r in out.routing.items():
                if g != "serving":
                    _rewrite(ctx, g, {"routing_accuracy": r["accuracy"], "routing_instructions": float(r["total"])})
            if out.routing.get("serving"):
                _rewrite(ctx, cand.id, out.routing["serving"])
            out.changes = _apply(ctx, cand, parent, verdict, job_id)
            out.applied = True
        store.merge_job_params(job_id, {"verdict": verdict.as_json(), "trials": out.trials,
                                        "changes": out.changes, "routing": out.routing})
        store.finish_job(job_id, "done")
        out.wall_sec = time.monotonic() - t0
        return out
    finally:
        if store.get_job(job_id).status == "running":
            store.mark_job_interrupted(job_id, "the promote ended unexpectedly")
        store.release_driver()


def _label(ctx: WorkspaceContext, tasks: list[Task]) -> str:
    """What the units are called: the contract's unit, or `task` when no task has a template to group by."""
    unit = ctx.contract.promotion.holdout_unit
    return "task" if unit == "template" and not any(t.spec.metadata.rsi.template for t in tasks) else unit


def _units_gate(g: Gate, have: int, n_tasks: int, need: int, unit: str) -> Gate:
    if g.name != "holdout_units":
        return g
    return Gate(g.name, f">= {need} {unit_word(unit)}", f"{have} ({n_tasks} tasks), none measured", False,
                holdout_advice(have, need, unit))


def _headline(v: PromotionVerdict, which: str) -> dict[str, float]:
    rate = v.candidate_rate if which == "candidate" else v.parent_rate
    out = {"holdout_pass_rate": round(rate, 4), "holdout_tasks": float(v.n_tasks),
           "holdout_units": float(v.n_units)}
    if which == "candidate":
        out["holdout_delta"] = round(v.delta, 4)
        out["holdout_task_delta"] = round(v.task_delta, 4)
        if v.p_value is not None:
            out["holdout_p"] = round(v.p_value, 6)
        if v.task_p_value is not None:
            out["holdout_task_p"] = round(v.task_p_value, 6)
    if v.suite is not None and v.suite.tasks:
        out["suite_pass_rate"] = round(v.suite.candidate if which == "candidate" else v.suite.parent, 4)
        out["suite_tasks"] = float(v.suite.tasks)
        if which == "candidate":
            out["suite_delta"] = round(v.suite.delta, 4)
            if v.suite.p_value is not None:
                out["suite_p"] = round(v.suite.p_value, 6)
    return out


def _rewrite(ctx: WorkspaceContext, gen_id: str, metrics: dict[str, float] | None = None) -> None:
    """Store the manifest with new headline metrics (same state: no event) and rewrite its file."""
    m = ctx.store.get_generation(gen_id)
    if metrics:
        m = m.model_copy(update={"metrics": {**m.metrics, **metrics}})
        ctx.store.put_generation(m)
    write_yaml_model(ctx.ws.generations_dir / f"{gen_id}.yaml", ctx.store.get_generation(gen_id))


def _apply(ctx: WorkspaceContext, cand: GenerationManifest, parent: GenerationManifest, v: PromotionVerdict,
           job_id: str) -> list[str]:
    store = ctx.store
    _rewrite(ctx, cand.id, _headline(v, "candidate"))
    _rewrite(ctx, parent.id, _headline(v, "parent"))
    changes = []
    if v.passed:
        why = (f"promoted by {job_id}: holdout {v.parent_rate:.3f} -> {v.candidate_rate:.3f} "
               f"(delta {v.delta:+.3f}, p {v.p_value:.4g}, {v.n_units} {unit_word(v.unit, v.n_units)}, "
               f"{v.n_tasks} tasks)")
        if store.set_generation_state(cand.id, GenerationState.PROMOTED, why):
            changes.append(f"{cand.id}: {cand.state.value} -> promoted")
        if store.set_generation_state(parent.id, GenerationState.SUPERSEDED, f"superseded by {cand.id} ({job_id})"):
            changes.append(f"{parent.id}: {parent.state.value} -> superseded")
    else:
        failing = "; ".join(f"{g.name} ({g.measured}, needs {g.threshold})" for g in v.failing)
        if store.set_generation_state(cand.id, GenerationState.REJECTED, f"rejected by {job_id}: {failing}"):
            changes.append(f"{cand.id}: {cand.state.value} -> rejected ({failing})")
    for g in (cand.id, parent.id):
        _rewrite(ctx, g)
    return changes


@dataclass
class RollbackOutcome:
    rolled_back: str
    restored: str
    changes: list[str]


def rollback(ctx: WorkspaceContext) -> RollbackOutcome:
    """Re-promote the generation the current one replaced (its parent); the current one is rejected."""
    store = ctx.store
    current = [g for g in store.list_generations() if g.state == GenerationState.PROMOTED]
    if not current:
        raise ConfigError("no promoted generation to roll back")
    cur = current[-1]
    if cur.parent is None:
        raise ConfigError(f"{cur.id} has no parent: there is nothing to roll back to")
    prev = store.get_generation(cur.parent)
    store.acquire_driver()
    try:
        changes = []
        if store.set_generation_state(prev.id, GenerationState.PROMOTED, f"re-promoted by rollback of {cur.id}"):
            changes.append(f"{prev.id}: {prev.state.value} -> promoted")
        if store.set_generation_state(cur.id, GenerationState.REJECTED, f"rolled back to {prev.id}"):
            changes.append(f"{cur.id}: promoted -> rejected (rolled back)")
        for g in (prev.id, cur.id):
            _rewrite(ctx, g)
    finally:
        store.release_driver()
    if prev.adapters != cur.adapters:
        changes.append(f"serving model: {cur.serve_name()} -> {prev.serve_name()}")
    if prev.harness_config.digest != cur.harness_config.digest:
        changes.append(f"harness config: {cur.harness_config.name} ({cur.harness_config.digest[:12]}) -> "
                       f"{prev.harness_config.name} ({prev.harness_config.digest[:12]})")
    return RollbackOutcome(cur.id, prev.id, changes)


__all__ = ["PromoteOutcome", "PromoteRequest", "RollbackOutcome", "holdout_tasks", "holdout_units", "promote",
           "rollback", "task_unit"]
