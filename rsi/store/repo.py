"""Queries and writes over the rsi database. The only place that issues SQL.

In every mode the driver process is the only writer (DESIGN §11): executors return results and
the driver records them here as they arrive. Trial ids are idempotency keys.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from rsi.core.errors import NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.task import Task
from rsi.core.trial import TrialResult, TrialStatus
from rsi.store.db import database_url, make_engine, migrate
from rsi.store.tables import GenerationRow, JobRow, TaskRow, TrialRow, utcnow


class Store:
    """One database, migrated to head on open."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = make_engine(url)
        migrate(self.engine)

    @classmethod
    def for_path(cls, db_path: Path) -> Store:
        return cls(database_url(db_path))

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            yield s

    def close(self) -> None:
        self.engine.dispose()

    # generations -----------------------------------------------------------------------------
    def put_generation(self, m: GenerationManifest) -> None:
        row = GenerationRow(
            id=m.id,
            parent=m.parent,
            state=m.state.value,
            contract=m.contract,
            base_model_id=m.base_model.id,
            harness_config_name=m.harness_config.name,
            harness_config_digest=m.harness_config.digest,
            serve_name=m.serve_name(),
            manifest_json=m.model_dump_json(),
        )
        with self.session() as s:
            existing = s.get(GenerationRow, m.id)
            if existing is not None:
                row.created_at = existing.created_at
                s.delete(existing)
                s.flush()
            s.add(row)
            s.commit()

    def get_generation(self, gen_id: str) -> GenerationManifest:
        with self.session() as s:
            row = s.get(GenerationRow, gen_id)
        if row is None:
            known = ", ".join(g.id for g in self.list_generations()) or "(none)"
            raise NotFoundError(f"unknown generation '{gen_id}'; known: {known}")
        return GenerationManifest.model_validate_json(row.manifest_json)

    def list_generations(self) -> list[GenerationManifest]:
        with self.session() as s:
            rows = s.exec(select(GenerationRow).order_by(col(GenerationRow.id))).all()
        return [GenerationManifest.model_validate_json(r.manifest_json) for r in rows]

    def current_generation(self) -> GenerationManifest:
        """The newest promoted generation, else the newest one (gen-0000 on a new workspace)."""
        gens = self.list_generations()
        if not gens:
            raise NotFoundError("no generation registered; run `rsi init` first")
        promoted = [g for g in gens if g.state.value == "promoted"]
        return (promoted or gens)[-1]

    # tasks -----------------------------------------------------------------------------------
    def put_tasks(self, tasks: Iterable[Task]) -> None:
        with self.session() as s:
            for t in tasks:
                if s.get(TaskRow, t.digest) is None:
                    s.add(
                        TaskRow(
                            digest=t.digest,
                            name=t.name,
                            path=t.path,
                            family=t.family,
                            split=t.split,
                            difficulty=t.spec.metadata.rsi.difficulty,
                        )
                    )
            s.commit()

    # jobs ------------------------------------------------------------------------------------
    def create_job(
        self,
        job_id: str,
        *,
        agent: str,
        generation: str | None,
        harness_config_digest: str | None,
        attempts: int,
        concurrency: int,
        task_paths: Sequence[str],
        tasks_fingerprint: str,
        trials: Sequence[TrialRow],
        kind: str = "run",
    ) -> JobRow:
        """Create the job and all its planned trials (pending) in one transaction."""
        job = JobRow(
            id=job_id,
            kind=kind,
            status="running",
            agent=agent,
            generation=generation,
            harness_config_digest=harness_config_digest,
            attempts=attempts,
            concurrency=concurrency,
            task_paths_json=json.dumps(list(task_paths)),
            tasks_fingerprint=tasks_fingerprint,
            owner_pid=os.getpid(),
            owner_host=socket.gethostname(),
        )
        with self.session() as s:
            s.add(job)
            s.flush()
            for t in trials:
                s.add(t)
            s.commit()
        return job

    def get_job(self, job_id: str) -> JobRow:
        with self.session() as s:
            row = s.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"unknown job '{job_id}'")
        return row

    def list_jobs(self, limit: int = 50) -> list[JobRow]:
        with self.session() as s:
            return list(s.exec(select(JobRow).order_by(col(JobRow.created_at).desc()).limit(limit)).all())

    def claim_job(self, job_id: str) -> None:
        """Mark this process as the job's owner (on start and on resume)."""
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            row.status = "running"
            row.owner_pid = os.getpid()
            row.owner_host = socket.gethostname()
            row.updated_at = utcnow()
            s.add(row)
            s.commit()

    def finish_job(self, job_id: str, status: str) -> None:
        with self.session() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                return
            row.status = status
            row.updated_at = utcnow()
            row.owner_pid = None
            if status == "done":
                row.finished_at = utcnow()
            s.add(row)
            s.commit()

    def live_job_ids(self) -> set[str]:
        """Jobs whose owning process is alive on this host (others are dead or interrupted)."""
        host = socket.gethostname()
        live: set[str] = set()
        with self.session() as s:
            rows = s.exec(select(JobRow).where(JobRow.status == "running")).all()
        for r in rows:
            if r.owner_pid is None:
                continue
            if r.owner_host != host:
                live.add(r.id)  # cannot tell from here; assume alive
                continue
            try:
                os.kill(r.owner_pid, 0)
                live.add(r.id)
            except ProcessLookupError:
                pass
            except PermissionError:
                live.add(r.id)
        return live

    # trials ----------------------------------------------------------------------------------
    def trials(self, job_id: str) -> list[TrialRow]:
        with self.session() as s:
            return list(
                s.exec(
                    select(TrialRow)
                    .where(TrialRow.job_id == job_id)
                    .order_by(col(TrialRow.task_name), col(TrialRow.attempt))
                ).all()
            )

    def unfinished_trials(self, job_id: str) -> list[TrialRow]:
        return [t for t in self.trials(job_id) if t.status != TrialStatus.DONE.value]

    def get_trial(self, trial_id: str) -> TrialRow:
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
            row.status = TrialStatus.RUNNING.value
            row.started_at = utcnow()
            s.add(row)
            s.commit()

    def record_trial(self, r: TrialResult) -> None:
        """Store a finished trial. Idempotent: recording the same trial id again overwrites it."""
        with self.session() as s:
            row = s.get(TrialRow, r.trial_id)
            if row is None:
                raise NotFoundError(f"unknown trial '{r.trial_id}'")
            row.status = TrialStatus.DONE.value
            row.reward = r.reward
            row.passed = r.passed
            row.error_type = r.error_type.value if r.error_type else None
            row.error_message = (r.error_message or "")[:2000] or None
            row.infra_retries = r.infra_retries
            row.t_build = r.timings.build
            row.t_agent = r.timings.agent
            row.t_verify = r.timings.verify
            row.t_total = r.timings.total
            row.prompt_tokens = r.usage.prompt_tokens
            row.completion_tokens = r.usage.completion_tokens
            row.cached_tokens = r.usage.cached_tokens
            row.harness_config_digest = r.harness_config_digest
            row.model_name = r.model_name
            row.trial_dir = r.trial_dir
            row.finished_at = utcnow()
            s.add(row)
            job = s.get(JobRow, r.job_id)
            if job is not None:
                job.updated_at = utcnow()
                s.add(job)
            s.commit()
