"""Job summaries: per arm, per task passes/attempts, mean reward, error types, pass@1 and pass@K; the job's own
pass@1 and pass@K; trials per integrity level.

Infra errors (sandbox, endpoint) are excluded from the rates: they say nothing about the model. The job's own
figures count its model arms only (rsi.core.arm.is_model_arm: never the oracle, nop, known-wrong or other
controls, which are listed as their own arms); a job of controls only (`rsi run --agent oracle`) reports them,
and says so (`counts`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rsi.core.arm import Arm, is_model_arm
from rsi.core.integrity import LEVELS, NONE, integrity_counts
from rsi.core.stats import pass_at_k
from rsi.core.trial import is_infra
from rsi.store.tables import JobRow, TrialRow


@dataclass
class TaskSummary:
    task: str
    attempts: int
    passes: int
    graded: int  # attempts minus infra errors
    mean_reward: float | None
    errors: dict[str, int] = field(default_factory=dict)
    holdout: bool = False


@dataclass
class ArmSummary:
    arm_id: str
    label: str
    tasks: list[TaskSummary]
    pass_at_1: float
    pass_at_k: float
    trials: int
    infra_errors: int
    integrity: dict[str, int] = field(default_factory=dict)  # trials per integrity level
    role: str = "model"  # model | control (rsi.core.arm.is_model_arm)


@dataclass
class JobSummary:
    job_id: str
    tasks: list[TaskSummary]  # every arm's tasks (one arm: that arm's)
    k: int
    pass_at_1: float
    pass_at_k: float
    trials: int
    infra_errors: int
    arms: list[ArmSummary] = field(default_factory=list)
    holdout_tasks: int = 0
    integrity: dict[str, int] = field(default_factory=dict)
    counts: str = "model arms"  # whose trials the job's own figures count: `model arms` or `controls (<agents>)`


def _summarize_tasks(trials: list[TrialRow], k: int) -> tuple[list[TaskSummary], float, float, int]:
    by_task: dict[str, list[TrialRow]] = {}
    for t in trials:
        by_task.setdefault(t.task_name, []).append(t)
    rows = []
    p1: list[float] = []
    pk: list[float] = []
    infra = 0
    for name in sorted(by_task):
        ts = by_task[name]
        graded = [t for t in ts if t.status == "done" and not is_infra(t.error_type)]
        infra += sum(1 for t in ts if is_infra(t.error_type))
        rewards = [t.reward for t in graded if t.reward is not None]
        passes = sum(1 for t in graded if t.passed)
        errors = Counter(t.error_type for t in ts if t.error_type)
        rows.append(
            TaskSummary(
                task=name,
                attempts=len(ts),
                passes=passes,
                graded=len(graded),
                mean_reward=sum(rewards) / len(rewards) if rewards else None,
                errors=dict(errors),
                holdout=any(t.split == "holdout" for t in ts),
            )
        )
        if graded:
            p1.append(pass_at_k(len(graded), passes, 1))
            pk.append(pass_at_k(len(graded), passes, k))
    return rows, _mean(p1), _mean(pk), infra


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def arm_label(t: TrialRow) -> str:
    return Arm(agent=t.agent, generation=t.generation, config_digest=t.harness_config_digest, variant=t.variant).label


def summarize(job: JobRow, trials: list[TrialRow]) -> JobSummary:
    """Per arm (agent, generation, config, variant) and overall; holdout tasks are marked."""
    by_arm: dict[str, list[TrialRow]] = {}
    for t in trials:
        by_arm.setdefault(t.arm_id or "-", []).append(t)
    arms = []
    for arm_id, ts in by_arm.items():
        rows, p1, pk, infra = _summarize_tasks(ts, job.attempts)
        arms.append(ArmSummary(arm_id=arm_id, label=arm_label(ts[0]), tasks=rows, pass_at_1=p1, pass_at_k=pk,
                               trials=len(ts), infra_errors=infra,
                               integrity=integrity_counts(t.integrity for t in ts),
                               role="model" if is_model_arm(ts[0].agent) else "control"))
    model = [t for t in trials if is_model_arm(t.agent)]
    counted = model or trials  # a job of controls only: its controls, labelled so
    counts = "model arms" if model or not trials else \
        f"controls ({', '.join(sorted({t.agent for t in trials}))}; not a model score)"
    rows, p1, pk, _ = _summarize_tasks(counted, job.attempts)
    infra = sum(1 for t in trials if is_infra(t.error_type))
    return JobSummary(
        job_id=job.id,
        tasks=rows,
        k=job.attempts,
        pass_at_1=p1,
        pass_at_k=pk,
        trials=len(trials),
        infra_errors=infra,
        arms=arms,
        holdout_tasks=sum(1 for r in _summarize_tasks(trials, job.attempts)[0] if r.holdout),
        integrity=integrity_counts(t.integrity for t in trials),
        counts=counts,
    )


def integrity_text(counts: dict[str, int]) -> str:
    """`declared_outputs 3, snapshot 1, shared 0` (rich markup): every level, shared in yellow when some
    trial was graded in the agent's own container, then trials with no level recorded where there are any."""
    parts = []
    for lvl in LEVELS:
        n = counts.get(lvl, 0)
        parts.append(f"[yellow]{lvl} {n}[/]" if lvl == "shared" and n else f"{lvl} {n}")
    parts += [f"{k} {n}" for k, n in counts.items() if k not in LEVELS and k != NONE and n]
    if counts.get(NONE):
        parts.append(f"not recorded {counts[NONE]}")
    return ", ".join(parts)


def status_text(job: JobRow) -> str:
    """A job's status as listings show it: one that ended on its budget cap is `stopped (budget)` (it stopped
    as asked; `--resume` with a larger budget continues it), not `interrupted`, which is kept for Ctrl-C, a
    lost endpoint or a crash."""
    if job.status == "interrupted" and "budget spent" in (job.interrupted_reason or ""):
        return "stopped (budget)"
    return job.status


def trial_json(t: TrialRow) -> dict[str, Any]:
    return {
        "id": t.id,
        "task": t.task_name,
        "task_digest": t.task_digest,
        "attempt": t.attempt,
        "status": t.status,
        "reward": t.reward,
        "rewards": t.rewards,  # the verifier's metric map (reward.json): e.g. a composition's step_<k>
        "passed": t.passed,
        "error_type": t.error_type,
        "error_message": t.error_message,
        "infra_retries": t.infra_retries,
        "agent": t.agent,
        "generation": t.generation,
        "arm": t.arm_id,
        "variant": t.variant,
        "split": t.split,
        "integrity": t.integrity,
        "verifier_exit_code": t.verifier_exit_code,
        "timings": {"build": t.t_build, "agent": t.t_agent, "model_queue": t.t_queue, "snapshot": t.t_snapshot,
                    "verify": t.t_verify, "total": t.t_total},
        "tokens": {"prompt": t.prompt_tokens, "completion": t.completion_tokens, "cached": t.cached_tokens},
        "model_name": t.model_name,
        "harness_config_digest": t.harness_config_digest,
        "trial_dir": t.trial_dir,
        "node": t.node,  # the Ray node that ran it (`ray` executor); null: the driver's own machine (`local`)
    }


def job_json(job: JobRow, trials: list[TrialRow]) -> dict[str, Any]:
    s = summarize(job, trials)
    return {
        "job": job.id,
        "status": job.status,
        "agent": job.agent,
        "generation": job.generation,
        "k": s.k,
        "pass_at_1": s.pass_at_1,
        f"pass_at_{s.k}": s.pass_at_k,
        "pass_at_k": s.pass_at_k,
        "counts": s.counts,  # whose trials pass_at_1 / pass_at_k count: the model arms (controls: their own arms)
        "infra_errors": s.infra_errors,
        "interrupted_reason": job.interrupted_reason,
        "holdout_tasks": s.holdout_tasks,
        "integrity": s.integrity,
        "arms": [
            {"arm": a.arm_id, "label": a.label, "role": a.role, "pass_at_1": a.pass_at_1, "pass_at_k": a.pass_at_k,
             "trials": a.trials, "infra_errors": a.infra_errors, "integrity": a.integrity}
            for a in s.arms
        ],
        "trials": [trial_json(t) for t in trials],
    }
