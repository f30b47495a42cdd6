"""Scale-out: the node a trial ran on (the `ray` executor), and a job's lease (PostgreSQL ownership).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as b:
        b.add_column(sa.Column("node", sa.String(), nullable=True))
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("lease_owner", sa.String(), nullable=True))
        b.add_column(sa.Column("lease_until", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_column("lease_until")
        b.drop_column("lease_owner")
    with op.batch_alter_table("trials") as b:
        b.drop_column("node")
