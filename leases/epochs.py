"""Deadlines survive a failover: the first connection to a new primary moves every held lease by
the outage, once (docs/scale.md, "Failover"; docs/design.md, the lease's rules).

A promoted replica is another machine, with another clock, and Patroni takes longer to promote it
(the leader key's TTL, then a loop) than many leases have left. Its clock may be ahead of the old
primary's, so a deadline written on the old clock could pass early; and no holder could renew
while no primary answered. So when a connection finds the cluster on a (system identifier,
timeline) it has no epoch for, it records one and shifts every held lease's times by

    shift = the new primary's now - the latest promise (grant or renewal) a held lease carries

in one statement. The latest promise was stamped by the old primary's clock, and every
acknowledged one is on the new primary (synchronous replication), so after the shift each lease
has, on the new clock, exactly the time it had left when the old primary made its last promise:
its holder's deadline is kept whatever the two clocks say, and the outage is not counted against
it (as etcd does when its leader changes). Every lease moves by the same amount, so none changes
state: a lost lease stays lost (rule 4), a live one stays live, the sweep's bookkeeping
(`next_check_at`) and the queue (`Waiter`) move with them. A lease the sweep already recorded
as lost is left where it is, lost for good, whatever the old primary's last promise was.

The statement inserts the epoch with ON CONFLICT DO NOTHING and shifts only through the row it
inserted: of the web processes and workers that reach the new primary at once, exactly one
shifts, the others wait on the epoch's unique index until it commits and then do nothing. Every
connection runs this before it serves anything, so no call reads a deadline before the shift.
The first epoch ever recorded (a fresh database, or the first start of this code) shifts nothing:
there is no outage to make good. A standby has no epoch.
"""

from __future__ import annotations

import logging
from typing import Any

from leases.models import ClockEpoch, Lease, Waiter

logger = logging.getLogger(__name__)

# The cluster's identity and the timeline it writes on now (a WAL file's name starts with its
# timeline, in hex), or no timeline on a standby; and whether this epoch is on record.
PROBE = """
SELECT here.timeline, here.system_identifier, EXISTS (
    SELECT 1 FROM {epochs} e
    WHERE e.system_identifier = here.system_identifier AND e.timeline = here.timeline)
FROM (SELECT (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
             CASE WHEN pg_is_in_recovery() THEN NULL
                  ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
             END AS timeline) AS here
"""

# One statement: record the epoch and, only if this statement recorded it, shift.
EXTEND = """
WITH here AS (
    SELECT clock_timestamp() AS now, %(system_identifier)s::bigint AS system_identifier,
           %(timeline)s::bigint AS timeline
), held AS (
    SELECT max(greatest(acquired_at, renewed_at)) AS promised, count(*) AS n
    FROM {leases} WHERE status = 'held' AND noticed_state <> 'lost'
), carried AS (
    -- Nothing to carry over into the first epoch ever recorded.
    SELECT CASE WHEN EXISTS (SELECT 1 FROM {epochs}) THEN held.promised END AS promised, held.n
    FROM held
), epoch AS (
    INSERT INTO {epochs}
        (system_identifier, timeline, started_at, last_promise_at, shift_s, leases_shifted)
    SELECT here.system_identifier, here.timeline, here.now, carried.promised,
           coalesce(extract(epoch FROM here.now - carried.promised), 0),
           CASE WHEN carried.promised IS NULL THEN 0 ELSE carried.n END
    FROM here, carried
    ON CONFLICT (system_identifier, timeline) DO NOTHING
    RETURNING started_at - last_promise_at AS shift
), leases AS (
    UPDATE {leases} SET acquired_at = acquired_at + epoch.shift,
        renewed_at = renewed_at + epoch.shift, deadline = deadline + epoch.shift,
        next_check_at = next_check_at + epoch.shift
    FROM epoch WHERE epoch.shift IS NOT NULL AND {leases}.status = 'held'
        AND {leases}.noticed_state <> 'lost'
    RETURNING 1
), waiters AS (
    UPDATE {waiters} SET queued_at = queued_at + epoch.shift,
        expires_at = expires_at + epoch.shift
    FROM epoch WHERE epoch.shift IS NOT NULL
    RETURNING 1
)
SELECT (SELECT count(*) FROM epoch), (SELECT extract(epoch FROM shift) FROM epoch),
       (SELECT count(*) FROM leases), (SELECT count(*) FROM waiters)
"""


def _sql(template: str) -> str:
    return template.format(
        epochs=ClockEpoch._meta.db_table, leases=Lease._meta.db_table, waiters=Waiter._meta.db_table
    )


def ensure_epoch(raw: Any) -> tuple[bool, float]:
    """On a raw psycopg connection in autocommit mode: record this primary's epoch if it is new,
    shifting the held leases (see the module's docstring). Returns (recorded here, shift_s)."""
    import psycopg

    try:
        with raw.cursor() as cursor:
            cursor.execute(_sql(PROBE))
            timeline, system_identifier, known = cursor.fetchone()
            if timeline is None or known:
                return False, 0.0
            return record_epoch(cursor, system_identifier=system_identifier, timeline=timeline)
    except psycopg.errors.UndefinedTable:
        return False, 0.0  # not migrated yet: nothing is held
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction) as error:
        # A server that hides its identity or timeline from this role: no epochs, said loudly.
        logger.warning(
            "no clock epochs on this server (deadlines are not moved on failover): %s", error
        )
        return False, 0.0


def record_epoch(cursor: Any, *, system_identifier: int, timeline: int) -> tuple[bool, float]:
    """The one statement: record the epoch, and shift if this call recorded it."""
    cursor.execute(_sql(EXTEND), {"system_identifier": system_identifier, "timeline": timeline})
    recorded, shift, leases, waiters = cursor.fetchone()
    if recorded and shift is None:
        logger.info("first epoch recorded: timeline %s of %s", timeline, system_identifier)
    elif recorded:
        logger.warning(
            "new primary (timeline %s of %s): held leases shifted by %.3f s "
            "(%s leases, %s waiters)",
            timeline,
            system_identifier,
            float(shift or 0),
            leases,
            waiters,
        )
    return bool(recorded), float(shift or 0)


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    """`connection_created`: before a new connection serves anything. It runs on the raw
    connection, so that it shows in no query count and no debug log."""
    if not connection.get_autocommit():
        return
    import psycopg

    raw = connection.connection
    try:
        ensure_epoch(raw)
    except psycopg.Error:
        # Never serve from a connection that did not pass: closed, it fails this request (503)
        # and Django replaces it for the next one, which tries again.
        raw.close()
        raise
