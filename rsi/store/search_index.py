"""Full-text search over trajectories (SQLite FTS5), kept in a cache file beside the store.

Trajectories live on disk (`.rsi/jobs/<job>/<trial>/trajectory.json`), not in the database, and the
viewer opens the database read-only; so the index is a separate SQLite file the viewer builds and
tops up itself (`.rsi/cache/trajectory-search.db`), not a table of the store. Deleting it only costs
a rebuild. Each finished trial's text (every step's message, tool-call arguments and observations,
and the verifier's output) is indexed once; `sync` indexes the trials it has not seen yet.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SCHEMA = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(trial_id UNINDEXED, body, tokenize='unicode61')",
    "CREATE TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY)",
)
MAX_DOC_CHARS = 200_000
VERIFIER_FILES = ("test-stdout.txt", "test-stderr.txt", "stdout.txt", "stderr.txt")


def trajectory_text(trial_dir: Path) -> str:
    """The searchable text of one trial: messages, tool-call arguments, observations, verifier output."""
    parts: list[str] = []
    try:
        raw: Any = json.loads((trial_dir / "trajectory.json").read_text(errors="replace"))
    except (OSError, ValueError):
        raw = {}
    for step in raw.get("steps") or [] if isinstance(raw, dict) else []:
        if not isinstance(step, dict):
            continue
        if isinstance(step.get("message"), str):
            parts.append(step["message"])
        for call in step.get("tool_calls") or []:
            if isinstance(call, dict):
                args = call.get("arguments") or {}
                parts.append(str(args.get("command")) if set(args) == {"command"} else json.dumps(args))
        obs = step.get("observation") or {}
        for res in obs.get("results") or [] if isinstance(obs, dict) else []:
            if isinstance(res, dict) and isinstance(res.get("content"), str):
                parts.append(res["content"])
    vdir = trial_dir / "verifier"
    for name in VERIFIER_FILES:
        try:
            parts.append((vdir / name).read_text(errors="replace")[:20_000])
        except OSError:
            continue
    return "\n".join(parts)[:MAX_DOC_CHARS]


def fts_query(text: str) -> str:
    """User text as an FTS5 query: each word a quoted phrase (so punctuation is never syntax), all required."""
    words = [w for w in text.split() if w.strip('"')]
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


class SearchIndex:
    """The FTS5 cache file. Thread-safe: one connection per call, SQLite's own locking between them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            for stmt in SCHEMA:
                conn.execute(stmt)
        self._lock = threading.Lock()
        self.last_sync = 0.0
        self.syncing = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def indexed(self) -> int:
        with self._connect() as conn:
            return int(conn.execute("SELECT count(*) FROM seen").fetchone()[0])

    def sync(self, trials: Iterable[tuple[str, str]], resolve: Callable[[str], Path], batch: int = 200,
             pause: float = 0.02) -> int:
        """Index the (trial id, trial dir) pairs not indexed yet; returns how many were added. Sleeps `pause`
        between batches, so that a viewer indexing in the background keeps answering pages promptly."""
        if not self._lock.acquire(blocking=False):
            return 0  # another thread is syncing
        self.syncing = True
        added = 0
        try:
            with self._connect() as conn:
                seen = {r[0] for r in conn.execute("SELECT id FROM seen")}
            todo = [(tid, d) for tid, d in trials if tid not in seen]
            for i in range(0, len(todo), batch):
                rows = [(tid, trajectory_text(resolve(d))) for tid, d in todo[i:i + batch]]
                with self._connect() as conn:
                    conn.executemany("INSERT INTO docs (trial_id, body) VALUES (?, ?)", rows)
                    conn.executemany("INSERT OR IGNORE INTO seen (id) VALUES (?)", [(r[0],) for r in rows])
                added += len(rows)
                time.sleep(pause)
        finally:
            self.last_sync = time.monotonic()
            self.syncing = False
            self._lock.release()
        return added

    def search(self, text: str, limit: int = 1000) -> dict[str, str]:
        """trial id -> a snippet around the match (\\x02 and \\x03 mark the hit), best match first."""
        q = fts_query(text)
        if not q:
            return {}
        with self._connect() as conn:
            try:
                rows = conn.execute(
                    "SELECT trial_id, snippet(docs, 1, char(2), char(3), '…', 12) FROM docs WHERE docs MATCH ? "
                    "ORDER BY rank LIMIT ?", (q, limit)).fetchall()
            except sqlite3.OperationalError:
                return {}
        return {str(tid): str(snip) for tid, snip in rows}


__all__ = ["SearchIndex", "fts_query", "trajectory_text"]
