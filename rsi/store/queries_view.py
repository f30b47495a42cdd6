"""The viewer's reads (`rsi view`): filtered, keyset-paginated trial lists, job overviews, pass grids.

Everything here reads; nothing writes. The trial list stays fast at 100k trials because a page is
found by keyset (the sort key and the id of the row a page ends on; no OFFSET), the family and
attribution columns are joined onto the page only, and the match count stops at `COUNT_CAP`.
The viewer shows every split (it is for a person reading what happened, not for a phase that the
holdout seal protects).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa

from rsi.store.queries_base import StoreBase
from rsi.store.queries_rates import INFRA_ERROR_TYPES, INFRA_SQL, RateQueries
from rsi.store.tables import JobRow, TaskRow

COUNT_CAP = 1_000
PAGE_SIZE = 50
OUTCOMES = ("pass", "fail", "infra", "pending")
# sort name -> SQL expression over `t` (trials); NULLs folded so that the keyset comparison is total
SORTS: dict[str, str] = {
    "newest": "t.rowid",  # the order trials were planned in (a job plans all its trials at once): no sort needed
    "finished": "coalesce(t.finished_at, '')",
    "reward": "coalesce(t.reward, -1.0)",
    "turns": "t.turns",
    "tokens": "(t.prompt_tokens + t.completion_tokens)",
    "duration": "t.t_total",
    "task": "t.task_name",
}
FILTERS = ("generation", "arm", "task", "family", "split", "outcome", "error_type", "integrity", "verdict", "job",
           "agent")
_INFRA = INFRA_SQL
_COLUMNS = ("id", "job_id", "task_name", "task_digest", "generation", "agent", "arm_id", "variant", "attempt",
            "status", "reward", "passed", "error_type", "split", "integrity", "turns", "prompt_tokens",
            "completion_tokens", "t_total", "finished_at", "harness_config_digest")


@dataclass(frozen=True)
class TrialQuery:
    """A trial list as the URL states it: filters (None: not applied), sort, direction, and a page cursor."""

    generation: str | None = None
    arm: str | None = None
    task: str | None = None
    family: str | None = None
    split: str | None = None
    outcome: str | None = None
    error_type: str | None = None
    integrity: str | None = None
    verdict: str | None = None
    job: str | None = None
    agent: str | None = None
    ids: tuple[str, ...] | None = None  # a search's hits (None: no search)
    sort: str = "newest"
    desc: bool = True
    after: str | None = None  # cursor: rows after this one in list order
    before: str | None = None  # cursor: rows before this one
    limit: int = PAGE_SIZE

    def filters(self) -> dict[str, str]:
        return {k: v for k in FILTERS if (v := getattr(self, k)) not in (None, "")}


@dataclass
class TrialPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None  # None: this is the last page
    prev_cursor: str | None  # None: this is the first page
    count: int  # matches, at most COUNT_CAP
    capped: bool  # more than COUNT_CAP match
    extra: dict[str, Any] = field(default_factory=dict)


def encode_cursor(key: Any, trial_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([key, trial_id]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[Any, str]:
    try:
        key, tid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError) as e:
        raise ValueError(f"bad page cursor {cursor!r}") from e
    return key, str(tid)


def _where(q: TrialQuery) -> tuple[list[str], dict[str, Any]]:
    w: list[str] = []
    p: dict[str, Any] = {}
    for name, column in (("generation", "generation"), ("arm", "arm_id"), ("task", "task_name"),
                         ("split", "split"), ("error_type", "error_type"), ("integrity", "integrity"),
                         ("job", "job_id"), ("agent", "agent")):
        v = getattr(q, name)
        if v:
            w.append(f"t.{column} = :{name}")
            p[name] = v
    if q.family:
        w.append("t.task_digest IN (SELECT digest FROM tasks WHERE family = :family)")
        p["family"] = q.family
    if q.outcome:
        if q.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}; got {q.outcome!r}")
        w.append({"pass": "t.status = 'done' AND t.passed",
                  "fail": f"t.status = 'done' AND NOT t.passed AND coalesce(t.error_type, '') NOT IN {_INFRA}",
                  "infra": f"t.error_type IN {_INFRA}",
                  "pending": "t.status != 'done'"}[q.outcome])
    if q.verdict:
        w.append("EXISTS (SELECT 1 FROM attributions a WHERE a.task_digest = t.task_digest "
                 "AND a.generation = t.generation AND a.kind = :verdict)")
        p["verdict"] = q.verdict
    if q.ids is not None:
        names = [f"id{i}" for i in range(len(q.ids))]
        w.append(f"t.id IN ({', '.join(':' + n for n in names)})" if names else "0")
        p.update(zip(names, q.ids, strict=True))
    return w, p


def outcome_of(row: dict[str, Any]) -> str:
    """pass | fail | infra | pending, as the outcome filter defines them."""
    if row["error_type"] in INFRA_ERROR_TYPES:
        return "infra"
    if row["status"] != "done":
        return "pending"
    return "pass" if row["passed"] else "fail"


def _key_of(row: dict[str, Any], sort: str) -> Any:
    if sort == "newest":
        return row["rid"]
    if sort == "reward":
        return -1.0 if row["reward"] is None else row["reward"]
    if sort == "tokens":
        return row["prompt_tokens"] + row["completion_tokens"]
    if sort == "duration":
        return row["t_total"]
    if sort == "finished":
        return row["finished_at"] or ""
    if sort == "task":
        return row["task_name"]
    return row[sort]


class ViewQueries(StoreBase, RateQueries):
    """Read-only queries behind the viewer's pages."""

    def _rows(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sa.text(sql), params)]

    def trial_page(self, q: TrialQuery, *, count: bool = True) -> TrialPage:
        """One page of the trials `q` selects, in its order, with cursors to the pages on either side
        (`count`: also count the matches, up to COUNT_CAP)."""
        if q.sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}; got {q.sort!r}")
        key = SORTS[q.sort]
        where, params = _where(q)
        backwards = q.before is not None
        cursor = q.before if backwards else q.after
        # the list's direction, flipped when walking back from `before`
        desc = q.desc != backwards
        if cursor is not None:
            ck, cid = decode_cursor(cursor)
            op = "<" if desc else ">"
            where.append(f"{key} {op} :ck" if q.sort == "newest" else
                         f"({key} {op} :ck OR ({key} = :ck AND t.id {op} :cid))")
            params.update(ck=ck, cid=cid)
        order = "DESC" if desc else "ASC"
        cols = ", ".join(f"t.{c}" for c in _COLUMNS)
        tie = "" if q.sort == "newest" else f", t.id {order}"  # rowid is unique: no tie to break
        sql = (f"WITH page AS (SELECT {cols}, t.rowid AS rid FROM trials t "
               f"{'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY {key} {order}{tie} LIMIT :lim) "
               "SELECT page.*, tk.family AS family, a.kind AS verdict FROM page "
               "LEFT JOIN tasks tk ON tk.digest = page.task_digest "
               "LEFT JOIN attributions a ON a.task_digest = page.task_digest AND a.generation = page.generation "
               f"ORDER BY {key.replace('t.rowid', 'page.rid').replace('t.', 'page.')} {order}, page.id {order}")
        params["lim"] = q.limit + 1
        rows = self._rows(sql, params)
        more = len(rows) > q.limit
        rows = rows[: q.limit]
        for r in rows:
            r["outcome"] = outcome_of(r)
        if backwards:
            rows.reverse()
        first = encode_cursor(_key_of(rows[0], q.sort), rows[0]["id"]) if rows else None
        last = encode_cursor(_key_of(rows[-1], q.sort), rows[-1]["id"]) if rows else None
        if backwards:
            prev_c, next_c = (first if more else None), last
        else:
            prev_c, next_c = (first if cursor is not None else None), (last if more else None)
        n, capped = self.count_trials(replace(q, after=None, before=None)) if count else (len(rows), False)
        return TrialPage(rows, next_c, prev_c, n, capped)

    def count_trials(self, q: TrialQuery) -> tuple[int, bool]:
        """How many trials `q` selects, counted up to COUNT_CAP (and whether there are more)."""
        where, params = _where(q)
        sql = (f"SELECT count(*) FROM (SELECT 1 FROM trials t {'WHERE ' + ' AND '.join(where) if where else ''} "
               "LIMIT :cap)")
        with self.engine.connect() as conn:
            n = int(conn.execute(sa.text(sql), {**params, "cap": COUNT_CAP + 1}).scalar_one())
        return min(n, COUNT_CAP), n > COUNT_CAP

    def trial_neighbours(self, q: TrialQuery, trial_id: str) -> tuple[str | None, str | None]:
        """The trials before and after `trial_id` in the list `q` describes (None at either end)."""
        rows = self._rows(f"SELECT {', '.join(_COLUMNS)}, rowid AS rid FROM trials WHERE id = :id", {"id": trial_id})
        if not rows:
            return None, None
        cur = encode_cursor(_key_of(rows[0], q.sort), trial_id)
        nxt = self.trial_page(replace(q, after=cur, before=None, limit=1), count=False).rows
        prv = self.trial_page(replace(q, before=cur, after=None, limit=1), count=False).rows
        return (prv[0]["id"] if prv else None), (nxt[0]["id"] if nxt else None)

    def facets(self) -> dict[str, list[str]]:
        """The values each filter can take (distinct values, read from indexed columns or small tables)."""
        out: dict[str, list[str]] = {}
        with self.engine.connect() as conn:
            for name, sql in (
                ("generation", "SELECT id FROM generations ORDER BY id"),
                ("arm", "SELECT id FROM arms ORDER BY id"),
                ("split", "SELECT DISTINCT split FROM trials ORDER BY split"),
                ("family", "SELECT DISTINCT family FROM tasks ORDER BY family"),
                ("verdict", "SELECT DISTINCT kind FROM attributions ORDER BY kind"),
                ("agent", "SELECT DISTINCT agent FROM arms ORDER BY agent"),
            ):
                out[name] = [str(r[0]) for r in conn.execute(sa.text(sql)) if r[0] is not None]
        return out

    def job_overview(self, limit: int = 200) -> list[dict[str, Any]]:
        """Newest jobs first, each with its trials by outcome and its budgets (limit, spent, unit)."""
        jobs = self._rows("SELECT id, kind, phase, status, agent, generation, parent_job, interrupted_reason, "
                          "created_at, finished_at, attempts, concurrency FROM jobs "
                          "ORDER BY created_at DESC LIMIT :lim", {"lim": limit})
        ids = [j["id"] for j in jobs]
        if not ids:
            return []
        names = {f"j{i}": x for i, x in enumerate(ids)}
        inl = ", ".join(":" + n for n in names)
        counts = {r["job_id"]: r for r in self._rows(
            "SELECT job_id, count(*) AS trials, sum(CASE WHEN status = 'done' AND passed THEN 1 ELSE 0 END) AS pass, "
            f"sum(CASE WHEN error_type IN {_INFRA} THEN 1 ELSE 0 END) AS infra, "
            "sum(CASE WHEN status != 'done' THEN 1 ELSE 0 END) AS pending, "
            "sum(prompt_tokens + completion_tokens) AS tokens "
            f"FROM trials WHERE job_id IN ({inl}) GROUP BY job_id", names)}
        budgets: dict[str, list[dict[str, Any]]] = {}
        for b in self._rows(f"SELECT job_id, phase, unit, \"limit\", spent FROM budgets WHERE job_id IN ({inl}) "
                            "ORDER BY job_id, phase", names):
            budgets.setdefault(b["job_id"], []).append(b)
        for j in jobs:
            c = counts.get(j["id"]) or {}
            n, ps, inf, pend = (int(c.get(k) or 0) for k in ("trials", "pass", "infra", "pending"))
            j["outcomes"] = {"pass": ps, "fail": n - ps - inf - pend, "infra": inf, "pending": pend}
            j["trials"] = n
            j["tokens"] = int(c.get("tokens") or 0)
            j["budgets"] = budgets.get(j["id"], [])
        return jobs

    def task_row(self, digest: str) -> TaskRow | None:
        with self.session() as s:
            return s.get(TaskRow, digest)

    def job_row(self, job_id: str) -> JobRow | None:
        with self.session() as s:
            return s.get(JobRow, job_id)

    def arms_in(self, splits: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        """The arms with finished trials (on these splits), by generation, agent, config and variant."""
        where, params = "", {}
        if splits:
            names = {f"s{i}": x for i, x in enumerate(splits)}
            where = f"AND t.split IN ({', '.join(':' + n for n in names)})"
            params = names
        return self._rows(
            "SELECT a.id, a.agent, a.generation, a.config_digest, a.variant FROM arms a WHERE EXISTS "
            f"(SELECT 1 FROM trials t WHERE t.arm_id = a.id AND t.status = 'done' {where}) "
            "ORDER BY coalesce(a.generation, ''), a.agent, coalesce(a.config_digest, ''), coalesce(a.variant, ''), "
            "a.id", params)

    def control_agents(self) -> list[str]:
        """Agents with arms that are not model arms (oracle, nop, known_wrong, ...): the controls."""
        model = self.model_agents()
        return [a for a in (str(r[0]) for r in self._tuples("SELECT DISTINCT agent FROM arms ORDER BY agent"))
                if a not in model]

    def trial_choices(self, task: str, *, generation: str | None = None, arm: str | None = None,
                      ids: list[str] | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Finished trials of one task under one generation (or arm; or among `ids`, the trials a figure
        counted): passing ones first, then by attempt."""
        where = ["task_name = :task", "status = 'done'"]
        params: dict[str, Any] = {"task": task, "lim": limit}
        if ids is not None:
            names = {f"i{n}": x for n, x in enumerate(ids)}
            where.append(f"id IN ({', '.join(':' + n for n in names) or 'NULL'})")
            params.update(names)
        if generation:
            where.append("generation = :generation")
            params["generation"] = generation
        if arm:
            where.append("arm_id = :arm")
            params["arm"] = arm
        return self._rows(f"SELECT id, job_id, passed, reward, attempt, turns, trial_dir, generation, arm_id "
                          f"FROM trials WHERE {' AND '.join(where)} "
                          "ORDER BY passed DESC, finished_at DESC, id LIMIT :lim", params)

    def attribution_of(self, task_digest: str, generation: str | None) -> dict[str, Any] | None:
        rows = self._rows("SELECT kind, confidence, evidence_json, variant, reason, revised_at FROM attributions "
                          "WHERE task_digest = :d AND generation = :g", {"d": task_digest, "g": generation})
        if not rows:
            return None
        row = rows[0]
        row["evidence"] = json.loads(row.pop("evidence_json") or "[]")
        return row

    def cited_by(self, trial_id: str) -> list[dict[str, Any]]:
        """Attribution verdicts whose evidence names this trial."""
        return [{**r, "evidence": json.loads(r.pop("evidence_json") or "[]")} for r in self._rows(
            "SELECT task_name, generation, kind, confidence, reason, evidence_json FROM attributions "
            "WHERE evidence_json LIKE :pat", {"pat": f'%"{trial_id}"%'})]

    def trial_dirs(self, after_id: str = "", limit: int = 2000) -> list[tuple[str, str]]:
        """(trial id, trial dir) of finished trials in id order from `after_id`: what the search index reads."""
        with self.engine.connect() as conn:
            return [(str(a), str(b)) for a, b in conn.execute(sa.text(
                "SELECT id, trial_dir FROM trials WHERE status = 'done' AND id > :a ORDER BY id LIMIT :lim"),
                {"a": after_id, "lim": limit})]

    def trial_total(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM trials WHERE status = 'done'")).scalar_one())

    def promote_jobs(self) -> list[dict[str, Any]]:
        """Finished promote jobs, oldest first, with their recorded params (candidate, parent, verdict)."""
        rows = self._rows("SELECT id, params_json, created_at FROM jobs WHERE kind = 'promote' "
                          "ORDER BY created_at", {})
        return [{"id": r["id"], "created_at": r["created_at"], **json.loads(r["params_json"] or "{}")} for r in rows]


__all__ = ["COUNT_CAP", "FILTERS", "OUTCOMES", "PAGE_SIZE", "SORTS", "TrialPage", "TrialQuery", "ViewQueries",
           "decode_cursor", "encode_cursor", "outcome_of"]
