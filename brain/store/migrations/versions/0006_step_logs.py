"""Step logs: a row per stored line of a step's log.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from brain.store.tables import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "brain_step_logs",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("brain_runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("step", sa.String(200), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("stream", sa.String(8), nullable=False),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("written_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_brain_step_logs_written", "brain_step_logs", ["written_at"])


def downgrade() -> None:
    op.drop_index("ix_brain_step_logs_written", "brain_step_logs")
    op.drop_table("brain_step_logs")
