"""SQLModel tables: every generation, task, job and trial is a row.

Schema changes go only through migrations (rsi/store/migrations/versions); a test checks that
the migrated schema equals these tables, starting from a blank database.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class GenerationRow(SQLModel, table=True):
    __tablename__ = "generations"

    id: str = Field(primary_key=True)
    parent: str | None = Field(default=None, index=True)
    state: str
    contract: str
    base_model_id: str
    harness_config_name: str
    harness_config_digest: str
    serve_name: str
    manifest_json: str
    created_at: datetime = Field(default_factory=utcnow)


class TaskRow(SQLModel, table=True):
    __tablename__ = "tasks"

    digest: str = Field(primary_key=True)
    name: str = Field(index=True)
    path: str
    family: str
    split: str
    difficulty: int = 1
    state: str = "active"
    created_at: datetime = Field(default_factory=utcnow)


class JobRow(SQLModel, table=True):
    __tablename__ = "jobs"

    id: str = Field(primary_key=True)
    kind: str = "run"
    status: str = Field(index=True)  # running | done | interrupted
    agent: str
    generation: str | None = None
    harness_config_digest: str | None = None
    attempts: int = 1
    concurrency: int = 1
    task_paths_json: str = "[]"
    tasks_fingerprint: str
    owner_pid: int | None = None
    owner_host: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None


class TrialRow(SQLModel, table=True):
    __tablename__ = "trials"

    id: str = Field(primary_key=True)
    job_id: str = Field(foreign_key="jobs.id", index=True)
    task_name: str = Field(index=True)
    task_digest: str = Field(index=True)
    generation: str | None = Field(default=None, index=True)
    agent: str
    attempt: int
    status: str = Field(index=True)  # pending | running | done
    reward: float | None = None
    passed: bool = False
    error_type: str | None = None
    error_message: str | None = None
    infra_retries: int = 0
    t_build: float = 0.0
    t_agent: float = 0.0
    t_verify: float = 0.0
    t_total: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    harness_config_digest: str | None = None
    model_name: str | None = None
    trial_dir: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
