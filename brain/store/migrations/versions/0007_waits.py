"""Waiting steps (SPEC §16): what a step waits for, its decision, the run's wake count,
and the timers of sleeps and timeouts.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from brain.store.tables import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.add_column(sa.Column("waiting_for", sa.Text))
        batch.add_column(sa.Column("decision", sa.Text))
        batch.add_column(sa.Column("wait_signal", sa.String(200)))
        batch.add_column(sa.Column("wait_key", sa.Text))
    op.create_index("ix_brain_steps_wait_signal", "brain_steps", ["wait_signal"])
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("wakes", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "brain_timers",
        sa.Column("run_id", sa.String(32), primary_key=True),
        sa.Column("step", sa.String(200), primary_key=True),
        sa.Column("due_at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_index("ix_brain_timers_due", "brain_timers", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_brain_timers_due", "brain_timers")
    op.drop_table("brain_timers")
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("wakes")
    op.drop_index("ix_brain_steps_wait_signal", "brain_steps")
    with op.batch_alter_table("brain_steps") as batch:
        batch.drop_column("wait_key")
        batch.drop_column("wait_signal")
        batch.drop_column("decision")
        batch.drop_column("waiting_for")
