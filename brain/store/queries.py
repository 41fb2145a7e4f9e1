"""Every statement the store runs, as SQL text, written once for both databases.

Parameters are named (``:name``: what ``sqlite3`` and SQLAlchemy's ``text()``
both take). The few places where the databases differ are ``{slots}`` a
backend's :class:`~brain.store.backend.Dialect` fills in: the lease clock
(``{lease_now}``, ``{lease_until}``, ``{lease_past}``) and the queue pick's
``{skip_locked}``. Upserts are ``INSERT ... ON CONFLICT``, which both speak.
Status values are written as the literals of :mod:`brain.results`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

RUN_COLUMNS = ("id", "workflow", "definition_hash", "status", "trigger_event", "trigger_body",
               "trigger_path", "trigger_headers", "error", "previous_run_id", "created_at",
               "started_at", "ended_at", "cancel_requested", "lease_owner", "lease_expires_at",
               "trigger_key", "delivery_id", "retry_of", "concurrency_key", "params",
               "output", "parent_run_id", "parent_step", "parent_try", "depth",
               "step_prints", "version", "continued_on", "trace_context")
STEP_COLUMNS = ("run_id", "name", "position", "kind", "status", "tries", "inputs", "output",
                "error", "stderr", "started_at", "ended_at", "waiting_for", "decision", "usage",
                "progress", "cached")
FINISHED = "('succeeded', 'failed', 'cancelled')"


def in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``(:name0, :name1, ...)`` and its parameters: a list both databases take as text."""
    params = {f"{name}{i}": value for i, value in enumerate(values)}
    return "(" + ", ".join(f":{key}" for key in params) + ")", params


def _insert(table: str, columns: Sequence[str], **exprs: str) -> str:
    values = ", ".join(exprs.get(c, f":{c}") for c in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})"


# --- runs ----------------------------------------------------------------------------------

INSERT_RUN = _insert("brain_runs", RUN_COLUMNS)
#: A run that starts ``running`` under a lease, timed by the lease clock.
INSERT_LEASED_RUN = _insert("brain_runs", RUN_COLUMNS, lease_expires_at="{lease_until}")
#: ``INSERT_RUN`` or ``INSERT_LEASED_RUN`` with the run's pending steps in the same statement
#: (PostgreSQL: one round trip); the steps as arrays ``:step_names``, ``:step_positions``,
#: ``:step_kinds``, every other column of theirs NULL as in :func:`pending_steps` rows.
WITH_PENDING_STEPS = {insert: (
    f"WITH run AS ({insert}) INSERT INTO brain_steps (run_id, name, position, kind, status, tries) "
    "SELECT :id, s.name, s.position, s.kind, 'pending', 0 FROM unnest("
    "CAST(:step_names AS text[]), CAST(:step_positions AS integer[]), "
    "CAST(:step_kinds AS text[])) AS s(name, position, kind)")
    for insert in (INSERT_RUN, INSERT_LEASED_RUN)}
SELECT_RUN = f"SELECT {', '.join(RUN_COLUMNS)} FROM brain_runs"
RUN_BY_ID = SELECT_RUN + " WHERE id = :run_id"
RUN_IDS_LIKE = "SELECT id FROM brain_runs WHERE id LIKE :pattern LIMIT 2"

CLAIM_RUN = (
    "UPDATE brain_runs SET status = 'running', lease_owner = :owner, "
    "lease_expires_at = {lease_until}, started_at = COALESCE(started_at, :now) "
    "WHERE id = :run_id AND (status = 'queued' OR (status = 'running' AND "
    "(lease_expires_at IS NULL OR lease_expires_at < {lease_now})))")
SET_PREVIOUS = "UPDATE brain_runs SET previous_run_id = :previous WHERE id = :run_id"
RENEW_LEASE = ("UPDATE brain_runs SET lease_expires_at = {lease_until} "
               "WHERE id = :run_id AND lease_owner = :owner")
LEASE_AND_CANCEL = "SELECT lease_owner, cancel_requested FROM brain_runs WHERE id = :run_id"
#: Changes nothing; counts one row while ``:owner`` holds the run's lease.
HOLDS_LEASE = ("UPDATE brain_runs SET lease_owner = :owner "
               "WHERE id = :run_id AND lease_owner = :owner")
SET_DEFINITION = ("UPDATE brain_runs SET definition_hash = :definition_hash, "
                  "step_prints = :step_prints, version = :version "
                  "WHERE id = :run_id AND lease_owner = :owner")
#: A run goes on with another definition after a change (SPEC §24).
CONTINUE_ON = ("UPDATE brain_runs SET definition_hash = :definition_hash, "
               "step_prints = :step_prints, continued_on = :continued_on "
               "WHERE id = :run_id AND lease_owner = :owner")
FINISH_RUN = ("UPDATE brain_runs SET status = :status, error = :error, ended_at = :now, "
              "output = :output, "
              "lease_owner = NULL, lease_expires_at = NULL WHERE id = :run_id")
OWNED = " AND lease_owner = :owner"

REQUEST_CANCEL = "UPDATE brain_runs SET cancel_requested = :yes WHERE id = :run_id"
_CANCEL = ("UPDATE brain_runs SET status = 'cancelled', error = 'cancelled', ended_at = :now, "
           "lease_owner = NULL, lease_expires_at = NULL WHERE id = :run_id AND ")
#: A run nobody executes: queued, or waiting (SPEC §16).
CANCEL_QUEUED = _CANCEL + "status IN ('queued', 'waiting')"
#: A running run nobody executes: the owner read before, unchanged (``:owner`` or none).
CANCEL_ABANDONED = _CANCEL + "status = 'running' AND lease_owner = :owner"
CANCEL_ABANDONED_UNOWNED = _CANCEL + "status = 'running' AND lease_owner IS NULL"
LEASE_RAN_OUT = " AND (lease_expires_at IS NULL OR lease_expires_at < {lease_now})"
CANCEL_STEPS = (
    "UPDATE brain_steps SET status = 'cancelled', ended_at = :now, error = 'cancelled' "
    "WHERE run_id = :run_id AND status IN ('pending', 'running', 'waiting') "
    "AND (SELECT status FROM brain_runs WHERE id = :run_id) = 'cancelled'")
CANCEL_TIMERS = ("DELETE FROM brain_timers WHERE run_id = :run_id "
                 "AND (SELECT status FROM brain_runs WHERE id = :run_id) = 'cancelled'")

LATEST_SUCCEEDED = (
    "SELECT id FROM brain_runs WHERE workflow = :workflow AND status = 'succeeded' "
    "AND ended_at <= :before ORDER BY ended_at DESC LIMIT 1")
EXPIRED_RUNS = ("SELECT id FROM brain_runs "
                "WHERE status = 'running' AND lease_expires_at < {lease_now}")
RUNNING_RUNS = SELECT_RUN + " WHERE status IN ('running', 'waiting')"
QUEUED_OR_ENDED_AFTER = (SELECT_RUN + " WHERE status = 'queued' OR ended_at > :ended_after "
                         "ORDER BY created_at DESC LIMIT :limit")

# --- steps ---------------------------------------------------------------------------------

INSERT_STEP = _insert("brain_steps", STEP_COLUMNS)
INSERT_NEW_STEP = INSERT_STEP + " ON CONFLICT DO NOTHING"
#: A step not started yet, to be written again as another definition has it (SPEC §24).
DELETE_PENDING_STEP = ("DELETE FROM brain_steps WHERE run_id = :run_id AND name = :name "
                       "AND status = 'pending' AND tries = 0")
#: A pending step its run's definition no longer has (SPEC §24).
SKIP_PENDING_STEP = ("UPDATE brain_steps SET status = 'skipped', error = :error, "
                     "ended_at = :now WHERE run_id = :run_id AND name = :name "
                     "AND status = 'pending'")
_STEP = " WHERE run_id = :run_id AND name = :name"
#: Appended to a statement on steps: only while ``:owner`` holds the run's lease.
LEASED = " AND EXISTS (SELECT 1 FROM brain_runs WHERE id = :run_id AND lease_owner = :owner)"

STEP_RUNNING = ("UPDATE brain_steps SET status = 'running', inputs = :inputs, tries = :tries, "
                "started_at = :started_at, ended_at = NULL, error = NULL" + _STEP)
STEP_PROCESS = ("UPDATE brain_steps SET process_group = :pgid, process_started = :pstarted, "
                "process_machine = :machine" + _STEP)
_FINISHED = ("UPDATE brain_steps SET status = :status, tries = :tries, ended_at = :ended_at, "
             "output = :output, error = :error, stderr = :stderr, usage = :usage, "
             "cached = :cached")


def step_finished(*, inputs: bool, started_at: bool) -> str:
    """A step's end, writing its inputs and start time too when asked."""
    return (_FINISHED + (", inputs = :inputs" if inputs else "")
            + (", started_at = :started_at" if started_at else "") + _STEP)


STEP_FINISHED_WHOLE = step_finished(inputs=True, started_at=True)
END_STEPS = "UPDATE brain_steps SET status = :status, ended_at = :now, error = :error"
END_RUNNING_STEPS = ("UPDATE brain_steps SET status = 'cancelled', ended_at = :now, "
                     "error = :error WHERE run_id = :run_id AND status IN ('running', 'waiting')")
END_PENDING_STEPS = ("UPDATE brain_steps SET status = :pending, ended_at = :now, "
                     "error = :pending_error WHERE run_id = :run_id AND status = 'pending'")
RESET_STEPS = ("UPDATE brain_steps SET status = 'pending', ended_at = NULL, output = NULL, "
               "error = NULL, usage = NULL, progress = NULL, cached = NULL")
STEPS_OF_RUN = f"SELECT {', '.join(STEP_COLUMNS)} FROM brain_steps WHERE run_id = :run_id"
STEPS_IN_ORDER = STEPS_OF_RUN + " ORDER BY position"
#: A retry's checks, in its transaction: the original run (``LOCK_ROW`` added on PostgreSQL,
#: so two retries of one run take turns), then the newest run that retries it already, if any.
LOCK_ROW = " FOR UPDATE"
RETRIED_BY = ("SELECT id, status FROM brain_runs WHERE workflow = :workflow "
              "AND retry_of = :run_id ORDER BY created_at DESC LIMIT 1")
STARTED_STEPS = ("SELECT count(*) AS n FROM brain_steps WHERE run_id = :run_id "
                 "AND (status <> 'pending' OR tries > 0)")
DELETE_STEPS = "DELETE FROM brain_steps WHERE run_id = :run_id"
STEP_OUTPUTS = ("SELECT name, output FROM brain_steps "
                "WHERE run_id = :run_id AND status = 'succeeded'")
STEP_STATES = "SELECT name, status, tries FROM brain_steps WHERE run_id = :run_id"
STEP_PROCESSES = (
    "SELECT name, process_group, process_started, process_machine FROM brain_steps "
    "WHERE run_id = :run_id AND process_group IS NOT NULL")
STEP_KINDS_OF = ("SELECT run_id, name, kind, status, tries, progress FROM brain_steps "
                 "WHERE run_id IN ")

STEP_OUTPUT = ("UPDATE brain_steps SET output = :output, stderr = :stderr, usage = :usage"
               + _STEP)
STEP_PROGRESS = "UPDATE brain_steps SET progress = :progress" + _STEP

# --- waiting steps (SPEC §16) --------------------------------------------------------------

STEP_WAITING = ("UPDATE brain_steps SET status = 'waiting', inputs = :inputs, tries = :tries, "
                "started_at = :started_at, ended_at = NULL, error = NULL, output = NULL, "
                "decision = NULL, waiting_for = :waiting_for, wait_signal = :signal, "
                "wait_key = :key" + _STEP)
SET_TIMER = (_insert("brain_timers", ("run_id", "step", "due_at", "outcome", "value"))
             + " ON CONFLICT (run_id, step) DO UPDATE SET due_at = excluded.due_at, "
             "outcome = excluded.outcome, value = excluded.value")
#: A leased executor lets go of a run whose steps all wait, unless a wait ended (``wakes``
#: moved) or a cancel came since it last looked.
PARK_RUN = ("UPDATE brain_runs SET status = 'waiting', lease_owner = NULL, "
            "lease_expires_at = NULL WHERE id = :run_id AND lease_owner = :owner "
            "AND status = 'running' AND wakes = :wakes AND cancel_requested = :no")
RUN_WAKES = "SELECT wakes FROM brain_runs WHERE id = :run_id"
WAITED_STEPS = ("SELECT name, status, output, error FROM brain_steps "
                "WHERE run_id = :run_id AND waiting_for IS NOT NULL")
#: The one way a waiting step ends (a timer, a decision, a signal): only while it waits, so
#: of two that race, one changes a row and the other none.
END_WAIT = ("UPDATE brain_steps SET status = :status, output = :output, error = :error, "
            "decision = :decision, ended_at = :now" + _STEP + " AND status = 'waiting'")
#: ...and its run: woken (a waiting run is queued again, for any executor to take).
WAKE_RUN = ("UPDATE brain_runs SET wakes = wakes + 1, status = CASE WHEN status = 'waiting' "
            "THEN 'queued' ELSE status END WHERE id = :run_id")
DROP_TIMER = "DELETE FROM brain_timers WHERE run_id = :run_id AND step = :name"
DROP_TIMERS_OF_RUN = "DELETE FROM brain_timers WHERE run_id = :run_id"
#: Due timers, deleted as they are taken: a row is returned to one transaction only, and on
#: PostgreSQL concurrent takers skip each other's rows.
def take_due_timers(*, of_run: bool, by_lease_clock: bool) -> str:
    """Delete and return the due timers (of ``:run_id`` alone, when ``of_run``): due by
    ``:now``, or by the lease clock (the database server's on PostgreSQL, so that machines
    whose clocks differ agree on what is due)."""
    only = " AND run_id = :run_id" if of_run else ""
    now = "{lease_now}" if by_lease_clock else ":now"
    return ("DELETE FROM brain_timers WHERE (run_id, step) IN (SELECT run_id, step FROM "
            f"brain_timers WHERE due_at <= {now}{only} ORDER BY due_at LIMIT :limit"
            "{skip_locked}) RETURNING run_id, step, outcome, value")


NEXT_TIMER = "SELECT min(due_at) AS due_at FROM brain_timers"
NEXT_TIMER_OF_RUN = NEXT_TIMER + " WHERE run_id = :run_id"
WAITING_STEP = "SELECT kind, status, decision FROM brain_steps" + _STEP
SIGNALLED_STEPS = ("SELECT run_id, name, waiting_for FROM brain_steps WHERE wait_signal = :signal "
                   "AND status = 'waiting' AND kind = 'wait_for'")
WAITING_KINDS = ("SELECT r.workflow, s.kind, count(DISTINCT r.id) AS n FROM brain_steps AS s "
                 "JOIN brain_runs AS r ON r.id = s.run_id WHERE s.status = 'waiting' "
                 "AND r.status = 'waiting' GROUP BY r.workflow, s.kind")
DECISIONS_WAITING = (
    "SELECT s.run_id, r.workflow, s.name, s.waiting_for, s.started_at FROM brain_steps AS s "
    "JOIN brain_runs AS r ON r.id = s.run_id WHERE s.status = 'waiting' "
    "AND s.kind = 'approval' ORDER BY s.started_at LIMIT :limit")

# --- step logs -----------------------------------------------------------------------------

LOG_COLUMNS = ("run_id", "step", "seq", "stream", "t", "text", "written_at")
#: A line is written in place of one with its ``seq`` (the note on what was dropped, written
#: again as more is; a line of an execution that died before its step's try was counted).
UPSERT_LOG_LINE = (_insert("brain_step_logs", LOG_COLUMNS)
                   + " ON CONFLICT (run_id, step, seq) DO UPDATE SET stream = excluded.stream, "
                   "t = excluded.t, text = excluded.text, written_at = excluded.written_at")
DROP_LOG_LINES = ("DELETE FROM brain_step_logs WHERE run_id = :run_id AND step = :step "
                  "AND seq BETWEEN :first AND :last")
_LOG_LINES = "SELECT step, seq, stream, t, text FROM brain_step_logs WHERE run_id = :run_id"
LOG_OF_STEP = _LOG_LINES + " AND step = :step AND seq > :after ORDER BY seq LIMIT :limit"
LOGS_OF_RUN = _LOG_LINES + " ORDER BY step, seq"
RECENT_LOG_LINES = (
    "SELECT l.run_id, r.workflow, l.step, l.seq, l.stream, l.t, l.text "
    "FROM brain_step_logs AS l JOIN brain_runs AS r ON r.id = l.run_id "
    "WHERE l.written_at >= :since ORDER BY l.written_at, l.run_id, l.step, l.seq LIMIT :limit")

# --- queue and schedule fires --------------------------------------------------------------

INSERT_FIRE = _insert("brain_fires", ("workflow", "trigger_key", "fire_time", "run_id",
                                      "claimed_at"))
LAST_FIRE = ("SELECT max(fire_time) AS fire_time FROM brain_fires "
             "WHERE workflow = :workflow AND trigger_key = :trigger_key")
RUN_BY_DELIVERY = ("SELECT id FROM brain_runs "
                   "WHERE workflow = :workflow AND delivery_id = :delivery_id")
COUNT_RUNS = "SELECT count(*) AS n FROM brain_runs WHERE "
QUEUED_OF = ("SELECT id, trigger_event FROM brain_runs "
             "WHERE workflow = :workflow AND status = 'queued'")
FAIL_QUEUED = ("UPDATE brain_runs SET status = 'failed', error = :error, ended_at = :now "
               "WHERE id = :run_id AND status = 'queued'")
SKIP_UNFINISHED_STEPS = (
    "UPDATE brain_steps SET status = 'skipped', error = :error, ended_at = :now "
    "WHERE run_id = :run_id AND status IN ('pending', 'running', 'waiting')")
RUNNING_LEASES = "SELECT id, lease_owner FROM brain_runs WHERE status = 'running'"
EXPIRE_LEASE = ("UPDATE brain_runs SET lease_expires_at = {lease_past} "
                "WHERE id = :run_id AND status = 'running'")


def claim_next(workflows: str) -> str:
    """Take the oldest queued run of ``workflows`` (an :func:`in_list`), one statement: on
    PostgreSQL the pick skips rows other executors have locked."""
    pick = (f"SELECT id FROM brain_runs WHERE status = 'queued' AND workflow IN {workflows} "
            "ORDER BY created_at LIMIT 1{skip_locked}")
    return ("UPDATE brain_runs SET status = 'running', lease_owner = :owner, "
            "started_at = COALESCE(started_at, :now), lease_expires_at = {lease_until} "
            f"WHERE id = ({pick}) AND status = 'queued' RETURNING id, wakes")


#: The groups of queued runs of some workflows (an :func:`in_list` follows) — a workflow
#: and a concurrency key — oldest first by their oldest run, for a claim under limits (SPEC
#: §19): however long one key's backlog, the other keys' runs are seen. No lock is taken.
QUEUED_GROUPS = ("SELECT workflow, COALESCE(concurrency_key, '') AS k, min(created_at) AS first "
                 "FROM brain_runs WHERE status = 'queued' AND workflow IN ")
GROUPS_IN_ORDER = " GROUP BY workflow, COALESCE(concurrency_key, '') ORDER BY first LIMIT :limit"
#: Serialises the claims of one limit's group until the transaction ends (PostgreSQL).
LOCK_LIMIT_GROUP = "SELECT pg_advisory_xact_lock(hashtextextended(:group, 0)) AS locked"
COUNT_RUNNING_OF = ("SELECT count(*) AS n FROM brain_runs "
                    "WHERE workflow = :workflow AND status = 'running'")
COUNT_RUNNING_WITH_KEY = COUNT_RUNNING_OF + " AND COALESCE(concurrency_key, '') = :key"
#: Claims the oldest queued run of a group (see :data:`QUEUED_GROUPS`).
CLAIM_OLDEST_OF_GROUP = (
    "UPDATE brain_runs SET status = 'running', lease_owner = :owner, "
    "started_at = COALESCE(started_at, :now), lease_expires_at = {lease_until} "
    "WHERE id = (SELECT id FROM brain_runs WHERE status = 'queued' AND workflow = :workflow "
    "AND COALESCE(concurrency_key, '') = :key ORDER BY created_at LIMIT 1{skip_locked}) "
    "AND status = 'queued' RETURNING id, wakes")

# --- workers and retention -----------------------------------------------------------------

WORKER_BEAT = (
    _insert("brain_workers", ("id", "host", "pid", "kind", "started_at", "heartbeat_at",
                              "executing"))
    + " ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
      "executing = excluded.executing")
FORGET_WORKER = "DELETE FROM brain_workers WHERE id = :worker_id"
FORGET_SILENT_WORKERS = "DELETE FROM brain_workers WHERE heartbeat_at < :before"
# ``leased``: the runs the database still has running under the worker's lease (a worker's
# id is its lease owner). A run another process took over, or that ended, is not among them.
LIST_WORKERS = (
    "SELECT id, host, pid, kind, started_at, heartbeat_at, executing, "
    "(SELECT COUNT(*) FROM brain_runs WHERE brain_runs.status = 'running' "
    "AND brain_runs.lease_owner = brain_workers.id) AS leased "
    "FROM brain_workers ORDER BY heartbeat_at DESC")

PRUNE = (
    ("DELETE FROM brain_timers WHERE run_id IN (SELECT id FROM brain_runs "
     f"WHERE status IN {FINISHED} AND ended_at < :before)"),
    ("DELETE FROM brain_step_logs WHERE run_id IN (SELECT id FROM brain_runs "
     f"WHERE status IN {FINISHED} AND ended_at < :before)"),
    ("DELETE FROM brain_steps WHERE run_id IN (SELECT id FROM brain_runs "
     f"WHERE status IN {FINISHED} AND ended_at < :before)"),
    f"DELETE FROM brain_runs WHERE status IN {FINISHED} AND ended_at < :before",
    # Each trigger's latest fire stays: catch-up counts from it.
    ("DELETE FROM brain_fires WHERE fire_time < :before AND EXISTS (SELECT 1 FROM brain_fires "
     "AS newer WHERE newer.workflow = brain_fires.workflow AND newer.trigger_key = "
     "brain_fires.trigger_key AND newer.fire_time > brain_fires.fire_time)"),
    "DELETE FROM brain_workers WHERE heartbeat_at < :before",
)

# --- child runs (SPEC §22) -----------------------------------------------------------------

#: Appended to ``FINISH_RUN``: the run's parent, if it is a child, for its end to end the
#: parent's wait in the same transaction.
RETURNING_PARENT = " RETURNING id, parent_run_id, parent_step, parent_try"
RUN_DEPTH = "SELECT depth FROM brain_runs WHERE id = :run_id"
CHILD_OF_TRY = ("SELECT id FROM brain_runs WHERE parent_run_id = :parent_run_id "
                "AND parent_step = :parent_step AND parent_try = :parent_try")
CHILD_ROW = ("SELECT id, status, error, output, parent_run_id, parent_step, parent_try "
             "FROM brain_runs WHERE id = :run_id")
#: Whether a waiting parent step's wait may end by its child (of try ``:try``): not by an
#: earlier try's, and not in a run whose cancel was asked for (its executor cancels it).
_NOT_CANCELLING = " AND EXISTS (SELECT 1 FROM brain_runs WHERE id = :run_id AND cancel_requested = :no)"
DROP_CHILD_TIMER = (DROP_TIMER + " AND EXISTS (SELECT 1 FROM brain_steps WHERE run_id = :run_id "
                    "AND name = :name AND status = 'waiting' AND tries = :try)" + _NOT_CANCELLING)
END_CHILD_WAIT = END_WAIT + " AND tries = :try" + _NOT_CANCELLING
UNFINISHED_CHILDREN = (f"SELECT id FROM brain_runs WHERE parent_run_id = :run_id "
                       f"AND status NOT IN {FINISHED}")
UNFINISHED_CHILDREN_OF_STEP = UNFINISHED_CHILDREN + " AND parent_step = :step"
CHILDREN_OF = ("SELECT id, workflow, status, parent_step, parent_try, created_at FROM brain_runs "
               "WHERE parent_run_id = :run_id ORDER BY created_at")


# --- LLM cost: rate limits and cached steps (SPEC §26) ----------------------------------------
# ``:clock`` is replaced by the store with "now" in epoch seconds (the server's clock on
# PostgreSQL, a parameter on SQLite).

LIMIT_ROW = ("INSERT INTO brain_limits (name, paused_until) VALUES (:name, 0) "
             "ON CONFLICT (name) DO NOTHING")
LIMIT_LOCK = "SELECT paused_until, :clock AS now FROM brain_limits WHERE name = :name"
LIMIT_EXPIRED = "DELETE FROM brain_limit_uses WHERE name = :name AND counts_until <= :now"
LIMIT_USES = ("SELECT counts_until AS until, requests, tokens FROM brain_limit_uses "
              "WHERE name = :name")
LIMIT_USE = ("INSERT INTO brain_limit_uses (id, name, requests, tokens, counts_until) "
             "VALUES (:id, :name, :requests, :tokens, :until)")
LIMIT_SETTLE = ("UPDATE brain_limit_uses SET counts_until = :clock + :per, "
                "tokens = COALESCE(:tokens, tokens) WHERE id = :id")
LIMIT_PAUSE = ("INSERT INTO brain_limits (name, paused_until) VALUES (:name, :clock + :seconds) "
               "ON CONFLICT (name) DO UPDATE SET paused_until = CASE WHEN "
               "brain_limits.paused_until > excluded.paused_until THEN brain_limits.paused_until "
               "ELSE excluded.paused_until END")

CACHE_COLUMNS = ("cache_key", "workflow", "step", "kind", "output", "stderr", "usage", "run_id",
                 "created_at", "expires_at")
CACHE_GET = ("SELECT output, stderr, usage, run_id, created_at FROM brain_cache "
             "WHERE cache_key = :cache_key AND expires_at > :now")
CACHE_PUT = (_insert("brain_cache", CACHE_COLUMNS) + " ON CONFLICT (cache_key) DO UPDATE SET "
             + ", ".join(f"{c} = excluded.{c}" for c in CACHE_COLUMNS if c != "cache_key"))
CACHE_EXPIRED = ("DELETE FROM brain_cache WHERE workflow = :workflow AND step = :step "
                 "AND expires_at <= :now")
CACHE_CLEAR = "DELETE FROM brain_cache"
