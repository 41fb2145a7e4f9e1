"""Child runs (SPEC §22): a run queued by a step of another run keeps its parent's id, the
step and the step's try that queued it, and its depth (a run nobody queued is depth 0, NULL
as every run before this revision has). One child per (parent, step, try): the unique
index makes a try that is started again find its child instead of queuing a second one.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_runs") as batch:
        batch.add_column(sa.Column("parent_run_id", sa.String(32)))
        batch.add_column(sa.Column("parent_step", sa.String(200)))
        batch.add_column(sa.Column("parent_try", sa.Integer()))
        batch.add_column(sa.Column("depth", sa.Integer()))
    op.create_index("ux_brain_runs_parent", "brain_runs",
                    ["parent_run_id", "parent_step", "parent_try"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_brain_runs_parent", "brain_runs")
    with op.batch_alter_table("brain_runs") as batch:
        batch.drop_column("depth")
        batch.drop_column("parent_try")
        batch.drop_column("parent_step")
        batch.drop_column("parent_run_id")
