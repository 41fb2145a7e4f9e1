"""Retry: which run a run retries.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("retry_of", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("retry_of")
