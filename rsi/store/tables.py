"""SQLModel tables: every generation, task, config, arm, job, trial, budget and verdict is a row.

Schema changes go only through migrations (rsi/store/migrations/versions); a test checks that
the migrated schema equals these tables, starting from a blank database and from revision 0001.
Columns added after 0001 carry a server default so rows written before the upgrade stay valid.
List- and map-valued evidence is stored as JSON text in `*_json` columns; the read-only
properties below decode it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


def _default(value: str) -> dict[str, Any]:
    """Column kwargs for a server default (so rows inserted by raw SQL or older code get a value)."""
    return {"server_default": value}


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


class GenerationEventRow(SQLModel, table=True):
    """One state change of a generation (registered, promoted, rejected, rolled back): the audit trail."""

    __tablename__ = "generation_events"

    id: int | None = Field(default=None, primary_key=True)
    generation: str = Field(foreign_key="generations.id", index=True)
    from_state: str | None = None
    to_state: str
    reason: str = Field(sa_type=sa.Text)
    at: datetime = Field(default_factory=utcnow)


class TaskRow(SQLModel, table=True):
    __tablename__ = "tasks"

    digest: str = Field(primary_key=True)
    name: str = Field(index=True)
    path: str
    family: str
    split: str
    difficulty: int = 1
    state: str = "active"  # active | retired
    created_at: datetime = Field(default_factory=utcnow)
    # Added in 0003: where the task came from and what the last probe saw.
    generator: str | None = None
    seed: int | None = None
    parent_task: str | None = None
    discovered_by: str | None = None  # generation
    discover_job: str | None = None
    probe_pass_rate: float | None = None
    probe_trials: int = Field(default=0, sa_column_kwargs=_default("0"))
    state_reason: str | None = Field(default=None, sa_type=sa.Text)


class ConfigRow(SQLModel, table=True):
    """A harness config by digest (DESIGN §4.3): a generation points at a digest, never at a file."""

    __tablename__ = "configs"

    digest: str = Field(primary_key=True)
    name: str
    canonical_yaml: str = Field(sa_type=sa.Text)
    parent_digest: str | None = Field(default=None, index=True)
    origin: str = "file"  # file | search_space | reflection | manual | fewshot (a plain string: no migration)
    source: str | None = None  # file path or variant label
    created_at: datetime = Field(default_factory=utcnow)


class ArmRow(SQLModel, table=True):
    """What acts, fully pinned (rsi.core.arm.Arm); `id` is Arm.id."""

    __tablename__ = "arms"

    id: str = Field(primary_key=True)
    agent: str
    generation: str | None = None
    config_digest: str | None = None
    variant: str | None = None
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
    # Informational only (shown in messages): ownership is the job's file lock (rsi.store.locks).
    owner_pid: int | None = None
    owner_host: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    phase: str | None = None  # discover | expand | update | promote | run
    arms_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))  # arm ids, in plan order
    interrupted_reason: str | None = Field(default=None, sa_type=sa.Text)
    # Added in 0003: the phase job that planned this one (a discover job's gate and probe jobs),
    # and the settings a resume must match.
    parent_job: str | None = Field(default=None, index=True)
    params_json: str = Field(default="{}", sa_column_kwargs=_default("{}"))
    # Added in 0006: on PostgreSQL a job is owned by the driver whose lease (renewed while it runs,
    # seconds since the epoch on the database's clock) has not run out.
    lease_owner: str | None = None
    lease_until: float | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(json.loads(self.params_json or "{}"))

    @property
    def arm_ids(self) -> list[str]:
        return list(json.loads(self.arms_json or "[]"))


# One generation's per-task outcome counts (`rsi diff`, promote) read from this index alone: SQLite walks the
# generation's entries already grouped by task instead of fetching half the table row by row (0.25 -> 0.09 s
# per generation at 100k trials), for ~200 bytes per trial.
TRIAL_CELLS_COLUMNS = ("generation", "agent", "harness_config_digest", "status", "task_digest", "task_name", "split",
                       "passed", "error_type", "job_id")
# rsi diff's cost per generation and phase (queries_promote.phase_usage) reads only the index
TRIAL_USAGE_COLUMNS = ("generation", "status", "job_id", "prompt_tokens", "completion_tokens", "t_total")


class TrialRow(SQLModel, table=True):
    __tablename__ = "trials"
    __table_args__ = (sa.Index("ix_trials_cells", *TRIAL_CELLS_COLUMNS),
                      sa.Index("ix_trials_usage", *TRIAL_USAGE_COLUMNS))

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
    # Added in 0002: the arm, the split (holdout rows are sealed, see Store.outcomes) and evidence.
    arm_id: str | None = Field(default=None, index=True)
    variant: str | None = None
    split: str = Field(default="train", index=True, sa_column_kwargs=_default("train"))
    reward_map_json: str = Field(default="{}", sa_column_kwargs=_default("{}"))
    changed_paths_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))
    tampered_paths_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))
    tamper_reasons_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))
    integrity: str | None = None
    widened_roots_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))
    verifier_exit_code: int | None = None
    turns: int = Field(default=0, sa_column_kwargs=_default("0"))
    t_queue: float = Field(default=0.0, sa_column_kwargs=_default("0"))  # seconds queued at the model server
    t_snapshot: float = Field(default=0.0, sa_column_kwargs=_default("0"))
    # [{error_type, message[, at]}] for every infra attempt before the recorded one.
    infra_attempts_json: str = Field(default="[]", sa_column_kwargs=_default("[]"))
    node: str | None = None  # added in 0006: the cluster node that ran it (`ray` executor)

    @property
    def rewards(self) -> dict[str, float]:
        return dict(json.loads(self.reward_map_json or "{}"))

    @property
    def changed_paths(self) -> list[str]:
        return list(json.loads(self.changed_paths_json or "[]"))

    @property
    def tampered_paths(self) -> list[str]:
        return list(json.loads(self.tampered_paths_json or "[]"))

    @property
    def tamper_reasons(self) -> list[str]:
        return list(json.loads(self.tamper_reasons_json or "[]"))

    @property
    def widened_roots(self) -> list[str]:
        return list(json.loads(self.widened_roots_json or "[]"))

    @property
    def infra_attempts(self) -> list[dict[str, Any]]:
        return list(json.loads(self.infra_attempts_json or "[]"))


class BudgetRow(SQLModel, table=True):
    """Limit and spent in one unit, per job and phase (DESIGN §2), checked before each trial."""

    __tablename__ = "budgets"

    job_id: str = Field(primary_key=True)
    phase: str = Field(default="all", primary_key=True, sa_column_kwargs=_default("all"))
    unit: str  # trials | tokens | minutes | usd
    limit: float
    spent: float = Field(default=0.0, sa_column_kwargs=_default("0"))
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def remaining(self) -> float:
        return max(self.limit - self.spent, 0.0)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit


class AttributionRow(SQLModel, table=True):
    """The verdict for one failed (task, generation) (DESIGN §7), revised as evidence arrives."""

    __tablename__ = "attributions"
    __table_args__ = (sa.UniqueConstraint("task_digest", "generation", name="uq_attributions_task_generation"),)

    id: int | None = Field(default=None, primary_key=True)
    task_digest: str
    task_name: str
    generation: str
    kind: str  # model | task | config | infra
    confidence: float
    evidence_json: str = "[]"  # trial ids
    variant: str | None = None  # the config variant that solved it (kind == "config")
    reason: str = Field(sa_type=sa.Text)
    created_at: datetime = Field(default_factory=utcnow)
    revised_at: datetime | None = None  # None until the verdict is first revised

    @property
    def evidence(self) -> list[str]:
        return list(json.loads(self.evidence_json or "[]"))


class CandidateRow(SQLModel, table=True):
    """One discovery candidate: where it came from, each gate check's verdict, the probe, the decision.

    `state` moves generated -> checked -> valid -> admitted, or ends in rejected / dropped with `reason`
    (a fixed vocabulary, rsi.core.discover.REJECT_REASONS) and the trial ids in `evidence_json`.
    """

    __tablename__ = "candidates"
    __table_args__ = (sa.UniqueConstraint("job_id", "name", name="uq_candidates_job_name"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    name: str
    generator: str
    family: str
    difficulty: int
    seed: int | None = None
    parent_task: str | None = None
    task_digest: str | None = Field(default=None, index=True)
    split: str | None = None
    stage_dir: str
    state: str = Field(index=True)  # generated | checked | valid | admitted | rejected | dropped
    reason: str | None = None
    detail: str | None = Field(default=None, sa_type=sa.Text)
    evidence_json: str = "[]"
    probe_pass_rate: float | None = None
    probe_trials: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def evidence(self) -> list[str]:
        return list(json.loads(self.evidence_json or "[]"))


class CurriculumRow(SQLModel, table=True):
    """The difficulty level discovery uses for one family, moved by re-probes (raise / lower)."""

    __tablename__ = "curriculum"

    family: str = Field(primary_key=True)
    level: int
    reason: str = Field(sa_type=sa.Text)
    updated_at: datetime = Field(default_factory=utcnow)


class SearchCandidateRow(SQLModel, table=True):
    """One harness-config candidate of an expand job's search (added in 0004).

    `origin` is search_space | reflection | manual; a reflective proposal the contract refused
    has state `refused`, no digest, its patch and the reason. `state` is candidate | refused |
    adopted; `tasks_solved_json` lists the train tasks it solved so far.
    """

    __tablename__ = "search_candidates"
    __table_args__ = (sa.UniqueConstraint("job_id", "label", name="uq_search_candidates_job_label"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    label: str
    origin: str
    config_digest: str | None = None
    parent_digest: str | None = None
    state: str = "candidate"
    reason: str | None = Field(default=None, sa_type=sa.Text)
    patch_yaml: str | None = Field(default=None, sa_type=sa.Text)
    source_trial: str | None = None  # the failed trial a reflective proposal read
    tasks_solved_json: str = "[]"
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def tasks_solved(self) -> list[str]:
        return list(json.loads(self.tasks_solved_json or "[]"))


class TrainingRunRow(SQLModel, table=True):
    """One `rsi update` training run (added in 0005): what it trained on, how, and what came back.

    `status` is running | done | failed; `candidate` is the generation it registered (None for the
    export backend and for a failed run: a failed run never leaves a candidate behind).
    """

    __tablename__ = "training_runs"

    id: str = Field(primary_key=True)
    generation: str = Field(index=True)  # the parent: the generation whose trials were selected
    candidate: str | None = None
    backend: str
    objective: str
    status: str
    config_digest: str  # the adopted config the candidate is served with
    dataset_path: str
    dataset_digest: str
    adapter_path: str | None = None
    adapter_sha256: str | None = None
    serve_name: str | None = None
    params_json: str = Field(default="{}", sa_type=sa.Text)
    metrics_json: str = Field(default="{}", sa_type=sa.Text)
    error: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None

    @property
    def params(self) -> dict[str, Any]:
        return dict(json.loads(self.params_json or "{}"))

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(json.loads(self.metrics_json or "{}"))
