"""Code changes under live runs (SPEC §24): a run keeps the fingerprint of each step of the
definition it runs on and their upstream steps (JSON), the version of its workflow's file it
started on, and the versions it continued on after a change (a JSON list). Runs recorded
before have none: a change of their workflow's definition fails them as before.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("step_prints", sa.Text()))
        batch.add_column(sa.Column("version", sa.String(64)))
        batch.add_column(sa.Column("continued_on", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("continued_on")
        batch.drop_column("version")
        batch.drop_column("step_prints")
