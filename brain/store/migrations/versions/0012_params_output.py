"""A run's parameters and output (SPEC §21): ``params``, the validated parameters it was
queued with (JSON; NULL, as every run before this revision has, is ``{}``), and ``output``,
what its workflow returned (JSON), written when it succeeds.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("params", sa.Text()))
        batch.add_column(sa.Column("output", sa.Text()))


def downgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("output")
        batch.drop_column("params")
