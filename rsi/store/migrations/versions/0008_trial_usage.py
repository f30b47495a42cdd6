"""A covering index for the tokens and wall time spent per generation and phase (`rsi diff`'s cost table
read 100k trial rows from the table; the index holds the columns it sums).

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

COLUMNS = ["generation", "status", "job_id", "prompt_tokens", "completion_tokens", "t_total"]


def upgrade() -> None:
    op.create_index("ix_trials_usage", "trials", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_trials_usage", table_name="trials")
