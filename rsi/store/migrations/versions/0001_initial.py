"""Initial schema: generations, tasks, jobs, trials.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generations",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("parent", sa.String(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("contract", sa.String(), nullable=False),
        sa.Column("base_model_id", sa.String(), nullable=False),
        sa.Column("harness_config_name", sa.String(), nullable=False),
        sa.Column("harness_config_digest", sa.String(), nullable=False),
        sa.Column("serve_name", sa.String(), nullable=False),
        sa.Column("manifest_json", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_generations_parent", "generations", ["parent"])
    op.create_table(
        "tasks",
        sa.Column("digest", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("family", sa.String(), nullable=False),
        sa.Column("split", sa.String(), nullable=False),
        sa.Column("difficulty", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_tasks_name", "tasks", ["name"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("generation", sa.String(), nullable=True),
        sa.Column("harness_config_digest", sa.String(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("task_paths_json", sa.String(), nullable=False),
        sa.Column("tasks_fingerprint", sa.String(), nullable=False),
        sa.Column("owner_pid", sa.Integer(), nullable=True),
        sa.Column("owner_host", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "trials",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("job_id", sa.String(), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("task_name", sa.String(), nullable=False),
        sa.Column("task_digest", sa.String(), nullable=False),
        sa.Column("generation", sa.String(), nullable=True),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("error_type", sa.String(), nullable=True),
        sa.Column("error_message", sa.String(), nullable=True),
        sa.Column("infra_retries", sa.Integer(), nullable=False),
        sa.Column("t_build", sa.Float(), nullable=False),
        sa.Column("t_agent", sa.Float(), nullable=False),
        sa.Column("t_verify", sa.Float(), nullable=False),
        sa.Column("t_total", sa.Float(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("harness_config_digest", sa.String(), nullable=True),
        sa.Column("model_name", sa.String(), nullable=True),
        sa.Column("trial_dir", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
    )
    for col in ("job_id", "task_name", "task_digest", "generation", "status"):
        op.create_index(f"ix_trials_{col}", "trials", [col])


def downgrade() -> None:
    op.drop_table("trials")
    op.drop_table("jobs")
    op.drop_table("tasks")
    op.drop_table("generations")
