"""A covering index for one generation's per-task outcome counts (`rsi diff` on 100k trials under 2 s).

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS = ["generation", "agent", "harness_config_digest", "status", "task_digest", "task_name", "split", "passed",
           "error_type", "job_id"]


def upgrade() -> None:
    op.create_index("ix_trials_cells", "trials", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_trials_cells", table_name="trials")
