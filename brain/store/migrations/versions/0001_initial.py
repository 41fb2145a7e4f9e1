"""Runs and steps.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from brain.store.tables import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "brain_runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("definition_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("trigger_event", sa.String(16), nullable=False),
        sa.Column("trigger_body", sa.Text, nullable=False),
        sa.Column("trigger_path", sa.Text),
        sa.Column("trigger_headers", sa.Text, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("previous_run_id", sa.String(32)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("started_at", UTCDateTime),
        sa.Column("ended_at", UTCDateTime),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("lease_owner", sa.String(200)),
        sa.Column("lease_expires_at", UTCDateTime),
    )
    op.create_index("ix_brain_runs_workflow_status_ended", "brain_runs",
                    ["workflow", "status", "ended_at"])
    op.create_index("ix_brain_runs_status", "brain_runs", ["status"])
    op.create_index("ix_brain_runs_created", "brain_runs", ["created_at"])
    op.create_table(
        "brain_steps",
        sa.Column("run_id", sa.String(32), sa.ForeignKey("brain_runs.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("inputs", sa.Text),
        sa.Column("output", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("stderr", sa.Text),
        sa.Column("started_at", UTCDateTime),
        sa.Column("ended_at", UTCDateTime),
    )


def downgrade() -> None:
    op.drop_table("brain_steps")
    op.drop_table("brain_runs")
