"""Queue and triggers: trigger key and delivery id on runs; schedule fire claims.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from brain.store.tables import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("trigger_key", sa.String(100)))
        batch.add_column(sa.Column("delivery_id", sa.String(200)))
        batch.create_index("ux_brain_runs_delivery", ["workflow", "delivery_id"], unique=True)
    op.create_table(
        "brain_fires",
        sa.Column("workflow", sa.String(200), primary_key=True),
        sa.Column("trigger_key", sa.String(100), primary_key=True),
        sa.Column("fire_time", UTCDateTime, primary_key=True),
        sa.Column("run_id", sa.String(32)),
        sa.Column("claimed_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("brain_fires")
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_index("ux_brain_runs_delivery")
        batch.drop_column("delivery_id")
        batch.drop_column("trigger_key")
