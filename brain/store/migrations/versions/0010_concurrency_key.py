"""A run's concurrency key (SPEC §19): the limit of a keyed workflow counts the runs with
the same key.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("concurrency_key", sa.String(300)))
    op.create_index("ix_brain_runs_concurrency", "brain_runs",
                    ["workflow", "concurrency_key", "status"])


def downgrade() -> None:
    op.drop_index("ix_brain_runs_concurrency", "brain_runs")
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("concurrency_key")
