"""Expansion's `fewshot` candidates: the config with k demonstrations bootstrapped from the
generation's own passing train trajectories (DSPy's bootstrapped few-shot), as rsi.core.fewshot
draws and renders them.

Sources are trials of the pool's train tasks under this generation and its own config (the baseline
config, so each demonstration's instruction reads as the candidate's own instruction template renders
it): passed, not infra, not tampered, graded at an integrity level the contract lets feed training.
Never a holdout or suite trajectory: a task must say `split = "train"`, its trials must be on the
train side of the seal (the store's `expand` reader sees no holdout row), and its directory may not
lie under a contract `promotion.suites` directory. Each candidate is a harness config stored by digest
(origin `fewshot`, parent the base's digest) and a `search_candidates` row whose `source_trial` lists
the demonstrations' trial ids; `FEWSHOT_DRAWS` draws (seeds `<seed>:<i>`) make as many candidates.
Drawn once per job, when there is something to draw: before the search from the baseline's passes, else
after a search round from the passes of the baseline and of every candidate so far (bootstrapping: a task
one candidate solved becomes a demonstration for the rest). On resume the rows are read back, so the same
demonstrations are searched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rsi.core.errors import ConfigError
from rsi.core.fewshot import Demo, Step, draw, render
from rsi.core.harness_config import HarnessConfig
from rsi.core.task import Task
from rsi.core.trial import is_infra
from rsi.core.variants import apply_variant
from rsi.loop.context import WorkspaceContext
from rsi.store.tables import TrialRow

FEWSHOT_DRAWS = 2  # few-shot candidates per expand job, each its own seeded draw
DEFAULT_K = 2  # demonstrations per candidate (`rsi expand --fewshot K`)
ORIGIN = "fewshot"


def suite_dirs(ctx: WorkspaceContext) -> list[Path]:
    """The contract's `promotion.suites` directories, resolved (none when the contract has no such field)."""
    dirs = getattr(ctx.contract.promotion, "suites", None) or []
    return [ctx.ws.resolve(str(d)).resolve() for d in dirs]


def _under(path: str, dirs: list[Path]) -> bool:
    p = Path(path).resolve()
    return any(p == d or d in p.parents for d in dirs)


def train_sources(ctx: WorkspaceContext, tasks: list[Task]) -> list[Task]:
    """The tasks whose trajectories may become demonstrations: train split, not in a suite."""
    suites = suite_dirs(ctx)
    return [t for t in tasks if t.split == "train" and not _under(t.path, suites)]


def _template(task: Task) -> str:
    return task.spec.metadata.rsi.template or task.family


def demo_of(row: TrialRow, task: Task, root: Path) -> Demo | None:
    """The trial's trajectory as a demonstration, or None when it cannot be read or shows no action."""
    from rsi.harness.atif import load_trajectory

    d = Path(row.trial_dir)
    path = (d if d.is_absolute() else root / d) / "trajectory.json"
    try:
        traj = load_trajectory(path)
    except (OSError, ValueError):
        return None
    user = next((s.message for s in traj.steps if s.source == "user"), None)
    if not user:
        return None
    steps: list[Step] = []
    for s in traj.steps:
        if s.source != "agent":
            continue
        results = {r.source_call_id: r for r in (s.observation.results if s.observation else [])}
        for call in s.tool_calls or []:
            if call.function_name == "submit" or (call.extra or {}).get("error"):
                continue
            res = results.get(call.tool_call_id)
            if res is None:
                continue
            steps.append(Step(call.function_name, dict(call.arguments), res.content or ""))
    return Demo(task=task.name, template=_template(task), instruction=user, steps=tuple(steps), trial_id=row.id)


def load_demos(ctx: WorkspaceContext, gen_id: str, tasks: list[Task], config_digest: str | Sequence[str],
               base: HarnessConfig) -> list[Demo]:
    """Every usable demonstration from this generation's passing train trials under `config_digest` (one
    digest, or several: the baseline's and the search candidates' of one job)."""
    by_digest = {t.digest: t for t in train_sources(ctx, tasks)}
    if not by_digest:
        return []
    allowed = set(ctx.contract.grading.training_integrity)
    out: list[Demo] = []
    seen: set[str] = set()
    digests = [config_digest] if isinstance(config_digest, str) else list(dict.fromkeys(config_digest))
    for digest in digests:
        for row in ctx.store.outcomes("expand", generation=gen_id, config_digest=digest,
                                      task_digests=sorted(by_digest), agent="harness"):
            if (row.id in seen or not row.passed or is_infra(row.error_type) or row.split != "train"
                    or row.tampered_paths or (row.integrity is not None and row.integrity not in allowed)):
                continue
            seen.add(row.id)
            demo = demo_of(row, by_digest[row.task_digest], ctx.ws.root)
            if demo is not None and demo.usable(base.action_format, base.tools):
                out.append(demo)
    return out


def fewshot_candidates(ctx: WorkspaceContext, job_id: str, gen_id: str, base: HarnessConfig, base_digest: str,
                       tasks: list[Task], k: int, seed: int, also: Sequence[str] = ()) -> int:
    """Add up to FEWSHOT_DRAWS few-shot candidates of `k` demonstrations each, unless this job has
    them already (or `k` is 0). Returns how many the job holds.

    Demonstrations come from the baseline's passes and, with `also`, from passes under those configs too
    (the job's search candidates: expand calls this again after each search round while it has none, so
    a task a candidate solved mid-search can teach the others, as DSPy bootstraps from any passing trace)."""
    have = [r for r in ctx.store.search_candidates(job_id) if r.origin == ORIGIN]
    if have or k <= 0 or base.is_external:  # an external harness's prompts live in its own config
        return len(have)
    demos = load_demos(ctx, gen_id, tasks, [base_digest, *also], base)
    seen: set[str] = set()
    for i in range(FEWSHOT_DRAWS):
        picked = draw(demos, k, f"{seed}:{i}")
        if not picked:
            break
        patch: dict[str, Any] = {"prompt.few_shot": render(picked, base.action_format)}
        label = f"fewshot:k={len(picked)}:draw={i + 1}"
        ids = ",".join(d.trial_id for d in picked)
        try:
            cfg = apply_variant(base, patch, ctx.contract)
        except ConfigError as e:
            ctx.store.put_candidate(job_id, label, origin=ORIGIN, config_digest=None, parent_digest=base_digest,
                                    state="refused", reason=str(e)[:2000], source_trial=ids)
            continue
        if cfg.digest() in seen or cfg.digest() == base_digest:
            continue  # too few demonstrations for another distinct draw
        seen.add(cfg.digest())
        digest = ctx.register_config(cfg, origin=ORIGIN, source=label, parent=base_digest)
        ctx.store.put_candidate(job_id, label, origin=ORIGIN, config_digest=digest, parent_digest=base_digest,
                                patch_yaml=yaml.safe_dump(patch, sort_keys=True), source_trial=ids)
    return len([r for r in ctx.store.search_candidates(job_id) if r.origin == ORIGIN])


def demo_tasks(ctx: WorkspaceContext, job_id: str, name_of: dict[str, str]) -> dict[str, set[str]]:
    """label -> the tasks a few-shot candidate's demonstrations came from (`name_of`: trial id -> task),
    left out of its comparison with the baseline."""
    out: dict[str, set[str]] = {}
    for r in ctx.store.search_candidates(job_id):
        if r.origin == ORIGIN and r.source_trial:
            out[r.label] = {name_of[i] for i in r.source_trial.split(",") if i in name_of}
    return out


__all__ = ["DEFAULT_K", "FEWSHOT_DRAWS", "ORIGIN", "demo_of", "demo_tasks", "fewshot_candidates", "load_demos",
           "suite_dirs", "train_sources"]
