"""`rsi promote GEN` and `rsi rollback`: a candidate replaces its parent only when the sealed holdout says so.

1. **holdout**: the active tasks under tasks/ whose split is `holdout`, in two parts (a task's
   `[metadata.rsi] holdout_part`): in-skill (train templates in phrasings never trained on) and unseen
   templates; a task naming no part counts as unseen (rsi.loop.promote.evidence);
2. **evidence, in rounds** (rsi.loop.promote.rounds): up to K = contract `promotion.trials_per_task` graded
   trials per (task, generation) for the candidate and its parent, each under its own config digest, in
   `promotion.looks` rounds. Finished holdout trials with the same task digest, generation and config digest
   are reused (never a discover job's gate or probe trials: the probe selected the tasks); the rest run as
   child `run` jobs of the promote phase job (rsi.loop.stages.ChildJobs), one per part and round, so a
   killed promote resumes without re-paying a trial. After each round a group-sequential look (rsi.core.
   sequential) stops early for a clear gain or a clear failure; one look is the fixed test;
3. **suites**: the same for the contract's regression suites (`promotion.suites`: fixed task directories
   no generator wrote), `promotion.suite_trials_per_task` trials per task and generation, in the same rounds;
   and, when the contract asks (`promotion.in_template_trials_per_task` > 0), for the train tasks once at the
   end: the in-template rate, reported and never gated;
4. **gates** (rsi.core.promotion): contract major, enough units in the superiority part (in-skill; templates
   by the contract's `promotion.holdout_unit`, as many as the largest look's bound lets pass), min_delta, the
   paired test clustered on units against the look's bound, non-inferiority of the unseen-template part and of
   the suites (the candidate must show it is not worse by the margin: a score test against the look's own
   bound), per-family regression (a drop beyond the ceiling shown, Holm across families), infra errors. When
   the contract majors differ or the superiority part has too few units, no trial is run: the gates could not
   pass whatever they showed;
5. **decision** (unless --dry-run): pass -> candidate `promoted`, parent `superseded`; fail -> candidate
   `rejected`, the failing gates in the event's reason. Both manifests get the holdout figures as
   headline metrics and are rewritten under generations/ (atomic writes). The verdict (both parts, the
   suite, the rounds run and the bound used) is recorded in the promote job's params.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rsi.core.errors import ConfigError, InputError
from rsi.core.generation import GenerationManifest, GenerationState
from rsi.core.promotion import PART_LABEL, Gate, PromotionVerdict, holdout_advice, unit_floor, unit_word
from rsi.core.task import Task
from rsi.core.trial import is_infra
from rsi.loop.context import WorkspaceContext
from rsi.loop.promote.evidence import (
    arms,
    holdout_tasks,
    holdout_units,
    part_units,
    task_part,
    task_unit,
    train_tasks,
)
from rsi.loop.promote.rounds import IN_TEMPLATE_STAGE, STAGE, SUITE_STAGE, Rounds
from rsi.loop.run import Progress, new_job_id
from rsi.loop.stages import ChildJobs
from rsi.loop.suites import suite_tasks
from rsi.sandbox.base import SandboxProvider
from rsi.store.files import write_yaml_model


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



def spread(tasks: list[Task], cap: int) -> list[Task]:
    """At most `cap` tasks (0: all): families take turns, each giving its next template's next task (templates and
    tasks in name order), so a family with many templates (`compose`, a template per combination) cannot fill the
    cap alone and every family is measured before any gives a second task."""
    if cap <= 0 or len(tasks) <= cap:
        return tasks
    families: dict[str, dict[str, list[Task]]] = {}
    for t in sorted(tasks, key=lambda t: t.name):
        meta = t.spec.metadata.rsi
        template = meta.template or t.name
        families.setdefault(meta.family or template.split("/", 1)[0], {}).setdefault(template, []).append(t)
    per_family: list[list[Task]] = []
    for fam in sorted(families):
        queues = [families[fam][k] for k in sorted(families[fam])]
        order: list[Task] = []
        while any(queues):
            order += [q.pop(0) for q in queues if q]
        per_family.append(order)
    out: list[Task] = []
    while len(out) < cap:
        for q in per_family:
            if q and len(out) < cap:
                out.append(q.pop(0))
    return out


def _major(version: str) -> int:
    return int(version.split(".")[0])


def _skip_reason(ctx: WorkspaceContext, tasks: list[Task], need: int) -> str | None:
    """Why no trial can change the verdict: a superiority part with fewer units than the paired test needs at
    any look's bound (a non-inferiority part is measured whatever its size: its test says what it shows)."""
    legacy = not any(task_part(t) for t in tasks)
    for part, (role, n_units, n_tasks) in part_units(ctx, tasks).items():
        if role == "superiority" and n_units < need:
            which = "" if legacy else f"{PART_LABEL[part]} "
            return (f"{n_units} {which}holdout {unit_word(_label(ctx, tasks), n_units)} ({n_tasks} tasks), fewer "
                    f"than the {need} the paired test needs; no trial run")
    return None


def promote(ctx: WorkspaceContext, req: PromoteRequest, progress: Progress | None = None, *,
            provider: SandboxProvider | None = None) -> PromoteOutcome:
    """Evaluate GEN against its parent on the holdout and apply the verdict (see the module docstring)."""
    t0 = time.monotonic()
    store, contract = ctx.store, ctx.contract
    promo = contract.promotion
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    cand = ctx.generation(req.gen)
    if cand.parent is None:
        raise ConfigError(f"{cand.id} has no parent to be compared with; promote a candidate made by `rsi update`")
    if cand.state != GenerationState.CANDIDATE and not req.dry_run:
        raise ConfigError(f"{cand.id} is {cand.state.value}, not a candidate; `rsi promote {cand.id} --dry-run` "
                          "evaluates it without changing anything")
    parent = ctx.generation(cand.parent)
    k_in = promo.in_template_trials_per_task
    tasks = holdout_tasks(ctx)
    held = {t.digest for t in tasks}
    suite = [t for t in suite_tasks(ctx) if t.digest not in held]
    seen = held | {t.digest for t in suite}
    in_tpl = spread([t for t in train_tasks(ctx) if t.digest not in seen],
                    promo.in_template_max_tasks) if k_in else []
    need = unit_floor(promo)
    majors_ok = _major(cand.contract) == _major(parent.contract) == contract.major
    if not majors_ok:
        skipped: str | None = (f"contract majors differ (parent {parent.contract}, candidate {cand.contract}, "
                               f"holdout graded under {contract.hcp}); no trial run")
    else:
        skipped = _skip_reason(ctx, tasks, need)

    plans = arms(ctx, req.agent, [parent, cand])
    store.acquire_driver()
    job_id = req.resume or new_job_id().replace("job-", "prom-")
    try:
        if req.resume:
            job = store.get_job(req.resume)
            if job.kind != "promote" or job.params.get("candidate") != cand.id:
                raise ConfigError(f"--resume {job.id}: not a promote job of {cand.id}")
        else:
            store.create_job(job_id, agent=req.agent, generation=cand.id,
                             harness_config_digest=cand.harness_config.digest, attempts=promo.trials_per_task,
                             concurrency=req.concurrency, task_paths=[], tasks_fingerprint="", trials=[],
                             kind="promote", phase="promote",
                             params={"candidate": cand.id, "parent": parent.id, "dry_run": req.dry_run,
                                     "agent": req.agent})
        store.claim_job(job_id)
        runner = ChildJobs(ctx, job_id, phase="promote", budget=None, concurrency=req.concurrency,
                           progress_for=lambda _k: progress or Progress(),
                           resume_hint=f"resume with `rsi promote {cand.id} --resume {job_id}`", provider=provider)
        rounds = Rounds(ctx, runner, plans, tasks, suite, measured=skipped is None)
        stop = rounds.run(parent, cand) if skipped is None else None
        if stop is None and skipped is None and in_tpl:
            stop = rounds.in_template(in_tpl, k_in)
        verdict = rounds.verdict(parent, cand)
        if skipped is not None and majors_ok:  # nothing measured: the advice counts the units the holdout has
            verdict.gates = [_units_gate(g, ctx, tasks, need) for g in verdict.gates]
        own = runner.trials()
        out = PromoteOutcome(job_id, cand.id, parent.id, verdict, len(tasks),
                             {"reused": rounds.reused(), "planned": rounds.planned,
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


def _units_gate(g: Gate, ctx: WorkspaceContext, tasks: list[Task], need: int) -> Gate:
    """A units gate of a promote that measured nothing, counting the units the holdout has (per part)."""
    unit = _label(ctx, tasks)
    legacy = not any(task_part(t) for t in tasks)
    for part, (role, n_units, n_tasks) in part_units(ctx, tasks).items():
        if role == "superiority" and g.name == "holdout_units":
            what = unit if legacy else f"{PART_LABEL[part]} {unit}"
            return Gate(g.name, f">= {need} {unit_word(what)}", f"{n_units} ({n_tasks} tasks), none measured",
                        False, holdout_advice(n_units, need, what) if n_units < need else "not measured")
    return g


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
    for pr in v.parts if len(v.parts) > 1 or v.superiority_part != "unseen" else []:
        out[f"{pr.part}_pass_rate"] = round(pr.candidate if which == "candidate" else pr.parent, 4)
        out[f"{pr.part}_units"] = float(pr.units)
        if which == "candidate" and pr.p_value is not None:
            out[f"{pr.part}_p"] = round(pr.p_value, 6)
    if which == "candidate" and v.sequential is not None:
        out["promote_rounds"] = float(v.sequential.rounds_run)
    if v.suite is not None and v.suite.tasks:
        out["suite_pass_rate"] = round(v.suite.candidate if which == "candidate" else v.suite.parent, 4)
        out["suite_tasks"] = float(v.suite.tasks)
        if which == "candidate":
            out["suite_delta"] = round(v.suite.delta, 4)
            if v.suite.p_value is not None:  # non-inferiority: small p shows the suite is not lost
                out["suite_ni_p"] = round(v.suite.p_value, 6)
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


__all__ = ["IN_TEMPLATE_STAGE", "STAGE", "SUITE_STAGE", "PromoteOutcome", "PromoteRequest", "RollbackOutcome",
           "holdout_tasks", "holdout_units", "promote", "rollback", "task_unit", "train_tasks"]
