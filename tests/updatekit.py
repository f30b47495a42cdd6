"""Finished harness trials written straight into a workspace (rows + trajectory.json), for `rsi update` tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.harness.atif import Metrics, TrajectoryRecorder
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.store.tables import TrialRow

HEAD = [{"role": "system", "content": "You are a shell agent."}]


@dataclass
class T:
    task: str
    attempt: int
    reward: float | None
    reply: str = "```bash\necho ok > /app/out.txt\n```\n"
    error_type: str | None = None
    integrity: str | None = "snapshot"
    tampered: list[str] = field(default_factory=list)
    split: str = "train"
    generation: str = "gen-0000"
    config_digest: str | None = None  # None: the generation's own
    tokens: list[dict[str, Any]] | None = None
    prompt_variables: dict[str, Any] | None = None  # what the harness records to render the head again
    agent: str = "harness"  # or a training-data source's agent: oracle-replay, hinted
    source: str | None = None  # the trajectory's `source` (None: not recorded, as before sources existed)
    task_digest: str | None = None  # a real task's digest (None: `digest-<task>`)


def workspace(tmp_path: Path) -> WorkspaceContext:
    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    return WorkspaceContext.open(root)


def messages_of(t: T) -> list[dict[str, Any]]:
    return [*HEAD, {"role": "user", "content": f"Task: {t.task}"},
            {"role": "assistant", "content": t.reply}, {"role": "user", "content": "ok\n[exit code 0]"},
            {"role": "assistant", "content": "DONE"}]


def add_trials(ctx: WorkspaceContext, trials: list[T], job_id: str = "job-upd-1", kind: str = "run",
               parent_job: str | None = None) -> list[str]:
    gen = ctx.generation("gen-0000")
    rows = []
    for t in trials:
        tid = f"{job_id}-{t.task}-{t.attempt}"
        d = ctx.ws.jobs_dir / job_id / tid
        digest = t.config_digest or gen.harness_config.digest
        rec = TrajectoryRecorder(session_id=tid, model_name=gen.serve_name())
        msgs = messages_of(t)
        rec.add("system", msgs[0]["content"])
        rec.add("user", msgs[1]["content"])
        for k, content in enumerate((t.reply, "DONE"), start=1):
            extra: dict[str, Any] = {"turn": k}
            if t.tokens is not None:
                extra.update(t.tokens[k - 1])
            rec.add_agent(message=content, metrics=Metrics(prompt_tokens=1, completion_tokens=1), extra=extra)
        rec.rsi_extra.update(task=t.task, few_shot=[], messages=msgs, tools=[], harness_config_digest=digest,
                             **({"prompt_variables": t.prompt_variables} if t.prompt_variables else {}),
                             **({"source": t.source} if t.source else {}))
        rec.finish(prompt_tokens=2, completion_tokens=2, cached_tokens=0)
        rec.write(d / "trajectory.json")
        rows.append(TrialRow(
            id=tid, job_id=job_id, task_name=t.task, task_digest=t.task_digest or f"digest-{t.task}",
            generation=t.generation, agent=t.agent, attempt=t.attempt, status="done", reward=t.reward,
            passed=(t.reward or 0) >= 1,
            error_type=t.error_type, harness_config_digest=digest, trial_dir=str(d), split=t.split,
            integrity=t.integrity, tampered_paths_json=__import__("json").dumps(t.tampered), turns=2,
        ))
    ctx.store.create_job(job_id, agent="harness", generation="gen-0000", harness_config_digest=None, attempts=1,
                         concurrency=1, task_paths=[], tasks_fingerprint="x", trials=rows, kind=kind,
                         parent_job=parent_job)
    return [r.id for r in rows]
