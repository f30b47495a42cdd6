"""Expansion: the config-search candidates of an expand job (search_space, reflection, manual),
refused proposals included.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "search_candidates",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("label", sa.String(), nullable=False),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("config_digest", sa.String(), nullable=True),
        sa.Column("parent_digest", sa.String(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("patch_yaml", sa.Text(), nullable=True),
        sa.Column("source_trial", sa.String(), nullable=True),
        sa.Column("tasks_solved_json", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("job_id", "label", name="uq_search_candidates_job_label"),
    )
    op.create_index("ix_search_candidates_job_id", "search_candidates", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_search_candidates_job_id", "search_candidates")
    op.drop_table("search_candidates")
