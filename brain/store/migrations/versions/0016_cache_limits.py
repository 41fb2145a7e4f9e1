"""LLM cost (SPEC §26): cached steps' outputs (``brain_cache``), named rate limits and the
uses in their windows (``brain_limits``, ``brain_limit_uses``), and a step's ``cached``
mark (JSON: the usage a cache hit saved; NULL for a step that ran).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("brain_steps") as batch:
        batch.add_column(sa.Column("cached", sa.Text()))
    op.create_table(
        "brain_cache",
        sa.Column("cache_key", sa.String(64), primary_key=True),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("step", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("output", sa.Text()),
        sa.Column("stderr", sa.Text()),
        sa.Column("usage", sa.Text()),
        sa.Column("run_id", sa.String(32)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_brain_cache_step", "brain_cache", ["workflow", "step"])
    op.create_table(
        "brain_limits",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("paused_until", sa.Float(), nullable=False),
    )
    op.create_table(
        "brain_limit_uses",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("counts_until", sa.Float(), nullable=False),
    )
    op.create_index("ix_brain_limit_uses_name", "brain_limit_uses", ["name", "counts_until"])


def downgrade() -> None:
    op.drop_index("ix_brain_limit_uses_name", table_name="brain_limit_uses")
    op.drop_table("brain_limit_uses")
    op.drop_table("brain_limits")
    op.drop_index("ix_brain_cache_step", table_name="brain_cache")
    op.drop_table("brain_cache")
    with op.batch_alter_table("brain_steps") as batch:
        batch.drop_column("cached")
