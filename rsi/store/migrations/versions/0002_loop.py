"""The loop's store: configs, arms, budgets, attributions, generation events; trial evidence and arms.

Every column added to an existing table is nullable or has a server default, so rows written
under 0001 survive the upgrade. batch_alter_table keeps this working on SQLite.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# (name, type, server default or None for a nullable column)
TRIAL_COLUMNS: list[tuple[str, sa.types.TypeEngine, str | None]] = [
    ("arm_id", sa.String(), None),
    ("variant", sa.String(), None),
    ("split", sa.String(), "train"),
    ("reward_map_json", sa.String(), "{}"),
    ("changed_paths_json", sa.String(), "[]"),
    ("tampered_paths_json", sa.String(), "[]"),
    ("tamper_reasons_json", sa.String(), "[]"),
    ("integrity", sa.String(), None),
    ("widened_roots_json", sa.String(), "[]"),
    ("verifier_exit_code", sa.Integer(), None),
    ("turns", sa.Integer(), "0"),
    ("t_queue", sa.Float(), "0"),
    ("t_snapshot", sa.Float(), "0"),
    ("infra_attempts_json", sa.String(), "[]"),
]
JOB_COLUMNS: list[tuple[str, sa.types.TypeEngine, str | None]] = [
    ("phase", sa.String(), None),
    ("arms_json", sa.String(), "[]"),
    ("interrupted_reason", sa.Text(), None),
]


def _column(name: str, type_: sa.types.TypeEngine, default: str | None) -> sa.Column:
    if default is None:
        return sa.Column(name, type_, nullable=True)
    return sa.Column(name, type_, nullable=False, server_default=default)


def upgrade() -> None:
    op.create_table(
        "configs",
        sa.Column("digest", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("canonical_yaml", sa.Text(), nullable=False),
        sa.Column("parent_digest", sa.String(), nullable=True),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_configs_parent_digest", "configs", ["parent_digest"])
    op.create_table(
        "arms",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("generation", sa.String(), nullable=True),
        sa.Column("config_digest", sa.String(), nullable=True),
        sa.Column("variant", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "budgets",
        sa.Column("job_id", sa.String(), primary_key=True),
        sa.Column("phase", sa.String(), primary_key=True, server_default="all"),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("limit", sa.Float(), nullable=False),
        sa.Column("spent", sa.Float(), nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "attributions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("task_digest", sa.String(), nullable=False),
        sa.Column("task_name", sa.String(), nullable=False),
        sa.Column("generation", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("evidence_json", sa.String(), nullable=False),
        sa.Column("variant", sa.String(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revised_at", sa.DateTime(), nullable=True),
        sa.UniqueConstraint("task_digest", "generation", name="uq_attributions_task_generation"),
    )
    op.create_table(
        "generation_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("generation", sa.String(), sa.ForeignKey("generations.id"), nullable=False),
        sa.Column("from_state", sa.String(), nullable=True),
        sa.Column("to_state", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_generation_events_generation", "generation_events", ["generation"])

    with op.batch_alter_table("trials") as batch:
        for name, type_, default in TRIAL_COLUMNS:
            batch.add_column(_column(name, type_, default))
        batch.create_index("ix_trials_arm_id", ["arm_id"])
        batch.create_index("ix_trials_split", ["split"])
    with op.batch_alter_table("jobs") as batch:
        for name, type_, default in JOB_COLUMNS:
            batch.add_column(_column(name, type_, default))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        # Batch mode recreates `jobs` (copy, drop, rename), which `trials` references; SQLite would
        # refuse the DROP with foreign keys on. pysqlite runs DDL outside a transaction, so the
        # pragma applies; the check at the end proves nothing was left dangling.
        op.execute("PRAGMA foreign_keys = OFF")
    with op.batch_alter_table("jobs") as batch:
        for name, _type, _default in reversed(JOB_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("trials") as batch:
        batch.drop_index("ix_trials_split")
        batch.drop_index("ix_trials_arm_id")
        for name, _type, _default in reversed(TRIAL_COLUMNS):
            batch.drop_column(name)
    op.drop_index("ix_generation_events_generation", table_name="generation_events")
    op.drop_table("generation_events")
    op.drop_table("attributions")
    op.drop_table("budgets")
    op.drop_table("arms")
    op.drop_index("ix_configs_parent_digest", table_name="configs")
    op.drop_table("configs")
    if sqlite:
        op.execute("PRAGMA foreign_keys = ON")
        dangling = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if dangling:
            raise RuntimeError(f"downgrade left rows with dangling foreign keys: {dangling[:5]}")
