"""Update's leakage check (rsi.core.leakage): gather the sealed side's facts and each sample's provenance from the
workspace, and refuse a dataset that leaks, naming the samples, before anything is written or trained.

The samples checked are the dataset's own and the ones replayed from earlier generations (the sealed side may
have grown since they were first checked). A train task that equals a holdout or suite task in environment and
reference (`same_instance`) is refused with both tasks named. The report also gives, for every in-skill holdout
task, the nearest reference among the train tasks the dataset draws on, with its similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rsi.core.errors import ConfigError, InputError
from rsi.core.harness_config import HarnessConfig
from rsi.core.leakage import (
    LeakReport,
    SampleFacts,
    SealedFacts,
    find_leaks,
    instance_digest,
    nearest_references,
    reference_text,
)
from rsi.core.replay import reference_actions
from rsi.core.task import Task
from rsi.loop.context import WorkspaceContext
from rsi.loop.suites import suite_tasks
from rsi.loop.update.data import LoadedTrial
from rsi.store.files import load_pool
from rsi.train.dataset import DatasetLine


class LeakageRefused(ConfigError):
    """The dataset would train on what the sealed side measures."""


def task_instance(t: Task) -> str | None:
    """The task's instance digest (environment + reference), None without a reference."""
    solve = Path(t.path) / "solution" / "solve.sh"
    return instance_digest(t.env_digest, solve.read_bytes()) if solve.is_file() else None


def _reference_actions(t: Task) -> tuple[str, ...]:
    """The task's reference solution as the commands it runs (empty without one)."""
    solve = Path(t.path) / "solution" / "solve.sh"
    if not solve.is_file():
        return ()
    return tuple(reference_actions(solve.read_text(errors="replace"), t.spec.environment.workdir))


def _reference(t: Task) -> str:
    return reference_text(_reference_actions(t))


def _suite(ctx: WorkspaceContext) -> list[Task]:
    """The suites' tasks; none when a suite is missing (promote names it, update does not stop on it)."""
    try:
        return suite_tasks(ctx)
    except InputError:
        return []


def sealed_facts(ctx: WorkspaceContext, pool: list[Task]) -> SealedFacts:
    """Holdout and suite digests and instances, the unseen-template holdout's templates and references, the
    in-skill holdout's (template, phrasing) pairs, and the contract's held-out phrasing count and overlap ceiling."""
    holdout = [t for t in pool if t.split == "holdout"]
    unseen = [t for t in holdout if (t.spec.metadata.rsi.holdout_part or "unseen") == "unseen"]
    in_skill = [t for t in holdout if t.spec.metadata.rsi.holdout_part == "in_skill"]
    suite = _suite(ctx)
    refs: dict[str, tuple[str, ...]] = {}
    for t in unseen:
        if (Path(t.path) / "solution" / "solve.sh").is_file():
            refs[t.name] = _reference_actions(t)
    instances: dict[str, str] = {}
    for kind, tasks in (("suite", suite), ("holdout", holdout)):
        for t in tasks:
            if (inst := task_instance(t)) is not None:
                instances[inst] = f"{kind} task {t.name}"
    return SealedFacts(
        sealed_digests=frozenset({t.digest for t in holdout} | {t.digest for t in suite}),
        unseen_templates=frozenset(t.spec.metadata.rsi.template for t in unseen if t.spec.metadata.rsi.template),
        holdout_phrasings=frozenset((t.spec.metadata.rsi.template, t.spec.metadata.rsi.phrasing) for t in in_skill
                                    if t.spec.metadata.rsi.template and t.spec.metadata.rsi.phrasing is not None),
        holdout_phrasing_count=ctx.contract.promotion.holdout_phrasings,
        unseen_references=refs,
        max_overlap=ctx.contract.training.max_reference_overlap,
        sealed_instances=instances,
    )


def sample_facts(trials: list[LoadedTrial], tasks: dict[str, Task], cfg: HarnessConfig,
                 replayed: Sequence[DatasetLine] = ()) -> list[SampleFacts]:
    """Each sample's provenance (replayed lines too), and the serving config's few-shot demonstrations as samples
    of their own (a demonstration drawn from a sealed task leaks as surely as a trained trajectory)."""
    out: list[SampleFacts] = []
    rows = [(t.record.trial_id, t.record.task_digest, t.record.template, t.messages[t.prompt_messages:])
            for t in trials]
    for ln in replayed:
        digest = str(ln.provenance.get("task_digest") or "")
        task = tasks.get(digest)
        rows.append((f"replay:{ln.provenance.get('trial_id') or ln.group_id}", digest,
                     task.spec.metadata.rsi.template if task is not None else None, ln.messages[ln.prompt_messages:]))
    for sample_id, digest, template, turns in rows:
        task = tasks.get(digest)
        meta = task.spec.metadata.rsi if task is not None else None
        replies = tuple(str(m.get("content") or "") for m in turns if m.get("role") == "assistant")
        out.append(SampleFacts(sample_id=sample_id, task_digest=digest or None, template=template,
                               phrasing=meta.phrasing if meta else None, phrasings=meta.phrasings if meta else None,
                               actions=replies, task_name=task.name if task is not None else None,
                               instance=task_instance(task) if task is not None else None,
                               own_reference=_reference_actions(task) if task is not None else ()))
    for i, m in enumerate(cfg.prompt.few_shot):
        if m.role == "assistant":
            out.append(SampleFacts(sample_id=f"few_shot[{i}]", task_digest=None, template=None, phrasing=None,
                                   phrasings=None, actions=(m.content or "",)))
    return out


def check_leakage(ctx: WorkspaceContext, trials: list[LoadedTrial], cfg: HarnessConfig,
                  replayed: Sequence[DatasetLine] = ()) -> LeakReport:
    """The report (with every in-skill holdout task's nearest train reference); LeakageRefused (exit 2) naming
    the first samples when the dataset leaks."""
    pool = load_pool(ctx.ws.tasks_dir)
    by_digest = {t.digest: t for t in pool}
    facts = sample_facts(trials, by_digest, cfg, replayed)
    report = find_leaks(facts, sealed_facts(ctx, pool))
    if not report.ok:
        shown = "; ".join(str(x) for x in report.leaks[:3])
        more = f" (+{len(report.leaks) - 3} more)" if len(report.leaks) > 3 else ""
        raise LeakageRefused(f"rsi update: the dataset leaks the sealed side, refused: {shown}{more}")
    used = {f.task_digest for f in facts if f.task_digest}
    train = {t.name: _reference(t) for t in pool if t.digest in used and t.split == "train"}
    in_skill = {t.name: _reference(t) for t in pool
                if t.split == "holdout" and t.spec.metadata.rsi.holdout_part == "in_skill"}
    report.nearest = nearest_references(in_skill, train)
    return report


__all__ = ["LeakageRefused", "check_leakage", "sample_facts", "sealed_facts", "task_instance"]
