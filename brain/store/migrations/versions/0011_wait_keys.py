"""Signal keys matched by the digest of the real key (SPEC §16, §11), not of its scrubbed
text: a waiting step whose key was kept as the digest of text holding ``***`` is marked as
one the run had only scrubbed, so that no signal matches it any more (a signal sending
``***`` itself used to; the real key is known to nobody). Such a step ends by its timeout
or a cancel.

Until now every key was kept as ``sha256:`` + the SHA-256 of the key with known secrets
scrubbed. For a key that held no secret that is also the digest of the real key, which is
how keys are kept from now on: nothing changes for it. A key that held a secret shows
``***`` in the step's ``waiting_for``; its digest (of that scrubbed text) is kept under the
``scrubbed-sha256:`` mark. Only waiting rows are looked at: no signal reads the others.

Downgrade takes the mark off again. A key kept since this revision whose real text held a
secret cannot be turned back into the old form (the key itself is kept nowhere): after a
downgrade no signal matches such a step, which then ends by its timeout or a cancel.

Revision ID: 0011
Revises: 0010
"""

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: What the scrubber puts in place of a secret, as it was when this revision was written.
_REDACTED = "***"
_WHOLE = "sha256:"
_SCRUBBED = "scrubbed-sha256:"

_WAITING_KEYS = sa.text(
    "SELECT run_id, name, wait_key, waiting_for FROM brain_steps "
    "WHERE status = 'waiting' AND kind = 'wait_for' AND wait_key LIKE :form")
_SET_KEY = sa.text(
    "UPDATE brain_steps SET wait_key = :new WHERE run_id = :run_id AND name = :name "
    "AND wait_key = :old")


def _shown_key(waiting_for: str | None) -> str | None:
    """The key as the step shows it (scrubbed), from its ``waiting_for`` JSON."""
    try:
        shown = json.loads(waiting_for or "{}").get("key")
    except (ValueError, AttributeError):
        return None
    return shown if isinstance(shown, str) else None


def upgrade() -> None:
    conn = op.get_bind()
    for row in conn.execute(_WAITING_KEYS, {"form": _WHOLE + "%"}).mappings().all():
        shown = _shown_key(row["waiting_for"])
        if shown is None or _REDACTED not in shown:
            continue  # held no secret: its digest is the real key's already
        digest = hashlib.sha256(shown.encode("utf-8", "surrogatepass")).hexdigest()
        if row["wait_key"] != _WHOLE + digest:
            continue  # not the digest of the key it shows: left as it is
        conn.execute(_SET_KEY, {"new": _SCRUBBED + digest, "old": row["wait_key"],
                                "run_id": row["run_id"], "name": row["name"]})


def downgrade() -> None:
    conn = op.get_bind()
    for row in conn.execute(_WAITING_KEYS, {"form": _SCRUBBED + "%"}).mappings().all():
        digest = row["wait_key"][len(_SCRUBBED):]
        conn.execute(_SET_KEY, {"new": _WHOLE + digest, "old": row["wait_key"],
                                "run_id": row["run_id"], "name": row["name"]})
