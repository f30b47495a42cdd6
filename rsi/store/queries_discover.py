"""Discovery's bookkeeping: candidates and their gate decisions, task provenance, probe figures,
retirements and the per-family curriculum.

A candidate is one row per (discover job, name), so a resumed discover never duplicates one; its
state only moves forward (generated -> valid -> admitted, or rejected / dropped), each move with a
reason from rsi.core.discover.REJECT_REASONS and the trial ids behind it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, get_args

from sqlmodel import col, select

from rsi.core.discover import CandidateState
from rsi.core.errors import NotFoundError
from rsi.core.task import Task
from rsi.store.queries_base import StoreBase, check_choice
from rsi.store.tables import CandidateRow, CurriculumRow, JobRow, TaskRow, utcnow


class DiscoverQueries(StoreBase):
    """Candidates, task rows with provenance, curriculum levels, a job's children."""

    # candidates --------------------------------------------------------------------------------
    def add_candidate(self, row: CandidateRow) -> CandidateRow:
        """Insert a candidate unless (job, name) is already there; return the stored row."""
        check_choice("candidate state", row.state, get_args(CandidateState))
        with self.session() as s:
            old = s.exec(select(CandidateRow).where(CandidateRow.job_id == row.job_id,
                                                    CandidateRow.name == row.name)).first()
            if old is not None:
                return old
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def candidates(self, job_id: str | None = None, state: str | None = None) -> list[CandidateRow]:
        stmt = select(CandidateRow)
        if job_id is not None:
            stmt = stmt.where(CandidateRow.job_id == job_id)
        if state is not None:
            stmt = stmt.where(CandidateRow.state == state)
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(CandidateRow.id))).all())

    def update_candidate(self, job_id: str, name: str, *, evidence: Sequence[str] = (), **fields: Any) -> CandidateRow:
        """Set fields of one candidate; `evidence` trial ids are appended to what it holds."""
        if "state" in fields:
            check_choice("candidate state", fields["state"], get_args(CandidateState))
        with self.session() as s:
            row = s.exec(select(CandidateRow).where(CandidateRow.job_id == job_id, CandidateRow.name == name)).first()
            if row is None:
                raise NotFoundError(f"no candidate '{name}' in job {job_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            if evidence:
                row.evidence_json = json.dumps(list(dict.fromkeys([*row.evidence, *evidence])))
            row.updated_at = utcnow()
            s.add(row)
            s.commit()
            return row

    # tasks ---------------------------------------------------------------------------------------
    def task_rows(self, state: str | None = None, split: str | None = None) -> list[TaskRow]:
        stmt = select(TaskRow)
        if state is not None:
            stmt = stmt.where(TaskRow.state == state)
        if split is not None:
            stmt = stmt.where(TaskRow.split == split)
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(TaskRow.name), col(TaskRow.created_at))).all())

    def admit_task(self, task: Task, *, discover_job: str, probe_pass_rate: float | None, probe_trials: int) -> None:
        """Register an admitted task with its provenance and probe figures (idempotent by digest)."""
        meta = task.spec.metadata.rsi
        with self.session() as s:
            row = s.get(TaskRow, task.digest) or TaskRow(
                digest=task.digest, name=task.name, path=task.path, family=task.family, split=task.split,
                difficulty=meta.difficulty,
            )
            row.path, row.state, row.state_reason = task.path, "active", None
            row.generator, row.seed, row.parent_task = meta.generator, meta.seed, meta.parent_task
            row.discovered_by, row.discover_job = meta.discovered_by, discover_job
            row.probe_pass_rate, row.probe_trials = probe_pass_rate, probe_trials
            s.add(row)
            s.commit()

    def set_task_probe(self, digest: str, rate: float, trials: int) -> None:
        with self.session() as s:
            row = s.get(TaskRow, digest)
            if row is None:
                raise NotFoundError(f"unknown task digest {digest[:12]}")
            row.probe_pass_rate, row.probe_trials = rate, trials
            s.add(row)
            s.commit()

    def retire_task(self, digest: str, reason: str, state: str = "retired") -> None:
        """Take a task out of the pool (`retired`), or mark a discovery candidate `rejected`."""
        with self.session() as s:
            row = s.get(TaskRow, digest)
            if row is None:
                raise NotFoundError(f"unknown task digest {digest[:12]}")
            row.state, row.state_reason = state, reason
            s.add(row)
            s.commit()

    # curriculum ----------------------------------------------------------------------------------
    def curriculum(self) -> dict[str, CurriculumRow]:
        with self.session() as s:
            return {r.family: r for r in s.exec(select(CurriculumRow)).all()}

    def set_level(self, family: str, level: int, reason: str) -> None:
        with self.session() as s:
            row = s.get(CurriculumRow, family) or CurriculumRow(family=family, level=level, reason=reason)
            row.level, row.reason, row.updated_at = level, reason, utcnow()
            s.add(row)
            s.commit()

    # jobs ----------------------------------------------------------------------------------------
    def child_jobs(self, parent_job: str) -> list[JobRow]:
        with self.session() as s:
            stmt = select(JobRow).where(JobRow.parent_job == parent_job).order_by(col(JobRow.created_at))
            return list(s.exec(stmt).all())

    def set_job_links(self, job_id: str, *, parent_job: str | None = None, params: dict[str, Any] | None = None,
                      kind: str | None = None) -> None:
        with self.session() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            if parent_job is not None:
                job.parent_job = parent_job
            if params is not None:
                job.params_json = json.dumps(params, sort_keys=True)
            if kind is not None:
                job.kind = kind
            s.add(job)
            s.commit()
