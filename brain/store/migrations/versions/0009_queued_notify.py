"""PostgreSQL: every run that becomes ``queued`` (enqueued, fired, woken from its waits,
retried) sends ``NOTIFY brain_queued`` when its transaction commits, so idle executors of
every process start it at once (SPEC §19). SQLite has no such thing: nothing to do.

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # One notification per transaction whatever the row count: PostgreSQL folds identical
    # notifications of a transaction into one.
    op.execute("""
        CREATE OR REPLACE FUNCTION brain_notify_queued() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('brain_queued', '');
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql
    """)
    op.execute("""
        CREATE TRIGGER brain_runs_queued AFTER INSERT OR UPDATE OF status ON brain_runs
        FOR EACH ROW WHEN (NEW.status = 'queued') EXECUTE FUNCTION brain_notify_queued()
    """)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS brain_runs_queued ON brain_runs")
    op.execute("DROP FUNCTION IF EXISTS brain_notify_queued()")
