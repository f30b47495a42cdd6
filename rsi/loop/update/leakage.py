"""Update's leakage check (rsi.core.leakage): gather the sealed side's facts and each sample's provenance from the
workspace, and refuse a dataset that leaks, naming the samples, before anything is written or trained."""

from __future__ import annotations

from pathlib import Path

from rsi.core.errors import ConfigError
from rsi.core.harness_config import HarnessConfig
from rsi.core.leakage import LeakReport, SampleFacts, SealedFacts, find_leaks
from rsi.core.replay import reference_actions
from rsi.core.task import Task
from rsi.loop.context import WorkspaceContext
from rsi.loop.suites import suite_digests
from rsi.loop.update.data import LoadedTrial
from rsi.store.files import load_pool


class LeakageRefused(ConfigError):
    """The dataset would train on what the sealed side measures."""


def sealed_facts(ctx: WorkspaceContext, pool: list[Task]) -> SealedFacts:
    """Holdout and suite digests, the unseen-template holdout's templates and references, the in-skill holdout's
    (template, phrasing) pairs, and the contract's held-out phrasing count and overlap ceiling."""
    holdout = [t for t in pool if t.split == "holdout"]
    unseen = [t for t in holdout if (t.spec.metadata.rsi.holdout_part or "unseen") == "unseen"]
    in_skill = [t for t in holdout if t.spec.metadata.rsi.holdout_part == "in_skill"]
    refs: dict[str, tuple[str, ...]] = {}
    for t in unseen:
        solve = Path(t.path) / "solution" / "solve.sh"
        if solve.is_file():
            refs[t.name] = tuple(reference_actions(solve.read_text(errors="replace"), t.spec.environment.workdir))
    return SealedFacts(
        sealed_digests=frozenset({t.digest for t in holdout} | suite_digests(ctx)),
        unseen_templates=frozenset(t.spec.metadata.rsi.template for t in unseen if t.spec.metadata.rsi.template),
        holdout_phrasings=frozenset((t.spec.metadata.rsi.template, t.spec.metadata.rsi.phrasing) for t in in_skill
                                    if t.spec.metadata.rsi.template and t.spec.metadata.rsi.phrasing is not None),
        holdout_phrasing_count=ctx.contract.promotion.holdout_phrasings,
        unseen_references=refs,
        max_overlap=ctx.contract.training.max_reference_overlap,
    )


def sample_facts(trials: list[LoadedTrial], tasks: dict[str, Task], cfg: HarnessConfig) -> list[SampleFacts]:
    """Each sample's provenance, and the serving config's few-shot demonstrations as samples of their own (a
    demonstration drawn from a sealed task leaks as surely as a trained trajectory)."""
    out: list[SampleFacts] = []
    for t in trials:
        task = tasks.get(t.record.task_digest)
        meta = task.spec.metadata.rsi if task is not None else None
        replies = tuple(str(m.get("content") or "") for m in t.messages[t.prompt_messages:]
                        if m.get("role") == "assistant")
        out.append(SampleFacts(sample_id=t.record.trial_id, task_digest=t.record.task_digest,
                               template=t.record.template, phrasing=meta.phrasing if meta else None,
                               phrasings=meta.phrasings if meta else None, actions=replies))
    for i, m in enumerate(cfg.prompt.few_shot):
        if m.role == "assistant":
            out.append(SampleFacts(sample_id=f"few_shot[{i}]", task_digest=None, template=None, phrasing=None,
                                   phrasings=None, actions=(m.content or "",)))
    return out


def check_leakage(ctx: WorkspaceContext, trials: list[LoadedTrial], cfg: HarnessConfig) -> LeakReport:
    """The report; LeakageRefused (exit 2) naming the first samples when the dataset leaks."""
    pool = load_pool(ctx.ws.tasks_dir)
    report = find_leaks(sample_facts(trials, {t.digest: t for t in pool}, cfg), sealed_facts(ctx, pool))
    if not report.ok:
        shown = "; ".join(str(x) for x in report.leaks[:3])
        more = f" (+{len(report.leaks) - 3} more)" if len(report.leaks) > 3 else ""
        raise LeakageRefused(f"rsi update: the dataset leaks the sealed side, refused: {shown}{more}")
    return report


__all__ = ["LeakageRefused", "check_leakage", "sample_facts", "sealed_facts"]
