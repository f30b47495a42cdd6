"""Trials: recording results and their evidence, and reading outcomes behind the holdout seal.

The seal (DESIGN §2): holdout tasks are read only by `promote` and `diff`. Every query that serves
the loop takes the reader's name and filters holdout rows out in SQL for any other reader, so a
phase cannot see holdout outcomes by forgetting a filter. A row counts as holdout if the trial
row says so or if its task is registered with a non-train split (two independent marks; either
seals it). A job's own listing (`trials`) is for display and shows everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, get_args

from sqlalchemy import or_
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from rsi.core.errors import NotFoundError
from rsi.core.trial import ErrorType, TrialResult, TrialStatus
from rsi.store.queries_base import StoreBase
from rsi.store.queries_diff import INFRA_ERROR_TYPES
from rsi.store.tables import JobRow, TaskRow, TrialRow, utcnow

Reader = Literal["discover", "expand", "update", "promote", "diff", "run"]
READERS: tuple[str, ...] = get_args(Reader)
HOLDOUT_READERS: frozenset[str] = frozenset({"promote", "diff"})
MESSAGE_CHARS = 2000

_T = TypeVar("_T")


def sealed(reader: Reader, stmt: SelectOfScalar[_T]) -> SelectOfScalar[_T]:
    """`stmt` over trials, restricted to what `reader` may see (train rows unless promote/diff)."""
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; one of {', '.join(READERS)}")
    if reader in HOLDOUT_READERS:
        return stmt
    not_train_tasks = select(TaskRow.digest).where(TaskRow.split != "train")
    return stmt.where(TrialRow.split == "train", col(TrialRow.task_digest).not_in(not_train_tasks))


def _attempt(error_type: Any, message: Any) -> dict[str, str]:
    return {"error_type": str(error_type or ""), "message": str(message or "")[:MESSAGE_CHARS]}


def _result_attempts(r: TrialResult) -> list[dict[str, str]]:
    """The infra attempts a result reports in `extra["infra_attempts"]`, normalised."""
    raw = r.extra.get("infra_attempts", [])
    if not isinstance(raw, list):
        return []
    return [_attempt(a.get("error_type"), a.get("message")) for a in raw if isinstance(a, dict)]


class TrialQueries(StoreBase):
    """Trial rows: the job's listing, results, infra attempts, sealed outcomes and reuse."""

    def trials(self, job_id: str) -> list[TrialRow]:
        """Every trial of one job, holdout included (a job's own listing, for display)."""
        with self.session() as s:
            return list(
                s.exec(
                    select(TrialRow)
                    .where(TrialRow.job_id == job_id)
                    .order_by(col(TrialRow.task_name), col(TrialRow.attempt), col(TrialRow.id))
                ).all()
            )

    def unfinished_trials(self, job_id: str) -> list[TrialRow]:
        return [t for t in self.trials(job_id) if t.status != TrialStatus.DONE.value]

    def get_trial(self, trial_id: str) -> TrialRow:
        """A trial by id or unique id prefix."""
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                rows = s.exec(select(TrialRow).where(col(TrialRow.id).startswith(trial_id))).all()
                if len(rows) == 1:
                    row = rows[0]
        if row is None:
            raise NotFoundError(f"unknown trial '{trial_id}'")
        return row

    def mark_running(self, trial_id: str) -> None:
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise NotFoundError(f"unknown trial '{trial_id}'")
            self._fence(s, row.job_id)
            row.status = TrialStatus.RUNNING.value
            row.started_at = utcnow()
            s.add(row)
            s.commit()

    def record_trial(self, r: TrialResult) -> None:
        """Store a finished trial with all its evidence. Idempotent: the same trial id again overwrites it.

        A planned holdout row stays holdout whatever the result says (the seal only tightens).
        Infra attempts recorded one by one with `record_infra_attempt` (they carry `at`) are
        kept; the result's own `extra["infra_attempts"]` replaces what an earlier record of this
        trial wrote, so recording twice does not duplicate them.
        """
        with self.session() as s:
            row = s.get(TrialRow, r.trial_id)
            if row is None:
                raise NotFoundError(f"unknown trial '{r.trial_id}'")
            row.status = TrialStatus.DONE.value
            row.reward = r.reward
            row.passed = r.passed
            row.error_type = r.error_type.value if r.error_type else None
            row.error_message = (r.error_message or "")[:MESSAGE_CHARS] or None
            row.infra_retries = r.infra_retries
            row.t_build = r.timings.build
            row.t_agent = r.timings.agent
            row.t_verify = r.timings.verify
            row.t_total = r.timings.total
            row.t_queue = r.timings.model_queue
            row.t_snapshot = r.timings.snapshot
            row.prompt_tokens = r.usage.prompt_tokens
            row.completion_tokens = r.usage.completion_tokens
            row.cached_tokens = r.usage.cached_tokens
            row.harness_config_digest = r.harness_config_digest
            row.model_name = r.model_name
            row.trial_dir = r.trial_dir
            row.generation = r.generation or row.generation
            row.arm_id = r.arm_id or row.arm_id
            row.variant = r.variant if r.variant is not None else row.variant
            if row.split == "train":
                row.split = r.split
            row.reward_map_json = json.dumps(r.rewards, sort_keys=True)
            row.changed_paths_json = json.dumps(r.changed_paths)
            row.tampered_paths_json = json.dumps(r.tampered_paths)
            row.tamper_reasons_json = json.dumps(r.tamper_reasons)
            row.widened_roots_json = json.dumps(r.widened_roots)
            row.integrity = r.integrity
            row.verifier_exit_code = r.verifier_exit_code
            row.turns = r.turns
            row.node = r.node
            kept = [a for a in row.infra_attempts if "at" in a]
            row.infra_attempts_json = json.dumps(kept + _result_attempts(r))
            row.finished_at = utcnow()
            s.add(row)
            self._touch_job(s, r.job_id)
            s.commit()

    def record_infra_attempt(self, trial_id: str, error_type: ErrorType | str, message: str) -> TrialRow:
        """Append one infra attempt to a trial without finishing it, so it stays re-runnable.

        An unfinished trial goes back to pending; a finished one keeps its result (a late report
        is still kept as a record).
        """
        with self.session() as s:
            row = s.get(TrialRow, trial_id)
            if row is None:
                raise NotFoundError(f"unknown trial '{trial_id}'")
            entry: dict[str, Any] = _attempt(ErrorType(error_type).value, message)
            entry["at"] = utcnow().isoformat()
            row.infra_attempts_json = json.dumps([*row.infra_attempts, entry])
            if row.status != TrialStatus.DONE.value:
                row.status = TrialStatus.PENDING.value
            s.add(row)
            self._touch_job(s, row.job_id)
            s.commit()
            return row

    def outcomes(
        self,
        reader: Reader,
        *,
        generation: str | None = None,
        config_digest: str | None = None,
        task_digests: Sequence[str] | None = None,
        agent: str | None = None,
        done_only: bool = True,
    ) -> list[TrialRow]:
        """Trials across jobs, as `reader` may see them: holdout rows only for promote and diff.

        Filters left as None are not applied; `config_digest` matches the digest a trial ran under.
        """
        stmt = sealed(reader, select(TrialRow))
        if generation is not None:
            stmt = stmt.where(TrialRow.generation == generation)
        if config_digest is not None:
            stmt = stmt.where(TrialRow.harness_config_digest == config_digest)
        if task_digests is not None:
            stmt = stmt.where(col(TrialRow.task_digest).in_(list(task_digests)))
        if agent is not None:
            stmt = stmt.where(TrialRow.agent == agent)
        if done_only:
            stmt = stmt.where(TrialRow.status == TrialStatus.DONE.value)
        stmt = stmt.order_by(col(TrialRow.task_name), col(TrialRow.generation), col(TrialRow.attempt), col(TrialRow.id))
        with self.session() as s:
            return list(s.exec(stmt).all())

    def reusable_trials(
        self,
        reader: Reader,
        task_digest: str,
        generation: str | None,
        config_digest: str | None,
        agent: str = "harness",
    ) -> list[TrialRow]:
        """Finished, non-infra trials that ran exactly this task, generation and config: evidence a
        new trial would only repeat. The config digest identifies the behaviour (a variant is its own
        digest), so it alone decides the config match. Sealed like `outcomes`.
        """
        stmt = sealed(reader, select(TrialRow)).where(
            TrialRow.status == TrialStatus.DONE.value,
            TrialRow.task_digest == task_digest,
            col(TrialRow.generation).is_(None) if generation is None else TrialRow.generation == generation,
            col(TrialRow.harness_config_digest).is_(None)
            if config_digest is None
            else TrialRow.harness_config_digest == config_digest,
            TrialRow.agent == agent,
            or_(col(TrialRow.error_type).is_(None), col(TrialRow.error_type).not_in(INFRA_ERROR_TYPES)),
        )
        stmt = stmt.order_by(col(TrialRow.finished_at), col(TrialRow.id))
        with self.session() as s:
            return list(s.exec(stmt).all())

    def _touch_job(self, s: Session, job_id: str) -> None:
        """Note the write on the job's row, refused (LeaseLostError) once this driver lost the job."""
        self._fence(s, job_id)
        job = s.get(JobRow, job_id)
        if job is not None:
            job.updated_at = utcnow()
            s.add(job)
