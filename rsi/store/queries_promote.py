"""Promotion and diff reads: the sealed holdout's tasks and trials, and a phase job's recorded results.

Only the `promote` and `diff` readers see holdout rows (rsi.store.queries_trials.sealed). Trials of
a discover job's children (gate and probe) never count as holdout evidence: the probe selected the
tasks, so reusing it would measure on what was selected on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import or_
from sqlmodel import col, select

from rsi.core.errors import NotFoundError
from rsi.core.trial import TrialStatus
from rsi.store.queries_base import StoreBase
from rsi.store.queries_trials import Reader, sealed
from rsi.store.tables import JobRow, TaskRow, TrialRow


def _probe_jobs() -> Any:
    discover = select(JobRow.id).where(JobRow.kind == "discover")
    return select(JobRow.id).where(or_(col(JobRow.kind) == "discover", col(JobRow.parent_job).in_(discover)))


class PromoteQueries(StoreBase):
    """Holdout tasks, promotion evidence (probe trials excluded) and a job's recorded results."""

    def holdout_task_rows(self) -> list[TaskRow]:
        """Registered holdout tasks that are active (retired and candidate tasks left out)."""
        with self.session() as s:
            stmt = select(TaskRow).where(TaskRow.split == "holdout", TaskRow.state == "active")
            return list(s.exec(stmt.order_by(col(TaskRow.name))).all())

    def evidence_trials(
        self,
        reader: Reader,
        *,
        generation: str,
        config_digest: str | None,
        task_digests: Sequence[str],
        agent: str = "harness",
        jobs: Sequence[str] | None = None,
    ) -> list[TrialRow]:
        """Finished trials of one generation and config on these tasks, never a discover job's own
        trials or its children's (gate, probe); `jobs` limits them to those jobs. Oldest first.
        """
        probe_jobs = _probe_jobs()
        stmt = sealed(reader, select(TrialRow)).where(
            TrialRow.status == TrialStatus.DONE.value,
            TrialRow.generation == generation,
            col(TrialRow.harness_config_digest).is_(None) if config_digest is None
            else TrialRow.harness_config_digest == config_digest,
            TrialRow.agent == agent,
            col(TrialRow.task_digest).in_(list(task_digests)),
            col(TrialRow.job_id).not_in(probe_jobs),
        )
        if jobs is not None:
            stmt = stmt.where(col(TrialRow.job_id).in_(list(jobs)))
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(TrialRow.finished_at), col(TrialRow.id))).all())

    def merge_job_params(self, job_id: str, params: dict[str, Any]) -> None:
        """Add `params` to a job's recorded params (a phase job's results: a promote job's verdict)."""
        with self.session() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            job.params_json = json.dumps({**job.params, **params}, sort_keys=True, default=str)
            s.add(job)
            s.commit()
