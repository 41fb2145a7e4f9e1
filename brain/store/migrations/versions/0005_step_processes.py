"""Steps: the process group a step's try started, its leader's start time, its machine.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.add_column(sa.Column("process_group", sa.Integer))
        batch.add_column(sa.Column("process_started", sa.BigInteger))
        batch.add_column(sa.Column("process_machine", sa.String(200)))


def downgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.drop_column("process_machine")
        batch.drop_column("process_started")
        batch.drop_column("process_group")
