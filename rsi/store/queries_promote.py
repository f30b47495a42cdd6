"""Promotion and diff reads: the sealed holdout's tasks and trials, and a phase job's recorded results.

Only the `promote` and `diff` readers see holdout rows (rsi.store.queries_trials.sealed). Trials of
a discover job's children (gate and probe) never count as holdout evidence: the probe selected the
tasks, so reusing it would measure on what was selected on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, case, func, or_
from sqlmodel import col, select

from rsi.core.errors import NotFoundError
from rsi.core.trial import TrialStatus
from rsi.store.queries_base import StoreBase
from rsi.store.queries_trials import INFRA_ERROR_TYPES, Reader, sealed
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

    def promote_verdict(self, candidate: str, parent: str) -> tuple[str, dict[str, Any]] | None:
        """The newest finished promote job of `candidate` over `parent` and its recorded verdict, if any."""
        stmt = select(JobRow).where(JobRow.kind == "promote", JobRow.status == "done")
        with self.session() as s:
            rows = list(s.exec(stmt.order_by(col(JobRow.created_at).desc())).all())
        for job in rows:
            params = job.params
            if params.get("candidate") == candidate and params.get("parent") == parent and params.get("verdict"):
                return job.id, dict(params["verdict"])
        return None

    def merge_job_params(self, job_id: str, params: dict[str, Any]) -> None:
        """Add `params` to a job's recorded params (a phase job's results: a promote job's verdict)."""
        with self.session() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            job.params_json = json.dumps({**job.params, **params}, sort_keys=True, default=str)
            s.add(job)
            s.commit()

    def task_cells(self, generation: str, config_digest: str | None, agent: str = "harness") -> list[dict[str, Any]]:
        """Per task, one generation's finished trials under one config (discover's gate and probe left
        out), aggregated in SQL: task digest, name, split, trials, passes, infra (`diff` reader)."""
        infra = func.coalesce(col(TrialRow.error_type), "").in_(INFRA_ERROR_TYPES)  # NULL: not infra
        stmt = sa.select(  # the diff reader sees holdout rows: no seal to apply
            col(TrialRow.task_digest), col(TrialRow.task_name), col(TrialRow.split),
            func.count(), func.sum(case((and_(col(TrialRow.passed), ~infra), 1), else_=0)),
            func.sum(case((infra, 1), else_=0)),
        ).where(
            col(TrialRow.status) == TrialStatus.DONE.value,
            col(TrialRow.generation) == generation,
            col(TrialRow.agent) == agent,
            col(TrialRow.harness_config_digest).is_(None) if config_digest is None
            else col(TrialRow.harness_config_digest) == config_digest,
            col(TrialRow.job_id).not_in(_probe_jobs()),
        ).group_by(col(TrialRow.task_digest), col(TrialRow.task_name), col(TrialRow.split))
        with self.session() as s:
            rows = s.execute(stmt).all()
        return [{"digest": d, "name": n, "split": sp, "trials": int(c), "passes": int(p or 0), "infra": int(i or 0)}
                for d, n, sp, c, p, i in rows]

    def task_trial_ids(self, generation: str, config_digest: str | None, task_digests: Sequence[str],
                       agent: str = "harness", per_task: int = 4) -> dict[str, list[dict[str, Any]]]:
        """task digest -> up to `per_task` finished trials of one generation and config on it (id, job, passed,
        trial dir; passing ones first), as the diff counted them (discover's gate and probe left out): the links
        from a flip. Found through the task-digest index (a few tasks' trials, not a generation's)."""
        if not task_digests:
            return {}
        names = {f"d{i}": d for i, d in enumerate(task_digests)}
        cfg = "+harness_config_digest IS NULL" if config_digest is None else "+harness_config_digest = :cfg"
        probe = ("SELECT id FROM jobs WHERE kind = 'discover' OR parent_job IN "
                 "(SELECT id FROM jobs WHERE kind = 'discover')")
        # unary + keeps SQLite on the task_digest index (the generation index would scan half the table)
        sql = (f"SELECT task_digest, id, job_id, passed, error_type, trial_dir FROM trials "
               f"WHERE task_digest IN ({', '.join(':' + n for n in names)}) AND +status = 'done' "
               f"AND +generation = :gen AND +agent = :agent AND {cfg} AND job_id NOT IN ({probe}) "
               "ORDER BY task_digest, passed DESC, id")
        out: dict[str, list[dict[str, Any]]] = {}
        with self.session() as s:
            rows = s.execute(sa.text(sql), {**names, "gen": generation, "agent": agent, "cfg": config_digest}).all()
        for d, tid, job, passed, err, tdir in rows:
            got = out.setdefault(d, [])
            if len(got) < per_task:
                got.append({"id": tid, "job": job, "passed": bool(passed), "error_type": err, "trial_dir": tdir})
        return out

    def phase_usage(self, generations: Sequence[str]) -> list[dict[str, Any]]:
        """Trials, tokens and wall time spent per generation and phase (every finished trial).

        Summed per job first, from the covering index `ix_trials_usage` alone (a join per trial row cost
        0.3 s on 100k trials), then per phase here: a workspace has few jobs."""
        stmt = (
            sa.select(col(TrialRow.generation), col(TrialRow.job_id), func.count(), func.sum(TrialRow.prompt_tokens),
                      func.sum(TrialRow.completion_tokens), func.sum(TrialRow.t_total))
            .where(col(TrialRow.generation).in_(list(generations)), col(TrialRow.status) == TrialStatus.DONE.value)
            .group_by(col(TrialRow.generation), col(TrialRow.job_id))
        )
        with self.session() as s:
            rows = s.execute(stmt).all()
            jobs = sorted({r[1] for r in rows})
            phase = dict(s.execute(sa.select(col(JobRow.id), col(JobRow.phase)).where(col(JobRow.id).in_(jobs))).all())
        out: dict[tuple[str, str], list[float]] = {}
        for g, job, c, pt, ct, w in rows:
            acc = out.setdefault((g, phase.get(job) or "run"), [0, 0, 0, 0.0])
            acc[0] += c
            acc[1] += pt or 0
            acc[2] += ct or 0
            acc[3] += w or 0.0
        return [{"generation": g, "phase": ph, "trials": int(c), "prompt_tokens": int(pt),
                 "completion_tokens": int(ct), "wall_sec": float(w)} for (g, ph), (c, pt, ct, w) in sorted(out.items())]
