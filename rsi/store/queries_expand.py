"""Expansion's bookkeeping: the search candidates of an expand job and its per-phase budget figures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlmodel import col, select

from rsi.store.queries_base import StoreBase
from rsi.store.tables import BudgetRow, SearchCandidateRow, utcnow


class ExpandQueries(StoreBase):
    """Search candidates (one row per job and label) and budget rows set to a computed spent figure."""

    def put_candidate(self, job_id: str, label: str, *, origin: str, config_digest: str | None,
                      parent_digest: str | None, state: str = "candidate", reason: str | None = None,
                      patch_yaml: str | None = None, source_trial: str | None = None) -> SearchCandidateRow:
        """Add a candidate unless the job has one with that label (idempotent across resumes)."""
        with self.session() as s:
            row = s.exec(select(SearchCandidateRow).where(SearchCandidateRow.job_id == job_id,
                                                          SearchCandidateRow.label == label)).first()
            if row is None:
                row = SearchCandidateRow(job_id=job_id, label=label, origin=origin, config_digest=config_digest,
                                         parent_digest=parent_digest, state=state, reason=reason,
                                         patch_yaml=patch_yaml, source_trial=source_trial)
                s.add(row)
                s.commit()
                s.refresh(row)
            return row

    def search_candidates(self, job_id: str) -> list[SearchCandidateRow]:
        with self.session() as s:
            return list(s.exec(select(SearchCandidateRow).where(SearchCandidateRow.job_id == job_id)
                               .order_by(col(SearchCandidateRow.id))).all())

    def update_search_candidate(self, job_id: str, label: str, *, solved: Sequence[str] | None = None,
                                **fields: Any) -> None:
        with self.session() as s:
            row = s.exec(select(SearchCandidateRow).where(SearchCandidateRow.job_id == job_id,
                                                          SearchCandidateRow.label == label)).one()
            for k, v in fields.items():
                setattr(row, k, v)
            if solved is not None:
                row.tasks_solved_json = json.dumps(sorted(solved))
            row.updated_at = utcnow()
            s.add(row)
            s.commit()

    def set_budget_figures(self, job_id: str, unit: str, limit: float, spent: dict[str, float]) -> None:
        """Budget rows of a phase job: `all` and one per phase, each spent set to the given figure
        (computed from the trials actually recorded, so it never drifts from them)."""
        with self.session() as s:
            for phase, value in {"all": sum(spent.values()), **spent}.items():
                row = s.get(BudgetRow, (job_id, phase))
                if row is None:
                    row = BudgetRow(job_id=job_id, phase=phase, unit=unit, limit=float(limit), spent=0.0)
                row.limit, row.spent, row.updated_at = float(limit), float(value), utcnow()
                s.add(row)
            s.commit()

    def budgets_of(self, job_id: str) -> list[BudgetRow]:
        with self.session() as s:
            return list(s.exec(select(BudgetRow).where(BudgetRow.job_id == job_id)).all())
