"""Token usage of LLM steps and the latest progress of MCP steps (SPEC §17, §18).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.add_column(sa.Column("usage", sa.Text))
        batch.add_column(sa.Column("progress", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.drop_column("progress")
        batch.drop_column("usage")
