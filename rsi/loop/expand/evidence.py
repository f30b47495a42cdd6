"""Expansion's evidence: what the store holds for the pool under a generation, read behind the
holdout seal (reader `expand`), turned into verdicts, the search state and the outcome.

Evidence is every finished trial of the pool's tasks (by digest) under the generation, from any
job: a trial an earlier job finished is reused, never re-paid. Oracle and nop runs call no model,
so theirs count whatever generation (if any) they were recorded under: the gate discovery ran on
an admitted task, or `rsi run --agent oracle`, is the same evidence. Infra trials are kept as
evidence of infra but never count towards a rate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rsi.core.attribution import Evidence, Verdict, attribute
from rsi.core.contract import AttributionRules
from rsi.core.pareto import Outcome, outcome
from rsi.core.search import SearchState
from rsi.core.task import Task
from rsi.core.trial import ErrorType, is_infra
from rsi.loop.context import WorkspaceContext
from rsi.store.tables import TrialRow

BASELINE = "baseline"


@dataclass
class Pool:
    tasks: list[Task]
    base_digest: str
    labels: dict[str, str] = field(default_factory=dict)  # candidate config digest -> label
    # label -> tasks left out of its comparison with the baseline (a few-shot candidate's demo tasks)
    held_out: dict[str, set[str]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]


@dataclass
class Book:
    """The pool's evidence, grouped: harness trials per (config label, task), oracle and nop per task."""

    harness: dict[tuple[str, str], list[TrialRow]] = field(default_factory=lambda: defaultdict(list))
    oracle: dict[str, list[TrialRow]] = field(default_factory=lambda: defaultdict(list))
    nop: dict[str, list[TrialRow]] = field(default_factory=lambda: defaultdict(list))

    def counted(self, label: str, task: str) -> list[TrialRow]:
        return [t for t in self.harness.get((label, task), []) if not is_infra(t.error_type)]

    def tally(self) -> dict[tuple[str, str], tuple[int, int]]:
        out = {}
        for key in self.harness:
            c = self.counted(*key)
            if c:
                out[key] = (len(c), sum(t.passed for t in c))
        return out

    def seqs(self) -> dict[tuple[str, str], list[bool]]:
        """Pass/fail per (config label, task) in attempt order (infra left out): equal-attempt comparisons."""
        return {key: [bool(t.passed) for t in sorted(self.counted(*key), key=lambda r: (r.attempt, r.id))]
                for key in self.harness}


def read_book(ctx: WorkspaceContext, gen: str, pool: Pool) -> Book:
    digests = [t.digest for t in pool.tasks]
    name_of = {t.digest: t.name for t in pool.tasks}
    book = Book()
    for agent, into in (("oracle", book.oracle), ("nop", book.nop)):
        for row in ctx.store.outcomes("expand", task_digests=digests, agent=agent):
            into[name_of[row.task_digest]].append(row)
    for row in ctx.store.outcomes("expand", generation=gen, task_digests=digests, agent="harness"):
        task = name_of[row.task_digest]
        if row.harness_config_digest == pool.base_digest:
            book.harness[(BASELINE, task)].append(row)
        elif row.harness_config_digest in pool.labels:
            book.harness[(pool.labels[row.harness_config_digest], task)].append(row)
    return book


_TASK_SIDE = (ErrorType.VERIFIER_ERROR.value, ErrorType.SERVICE_UNREACHABLE.value)


def _ev(rows: list[TrialRow], variant: str | None = None) -> list[Evidence]:
    return [Evidence(trial_id=t.id, agent=t.agent, passed=bool(t.passed), infra=is_infra(t.error_type),
                     task_side=t.error_type in _TASK_SIDE,
                     config_digest=t.harness_config_digest, variant=variant) for t in rows]


def verdicts(book: Book, pool: Pool, rules: AttributionRules) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    for name in pool.names:
        variants = [e for label in pool.labels.values() for e in _ev(book.harness.get((label, name), []), label)]
        v = attribute(_ev(book.harness.get((BASELINE, name), [])), _ev(book.oracle.get(name, [])),
                      _ev(book.nop.get(name, [])), variants, config_probes=rules.config_probes,
                      oracle_runs=rules.oracle_reruns)
        if v is not None:
            out[name] = v
    return out


def record_verdicts(ctx: WorkspaceContext, gen: str, pool: Pool, found: dict[str, Verdict]) -> None:
    by_name = {t.name: t for t in pool.tasks}
    for name, v in found.items():
        t = by_name[name]
        ctx.store.upsert_attribution(task_digest=t.digest, task_name=name, generation=gen, kind=v.kind,  # type: ignore[arg-type]
                                     confidence=v.confidence, evidence=v.evidence, reason=v.reason,
                                     variant=v.variant)


def base_solved(book: Book, pool: Pool) -> set[str]:
    return {n for n in pool.names if any(t.passed for t in book.counted(BASELINE, n))}


def search_state(book: Book, pool: Pool, found: dict[str, Verdict]) -> SearchState:
    state = SearchState(candidates=list(pool.labels.values()), tasks=pool.names,
                        base_solved=base_solved(book, pool),
                        excluded={n for n, v in found.items() if v.kind in ("task", "infra")})
    for (label, task), rows in book.harness.items():
        if label == BASELINE:
            continue
        for t in rows:
            if not is_infra(t.error_type):
                state.add(label, task, bool(t.passed))
    return state


def search_outcome(book: Book, pool: Pool, found: dict[str, Verdict]) -> Outcome:
    skip = {n for n, v in found.items() if v.kind in ("task", "infra")}
    return outcome(book.tally(), pool.names, BASELINE, skip, seqs=book.seqs(), held_out=pool.held_out)


__all__ = ["BASELINE", "Book", "Pool", "base_solved", "read_book", "record_verdicts", "search_outcome",
           "search_state", "verdicts"]
