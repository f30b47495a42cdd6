"""What `rsi diff` reads, as plain SQL on any connection: one spelling for the store and the light reader.

`rsi diff` on 100k trials has 2 s in all, and importing SQLAlchemy, SQLModel and the table classes alone
costs ~0.7 s of it. So its reads are written here once, in SQL that SQLite and PostgreSQL both run, over
one primitive (`_tuples(sql, params)`, named `:params`): `Store` (rsi.store.repo) runs them through its
engine, and `LiteReader` (rsi.store.lite) through a plain `sqlite3` connection that imports no ORM.
No SQLAlchemy here, by design.

Discovery's gate and probe trials (a discover job and its children) are left out of every outcome read:
the probe selected the tasks, so counting it would measure on what was selected on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rsi.store.queries_rates import DONE, INFRA_ERROR_TYPES, INFRA_SQL, PROBE_JOBS, RateQueries

NO_INDEX_CFG = "(harness_config_digest || '')"


def _cfg_clause(config_digest: str | None, column: str = "harness_config_digest") -> str:
    return f"{column} IS NULL" if config_digest is None else f"{column} = :cfg"


class DiffQueries(RateQueries):
    """`rsi diff`'s reads over `_tuples`, which the class that mixes this in provides."""

    # configs, training runs (generation manifests: RateQueries) -------------------------------
    def config_yaml(self, digest: str) -> str | None:
        """A stored harness config's canonical YAML by digest; None when it is not stored."""
        rows = self._tuples("SELECT canonical_yaml FROM configs WHERE digest = :d", {"d": digest})
        return str(rows[0][0]) if rows else None

    def training_run_info(self, run_id: str) -> dict[str, Any] | None:
        """A training run's status, backend, objective and metrics; None when the store lacks it."""
        rows = self._tuples("SELECT status, backend, objective, metrics_json FROM training_runs WHERE id = :id",
                          {"id": run_id})
        if not rows:
            return None
        status, backend, objective, metrics = rows[0]
        return {"status": status, "backend": backend, "objective": objective,
                "metrics": dict(json.loads(metrics or "{}"))}

    # tasks and attribution --------------------------------------------------------------------
    def task_families(self) -> dict[str, str]:
        """task name -> family over every registered task."""
        return {n: f for n, f in self._tuples("SELECT name, family FROM tasks")}

    def attribution_kinds(self, generation: str) -> dict[str, str]:
        """task digest -> the generation's attribution kind."""
        return {d: k for d, k in self._tuples(
            "SELECT task_digest, kind FROM attributions WHERE generation = :g ORDER BY task_name, id",
            {"g": generation})}

    def promote_verdict(self, candidate: str, parent: str) -> tuple[str, dict[str, Any]] | None:
        """The newest finished promote job of `candidate` over `parent` and its recorded verdict, if any."""
        rows = self._tuples("SELECT id, params_json FROM jobs WHERE kind = 'promote' AND status = 'done' "
                          "ORDER BY created_at DESC")
        for job_id, params_json in rows:
            params = json.loads(params_json or "{}")
            if params.get("candidate") == candidate and params.get("parent") == parent and params.get("verdict"):
                return str(job_id), dict(params["verdict"])
        return None

    # outcomes ---------------------------------------------------------------------------------
    def task_cells(self, generation: str, config_digest: str | None, agent: str = "harness") -> list[dict[str, Any]]:
        """Per task, one generation's finished trials under one config, aggregated in SQL: task digest, name,
        split, trials, passes (infra errors never count as a pass), infra. Read from the covering index
        `ix_trials_cells` (rsi.store.tables.TRIAL_CELLS_COLUMNS); holdout rows included (no seal: the diff
        reader compares generations on the holdout)."""
        sql = (f"SELECT task_digest, task_name, split, COUNT(*), "
               f"SUM(CASE WHEN passed AND COALESCE(error_type, '') NOT IN {INFRA_SQL} THEN 1 ELSE 0 END), "
               f"SUM(CASE WHEN COALESCE(error_type, '') IN {INFRA_SQL} THEN 1 ELSE 0 END) "
               f"FROM trials WHERE status = '{DONE}' AND generation = :gen AND agent = :agent "
               f"AND {_cfg_clause(config_digest)} AND job_id NOT IN ({PROBE_JOBS}) "
               "GROUP BY task_digest, task_name, split")
        rows = self._tuples(sql, {"gen": generation, "agent": agent, "cfg": config_digest})
        return [{"digest": d, "name": n, "split": sp, "trials": int(c), "passes": int(p or 0), "infra": int(i or 0)}
                for d, n, sp, c, p, i in rows]

    def task_trial_ids(self, generation: str, config_digest: str | None, task_digests: Sequence[str],
                       agent: str = "harness", per_task: int = 4) -> dict[str, list[dict[str, Any]]]:
        """task digest -> up to `per_task` finished trials of one generation and config on it (id, job, passed,
        trial dir; passing ones first), as the diff counted them: the links from a flip. Found through the
        task-digest index (a few tasks' trials, not a generation's)."""
        if not task_digests:
            return {}
        names = {f"d{i}": d for i, d in enumerate(task_digests)}
        # `col || ''` keeps SQLite on the task_digest index (the generation index would scan half the table);
        # unlike SQLite's unary `+`, PostgreSQL runs it too
        sql = (f"SELECT task_digest, id, job_id, passed, error_type, trial_dir FROM trials "
               f"WHERE task_digest IN ({', '.join(':' + n for n in names)}) AND status || '' = '{DONE}' "
               f"AND generation || '' = :gen AND agent || '' = :agent "
               f"AND {_cfg_clause(config_digest, column=NO_INDEX_CFG)} "
               f"AND job_id NOT IN ({PROBE_JOBS}) ORDER BY task_digest, passed DESC, id")
        out: dict[str, list[dict[str, Any]]] = {}
        for d, tid, job, passed, err, tdir in self._tuples(sql, {**names, "gen": generation, "agent": agent,
                                                              "cfg": config_digest}):
            got = out.setdefault(d, [])
            if len(got) < per_task:
                got.append({"id": tid, "job": job, "passed": bool(passed), "error_type": err, "trial_dir": tdir})
        return out

    def phase_usage(self, generations: Sequence[str]) -> list[dict[str, Any]]:
        """Trials, tokens and wall time spent per generation and phase (every finished trial).

        Summed per job first, from the covering index `ix_trials_usage` alone (a join per trial row cost
        0.3 s on 100k trials), then per phase here: a workspace has few jobs."""
        if not generations:
            return []
        names = {f"g{i}": g for i, g in enumerate(generations)}
        rows = self._tuples(
            "SELECT generation, job_id, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(t_total) "
            f"FROM trials WHERE generation IN ({', '.join(':' + n for n in names)}) AND status = '{DONE}' "
            "GROUP BY generation, job_id", names)
        phase = {j: p for j, p in self._tuples("SELECT id, phase FROM jobs")}
        out: dict[tuple[str, str], list[float]] = {}
        for g, job, c, pt, ct, w in rows:
            acc = out.setdefault((g, phase.get(job) or "run"), [0, 0, 0, 0.0])
            acc[0] += c
            acc[1] += pt or 0
            acc[2] += ct or 0
            acc[3] += w or 0.0
        return [{"generation": g, "phase": ph, "trials": int(c), "prompt_tokens": int(pt),
                 "completion_tokens": int(ct), "wall_sec": float(w)} for (g, ph), (c, pt, ct, w) in sorted(out.items())]


__all__ = ["INFRA_ERROR_TYPES", "INFRA_SQL", "PROBE_JOBS", "DiffQueries"]
