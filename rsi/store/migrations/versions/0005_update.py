"""Update: one row per `rsi update` training run (dataset, backend, adapter, candidate, figures).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "training_runs",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("generation", sa.String(), nullable=False),
        sa.Column("candidate", sa.String(), nullable=True),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("objective", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("config_digest", sa.String(), nullable=False),
        sa.Column("dataset_path", sa.String(), nullable=False),
        sa.Column("dataset_digest", sa.String(), nullable=False),
        sa.Column("adapter_path", sa.String(), nullable=True),
        sa.Column("adapter_sha256", sa.String(), nullable=True),
        sa.Column("serve_name", sa.String(), nullable=True),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("metrics_json", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_training_runs_generation", "training_runs", ["generation"])


def downgrade() -> None:
    op.drop_index("ix_training_runs_generation", "training_runs")
    op.drop_table("training_runs")
