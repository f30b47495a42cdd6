"""Update's bookkeeping: training runs, and the jobs whose trials an update reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlmodel import col, select

from rsi.core.errors import NotFoundError
from rsi.store.queries_base import StoreBase
from rsi.store.tables import JobRow, TrainingRunRow, utcnow


class UpdateQueries(StoreBase):
    """One row per training run; it is written when the run starts and finished once, done or failed."""

    def start_training_run(self, run_id: str, *, generation: str, backend: str, objective: str,
                           config_digest: str, dataset_path: str, dataset_digest: str,
                           params: dict[str, Any], metrics: dict[str, Any]) -> TrainingRunRow:
        row = TrainingRunRow(id=run_id, generation=generation, backend=backend, objective=objective,
                             status="running", config_digest=config_digest, dataset_path=dataset_path,
                             dataset_digest=dataset_digest, params_json=json.dumps(params, sort_keys=True),
                             metrics_json=json.dumps(metrics, sort_keys=True))
        with self.session() as s:
            s.add(row)
            s.commit()
            s.refresh(row)
        return row

    def finish_training_run(self, run_id: str, *, status: str, metrics: dict[str, Any] | None = None,
                            candidate: str | None = None, adapter_path: str | None = None,
                            adapter_sha256: str | None = None, serve_name: str | None = None,
                            error: str | None = None) -> TrainingRunRow:
        with self.session() as s:
            row = s.get(TrainingRunRow, run_id)
            if row is None:
                raise NotFoundError(f"unknown training run '{run_id}'")
            row.status = status
            if metrics is not None:
                row.metrics_json = json.dumps({**row.metrics, **metrics}, sort_keys=True)
            row.candidate, row.adapter_path, row.adapter_sha256 = candidate, adapter_path, adapter_sha256
            row.serve_name, row.error, row.finished_at = serve_name, error, utcnow()
            s.add(row)
            s.commit()
            s.refresh(row)
            return row

    def get_training_run(self, run_id: str) -> TrainingRunRow:
        with self.session() as s:
            row = s.get(TrainingRunRow, run_id)
        if row is None:
            raise NotFoundError(f"unknown training run '{run_id}'")
        return row

    def training_runs(self, generation: str | None = None) -> list[TrainingRunRow]:
        stmt = select(TrainingRunRow)
        if generation is not None:
            stmt = stmt.where(TrainingRunRow.generation == generation)
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(TrainingRunRow.created_at))).all())

    def jobs_of(self, *, kind: str | None = None, generation: str | None = None,
                parents: Sequence[str] | None = None) -> list[JobRow]:
        """Jobs by kind / generation / parent job, oldest first."""
        stmt = select(JobRow)
        if kind is not None:
            stmt = stmt.where(JobRow.kind == kind)
        if generation is not None:
            stmt = stmt.where(JobRow.generation == generation)
        if parents is not None:
            stmt = stmt.where(col(JobRow.parent_job).in_(list(parents)))
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(JobRow.created_at), col(JobRow.id))).all())
