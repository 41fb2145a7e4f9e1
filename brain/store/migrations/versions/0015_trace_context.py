"""Traces (SPEC §25): a run keeps its trace context — its root span's W3C ``traceparent``
and the one it continues, as JSON — written with the run itself, so whichever process
executes, resumes or wakes it continues the same trace. NULL for runs created without
tracing (and every run before this revision).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("trace_context", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("trace_context")
