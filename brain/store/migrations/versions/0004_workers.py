"""Workers: the executor processes sharing the database, by their heartbeats.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from brain.store.tables import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "brain_workers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("heartbeat_at", UTCDateTime, nullable=False),
        sa.Column("executing", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("brain_workers")
