"""Which tasks promote measures and what their recorded trials say: the holdout (with its parts: in-skill,
unseen, and no-forgetting, the in-skill tasks of earlier cycles; rsi.core.holdout_parts), the
train tasks, evaluation units, the trials still to run for a look, and per-task outcomes from the store.

A look asks for `want` graded trials per (task, generation); trials already recorded for the same task
digest, generation, config digest and agent count (never a discover job's gate or probe trials), so a
killed promote, a second promote of the same pair or a later look re-pays nothing.
"""

from __future__ import annotations

from rsi.core.arm import Arm
from rsi.core.contract import HoldoutUnit
from rsi.core.discover import unit_of
from rsi.core.generation import GenerationManifest
from rsi.core.holdout_parts import measured_parts
from rsi.core.promotion import TaskOutcome
from rsi.core.task import Task
from rsi.core.trial import is_infra
from rsi.loop.arms import ArmPlan, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.store.files import load_pool
from rsi.store.tables import TrialRow


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


def task_part(t: Task) -> str:
    """The holdout part a task names (`in_skill` | `unseen`), "" when it names none (counted as unseen)."""
    return t.spec.metadata.rsi.holdout_part or ""


def task_parts(tasks: list[Task]) -> dict[str, str]:
    """task name -> the part promote measures it in (rsi.core.holdout_parts): its own, except an in-skill task an
    earlier cycle drew than the newest in-skill one, which is `no_forgetting`; "" when it names none."""
    return measured_parts({t.name: (t.spec.metadata.rsi.holdout_part, t.spec.metadata.rsi.instance_cycle)
                           for t in tasks})


def holdout_units(ctx: WorkspaceContext, tasks: list[Task] | None = None) -> dict[str, list[Task]]:
    """The holdout's evaluation units (templates by default), each with its tasks."""
    unit = ctx.contract.promotion.holdout_unit
    out: dict[str, list[Task]] = {}
    for t in holdout_tasks(ctx) if tasks is None else tasks:
        out.setdefault(task_unit(t, unit), []).append(t)
    return out


def part_units(ctx: WorkspaceContext, tasks: list[Task]) -> dict[str, tuple[str, int, int]]:
    """Per gated holdout part: (role, units, tasks) as promote gates it: the contract's `promotion.gates`, or
    `unseen` gated for superiority when no task names its part (a holdout discovered before the split)."""
    promo = ctx.contract.promotion
    legacy = not any(task_part(t) for t in tasks)
    roles = {"unseen": "superiority"} if legacy else {p: r for p, r in promo.gates.items() if r != "report"}
    measured = task_parts(tasks)
    out = {}
    for part, role in roles.items():
        mine = [t for t in tasks if (measured[t.name] or "unseen") == part]
        out[part] = (role, len({task_unit(t, promo.holdout_unit) for t in mine}), len(mine))
    return out


def arms(ctx: WorkspaceContext, agent: str, gens: list[GenerationManifest]) -> list[ArmPlan]:
    if agent == "harness":
        return resolve_arms(ctx, "harness", [g.id for g in gens], [])
    return [ArmPlan(Arm(agent=agent, generation=g.id, config_digest=g.harness_config.digest), g) for g in gens]


def have(ctx: WorkspaceContext, p: ArmPlan, t: Task) -> int:
    """Graded-or-failed (non-infra) trials recorded for this arm on this task, reusable as evidence."""
    return sum(1 for r in ctx.store.evidence_trials("promote", generation=p.arm.generation or "",
                                                    config_digest=p.arm.config_digest, task_digests=[t.digest],
                                                    agent=p.arm.agent) if not is_infra(r.error_type))


def cells_for(ctx: WorkspaceContext, plans: list[ArmPlan], tasks: list[Task],
              want: int) -> list[tuple[str, str, int]]:
    """(task, arm, attempts) still to run so every task has `want` trials per arm."""
    out = []
    for p in plans:
        for t in tasks:
            n = have(ctx, p, t)
            if n < want:
                out.append((t.name, p.arm.id, want - n))
    return out


def outcomes(rows: list[TrialRow], infra_rows: list[TrialRow], tasks: list[Task], k: int,
             allowed: list[str], unit: HoldoutUnit) -> dict[str, TaskOutcome]:
    """Per task: the first K graded trials (integrity allowed for promotion, oldest first), the infra count,
    its unit and its holdout part."""
    parts = task_parts(tasks)
    fam = {t.digest: (t.name, t.family, task_unit(t, unit), parts[t.name]) for t in tasks}
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
    for digest, (name, family, key, part) in fam.items():
        used = graded.get(digest, [])[:k]
        out[name] = TaskOutcome(name, family, sum(1 for r in used if r.passed), len(used), infra.get(digest, 0),
                                unit=key, part=part)
    return out


def arm_outcomes(ctx: WorkspaceContext, p: ArmPlan, own: list[TrialRow], tasks: list[Task], want: int,
                 unit: HoldoutUnit) -> dict[str, TaskOutcome]:
    """One arm's outcomes on these tasks at `want` trials per task (infra counted from this job's own trials)."""
    rows = ctx.store.evidence_trials("promote", generation=p.arm.generation or "", config_digest=p.arm.config_digest,
                                     task_digests=[t.digest for t in tasks], agent=p.arm.agent) if tasks else []
    allowed: list[str] = list(ctx.contract.grading.promotion_integrity)
    return outcomes(rows, [r for r in own if r.arm_id == p.arm.id], tasks, want, allowed, unit)


__all__ = ["arm_outcomes", "arms", "cells_for", "have", "holdout_tasks", "holdout_units", "outcomes", "part_units",
           "task_part", "task_parts", "task_unit", "train_tasks"]
