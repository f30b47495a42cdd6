"""Discovery: candidates and their gate evidence, the per-family curriculum, task provenance and
probe figures, and a job's parent job and settings.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TASK_COLUMNS: list[tuple[str, sa.types.TypeEngine, str | None]] = [
    ("generator", sa.String(), None),
    ("seed", sa.Integer(), None),
    ("parent_task", sa.String(), None),
    ("discovered_by", sa.String(), None),
    ("discover_job", sa.String(), None),
    ("probe_pass_rate", sa.Float(), None),
    ("probe_trials", sa.Integer(), "0"),
    ("state_reason", sa.Text(), None),
]
JOB_COLUMNS: list[tuple[str, sa.types.TypeEngine, str | None]] = [
    ("parent_job", sa.String(), None),
    ("params_json", sa.String(), "{}"),
]


def _column(name: str, type_: sa.types.TypeEngine, default: str | None) -> sa.Column:
    if default is None:
        return sa.Column(name, type_, nullable=True)
    return sa.Column(name, type_, nullable=False, server_default=default)


def upgrade() -> None:
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("generator", sa.String(), nullable=False),
        sa.Column("family", sa.String(), nullable=False),
        sa.Column("difficulty", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("parent_task", sa.String(), nullable=True),
        sa.Column("task_digest", sa.String(), nullable=True),
        sa.Column("split", sa.String(), nullable=True),
        sa.Column("stage_dir", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("evidence_json", sa.String(), nullable=False),
        sa.Column("probe_pass_rate", sa.Float(), nullable=True),
        sa.Column("probe_trials", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("job_id", "name", name="uq_candidates_job_name"),
    )
    op.create_index("ix_candidates_job_id", "candidates", ["job_id"])
    op.create_index("ix_candidates_task_digest", "candidates", ["task_digest"])
    op.create_index("ix_candidates_state", "candidates", ["state"])
    op.create_table(
        "curriculum",
        sa.Column("family", sa.String(), primary_key=True),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    with op.batch_alter_table("tasks") as batch:
        for name, type_, default in TASK_COLUMNS:
            batch.add_column(_column(name, type_, default))
    with op.batch_alter_table("jobs") as batch:
        for name, type_, default in JOB_COLUMNS:
            batch.add_column(_column(name, type_, default))
        batch.create_index("ix_jobs_parent_job", ["parent_job"])


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute("PRAGMA foreign_keys = OFF")  # batch mode recreates `jobs`, which `trials` references
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_parent_job")
        for name, _type, _default in reversed(JOB_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("tasks") as batch:
        for name, _type, _default in reversed(TASK_COLUMNS):
            batch.drop_column(name)
    op.drop_table("curriculum")
    op.drop_index("ix_candidates_state", table_name="candidates")
    op.drop_index("ix_candidates_task_digest", table_name="candidates")
    op.drop_index("ix_candidates_job_id", table_name="candidates")
    op.drop_table("candidates")
    if sqlite:
        op.execute("PRAGMA foreign_keys = ON")
