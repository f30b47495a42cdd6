"""Which arms a job runs, and the trial specs they make.

An arm is (agent, generation, config digest, variant label). `rsi run` makes one arm per
generation x config (`--gen` and `--config` repeat), so two configs of one generation, or a
parent and its candidate, run side by side on the same tasks in one job. A resumed job gets its
arms back from the store, with every config by digest, so editing a file never changes a plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rsi.core.arm import Arm, TrialSpec, make_trial_id
from rsi.core.errors import InputError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig, check_endpoint
from rsi.core.task import Task
from rsi.loop.context import WorkspaceContext, check_config
from rsi.store.files import load_harness_config


@dataclass
class ArmPlan:
    """One arm with what its trials need: the generation manifest and the config (if any)."""

    arm: Arm
    generation: GenerationManifest
    config: HarnessConfig | None = None


# agents that act through a harness config: the model, and the two training-data sources that use the
# serving config's prompts (rsi.harness.replay: the reference replayed, the model with a hint)
CONFIG_AGENTS = ("harness", "oracle-replay", "hinted")


def resolve_arms(
    ctx: WorkspaceContext, agent: str, generations: list[str], configs: list[Path], variant: str | None = None,
) -> list[ArmPlan]:
    """One arm per generation x config; a config file is stored by digest before it is used."""
    gens = [ctx.generation(g) for g in generations] or [ctx.generation(None)]
    if agent not in CONFIG_AGENTS:
        if configs:
            raise InputError("--config", None, f"only {', '.join(CONFIG_AGENTS)} run a harness config, not '{agent}'")
        return [ArmPlan(Arm(agent=agent, generation=g.id, variant=variant), g) for g in _unique(gens)]
    plans: list[ArmPlan] = []
    for g in _unique(gens):
        if configs:
            for path in configs:
                cfg = load_harness_config(path)
                check_config(cfg, ctx.contract, path)
                digest = ctx.register_config(cfg, source=str(path.resolve()))
                plans.append(ArmPlan(Arm(agent=agent, generation=g.id, config_digest=digest, variant=variant), g, cfg))
        else:
            cfg = ctx.harness_config_for(g)
            plans.append(ArmPlan(Arm(agent=agent, generation=g.id, config_digest=cfg.digest(), variant=variant),
                                 g, cfg))
    seen: set[str] = set()
    return [p for p in plans if not (p.arm.id in seen or seen.add(p.arm.id))]  # type: ignore[func-returns-value]


def override_model(
    ctx: WorkspaceContext, plans: list[ArmPlan], model: str | None, endpoint: str | None,
) -> list[ArmPlan]:
    """The arms with their configs' model pinned to `model` and/or sent to `endpoint` for one job (`rsi run
    --model/--endpoint`). Each changed config is stored by digest like any other, so a resumed job gets the
    same arms back; agents that call no model refuse the options."""
    if model is None and endpoint is None:
        return plans
    opt = "--model" if model is not None else "--endpoint"
    if model is not None and not model.strip():
        raise InputError("--model", None, "must name the model the endpoint serves")
    if endpoint is not None:
        try:
            endpoint = check_endpoint(endpoint)
        except ValueError as e:
            raise InputError("--endpoint", None, str(e)) from None
    out: list[ArmPlan] = []
    for p in plans:
        if p.config is None:
            raise InputError(opt, None, f"agent '{p.arm.agent}' calls no model; {opt} is for "
                                        f"{', '.join(CONFIG_AGENTS)}")
        update: dict[str, object] = {}
        if model is not None:
            update["name"] = model.strip()
        if endpoint is not None:
            update["endpoint"] = endpoint
        cfg = p.config.model_copy(update={"model": p.config.model.model_copy(update=update)})
        cfg = HarnessConfig.model_validate(cfg.model_dump(mode="json", exclude_none=True))
        label = " ".join(f"--{k} {v}" for k, v in (("model", model), ("endpoint", endpoint)) if v is not None)
        digest = ctx.register_config(cfg, origin="manual", source=f"{(p.arm.config_digest or '')[:12]} {label}",
                                     parent=p.arm.config_digest)
        out.append(ArmPlan(Arm(agent=p.arm.agent, generation=p.arm.generation, config_digest=digest,
                               variant=p.arm.variant), p.generation, cfg))
    return out


def arms_of_job(ctx: WorkspaceContext, job_id: str) -> list[ArmPlan]:
    """A planned job's arms, configs loaded by digest from the store."""
    out = []
    for arm in ctx.store.arms_of_job(job_id):
        gen = ctx.generation(arm.generation) if arm.generation else ctx.generation(None)
        cfg = None
        if arm.config_digest:
            cfg = ctx.config_by_digest(arm.config_digest)
            check_config(cfg, ctx.contract, Path(f"config {arm.config_digest[:12]}"))
        out.append(ArmPlan(arm, gen, cfg))
    return out


def trial_spec(job_id: str, task: Task, plan: ArmPlan, attempt: int, trial_dir: Path) -> TrialSpec:
    return TrialSpec(
        trial_id=make_trial_id(job_id, task.name, plan.arm, attempt),
        job_id=job_id,
        task_name=task.name,
        task_digest=task.digest,
        task_path=task.path,
        arm=plan.arm,
        attempt=attempt,
        trial_dir=str(trial_dir),
        config=plan.config.model_dump(mode="json") if plan.config is not None else None,
        generation=plan.generation.model_dump(mode="json"),
    )


def _unique(gens: list[GenerationManifest]) -> list[GenerationManifest]:
    seen: dict[str, GenerationManifest] = {}
    for g in gens:
        seen.setdefault(g.id, g)
    return list(seen.values())
