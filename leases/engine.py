"""The lease engine: each change of a lease is ONE conditional SQL statement against the
database's clock, and its row count says whether it happened (DESIGN rules 1 and 2).

Statements are written once, with the database's clock rendered in by `leases.clock`. Nothing
here writes events or refusals; the services around the engine do, in the same transaction.

Why UPDATE first and INSERT ... ON CONFLICT DO NOTHING second, rather than one upsert: a
conditional UPDATE that matches no row writes nothing and waits for nothing, so a denied acquire
under contention costs a read; a failed `INSERT ... ON CONFLICT DO UPDATE ... WHERE` still locks
the conflicting row and waits for its holder's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from leases import names, tree
from leases.clock import now_sql, parse_timestamp, plus_seconds_sql
from leases.models import Lease, LeaseKind, LeaseMode, LeaseState, LeaseStatus
from leases.state import (
    Thresholds,
    alive_sql,
    lease_state,
    seconds_until,
    takeable_sql,
    thresholds,
)

TABLE = Lease._meta.db_table

# RENEWAL_NOTE: a renewal moves `deadline` but leaves `next_check_at` where it was. The sweep's
# partial index covers `next_check_at`, and an UPDATE that changes no indexed column can be a
# heap-only (HOT) update on PostgreSQL: no new index entries, no index bloat on the hottest rows
# (docs/performance.md). The sweep meets the row at its old threshold, finds it live, and moves the
# threshold to the new deadline: one index write per interval instead of one per heartbeat.
_COLUMNS = (
    "id",
    "workspace_id",
    "resource",
    "kind",
    "status",
    "holder",
    "process_id",
    "fence",
    "interval_s",
    "grace_s",
    "acquired_at",
    "renewed_at",
    "deadline",
    "released_at",
    "mode",
    "shared_by",
    # Open handoff requests on the tenure (`leases.handoffs`): a renewal reads them only when
    # this is not 0, so the common renewal costs nothing more.
    "handoff_open",
)


# The statements that grant or renew a tenure, with the caller's slots (PARAMETER_CALLER).
#
# A lease is a node of a tree (`leases.names`): a grant is conflict-free (`{conflict_free}`) when no
# other holder's tenure on the node's line (the node, its ancestors, its descendants) is held,
# exclusive or, for an exclusive grant, of any mode. Held, not alive: an acquire first records the
# end of every lost tenure on that line (`expire_tree`), so no tenure is taken over before its end
# is on record, and a renewal in flight (which holds its row) is waited for rather than overtaken.
# The caller serializes the conflicting set first (`lock_tree`): the NOT EXISTS of two concurrent
# grants would otherwise each miss the other's row.
TAKE = (
    "UPDATE {table} SET fence = fence + 1, acquired_at = {now}, "
    "status = 'held', holder = {caller_holder}, process_id = %(process_id)s, "
    "interval_s = %(interval_s)s, grace_s = %(grace_s)s, resource = %(resource)s, "
    "mode = 'exclusive', key_id = {caller_key}, "
    "renewed_at = {now}, deadline = {deadline_from_now}, released_at = NULL, "
    "noticed_state = 'live', next_check_at = {deadline_from_now}, handoff_open = 0{caller_from} "
    "WHERE workspace_id = {caller_workspace} AND node = %(node)s AND shared_by = '' "
    "AND status = 'free' AND {conflict_free}{caller_guard} "
    "RETURNING {columns}, {now} AS server_time"
)
# INSERT ... SELECT rather than VALUES, so that a caller source that matches nothing inserts
# nothing.
INSERT = (
    "INSERT INTO {table} (workspace_id, resource, kind, status, holder, process_id, fence, "
    "interval_s, grace_s, acquired_at, renewed_at, deadline, noticed_state, next_check_at, "
    "mode, shared_by, key_id) "
    "SELECT {caller_workspace}, %(resource)s, %(kind)s, 'held', {caller_holder}, "
    "%(process_id)s, 1, %(interval_s)s, %(grace_s)s, {now}, {now}, {deadline_from_now}, "
    "'live', {deadline_from_now}, 'exclusive', '', {caller_key}{caller_from} WHERE {conflict_free}"
    "{caller_guard} "
    "ON CONFLICT (workspace_id, node, shared_by) DO NOTHING "
    "RETURNING {columns}, {now} AS server_time"
)
# next_check_at is left behind on purpose (see RENEWAL_NOTE). The fence names one tenure of the
# node (each grant, exclusive or shared, takes the next), so node, holder and fence find its row.
RENEW = (
    "UPDATE {table} SET renewed_at = {now}, deadline = {renew_deadline}, "
    "noticed_state = 'live'{caller_from} "
    "WHERE workspace_id = {caller_workspace} AND node = %(node)s "
    "AND holder = {caller_holder} AND fence = %(fence)s AND process_id = %(process_id)s "
    "AND {alive} "
    "RETURNING {columns}, {now} AS server_time"
)


@dataclass(frozen=True)
class LeaseSnapshot:
    """A lease as one statement left it, with the database's time of that statement."""

    id: int
    workspace_id: int
    resource: str
    kind: str
    status: str
    holder: str
    process_id: str
    fence: int
    interval_s: float
    grace_s: float
    acquired_at: datetime | None
    renewed_at: datetime | None
    deadline: datetime | None
    released_at: datetime | None
    mode: str
    shared_by: str
    server_time: datetime
    # When the call that was granted this tenure joined the queue (`leases.queue`), if it waited.
    queued_at: datetime | None = None
    handoff_open: int = 0

    @property
    def state(self) -> LeaseState:
        return lease_state(
            status=self.status, deadline=self.deadline, grace_s=self.grace_s, now=self.server_time
        )

    @property
    def held(self) -> bool:
        """Held by someone whose tenure has not ended (live, late or stalled)."""
        return self.state not in (LeaseState.FREE, LeaseState.LOST)

    @property
    def expires_in_s(self) -> float | None:
        return seconds_until(self.deadline, self.server_time)

    @property
    def thresholds(self) -> Thresholds | None:
        return thresholds(self.deadline, self.grace_s) if self.deadline else None

    @classmethod
    def from_model(cls, lease: Lease, now: datetime) -> LeaseSnapshot:
        """A snapshot of an ORM-loaded lease at the database time `now` (one read per page)."""
        return cls(**{name: getattr(lease, name) for name in _COLUMNS}, server_time=now)


# Who is asking, in the statements that grant or renew a tenure: by default the parameters
# `workspace_id`, `holder` and `key_id` (the key a grant is taken with, recorded on the tenure:
# opaque here, like the holder's name). The hot views (leasing/hot.py) render the same
# statements with its key check as their source instead (`caller_from` = " FROM key"), so a call
# is authenticated and applied in one round trip by the very SQL the engine runs.
PARAMETER_CALLER = {
    "caller_workspace": "%(workspace_id)s",
    "caller_holder": "%(holder)s",
    "caller_key": "%(key_id)s",
    "caller_from": "",
    "caller_guard": "",
}


@dataclass(frozen=True)
class Guard:
    """A condition the granting statement itself checks, for a caller that must still be
    entitled at the instant of the grant (a key revoked while its acquire waited is granted
    nothing): SQL over `{now}` and `params`, and `explain`, which says why it failed (the
    error to raise) or None. The engine knows nothing of what it guards. A guard may name the
    key the grant is taken with (`params["key_id"]`), which the grant records on the tenure."""

    sql: str
    params: dict[str, Any]
    explain: Callable[[], Exception | None]
    # Statements that take the locks `sql` takes (a key's row FOR SHARE), run by `hold` first
    # in the granting transaction: LOCK_ORDER puts them before any lease row, as a revocation
    # takes the key's row and then its tenures' rows.
    locks: tuple[str, ...] = ()

    def slots(self) -> dict[str, str]:
        return {**PARAMETER_CALLER, "caller_guard": f" AND {self.sql}"}

    def hold(self) -> None:
        """Take the guard's own locks now, before the transaction locks any lease row."""
        with connection.cursor() as cursor:
            for lock in self.locks:
                cursor.execute(lock, self.params)

    @classmethod
    def all(cls, *guards: Guard | None) -> Guard | None:
        """Every one of `guards` (None: no condition), as one: the first that explains wins."""
        given = [guard for guard in guards if guard is not None]
        if len(given) <= 1:
            return given[0] if given else None

        def explain() -> Exception | None:
            for guard in given:
                error = guard.explain()
                if error is not None:
                    return error
            return None

        params: dict[str, Any] = {}
        for guard in given:
            params.update(guard.params)
        return cls(
            sql=" AND ".join(f"({guard.sql})" for guard in given),
            params=params,
            explain=explain,
            locks=tuple(lock for guard in given for lock in guard.locks),
        )


# LOCK_ORDER: every statement that locks several `leases_lease` rows, or one row and then
# another, takes them in ascending id order, after the tree's advisory locks (`tree.lock_tree`)
# and never before them; a statement that locks one row needs no order. Two transactions then
# never wait for each other in a cycle (docs/design.md, "Lock order"). Where PostgreSQL aborts
# one anyway (40P01, 40001), the service runs it again (`apikit.retries`).
def _sql(template: str, **caller: str) -> str:
    """Render {now}, {alive}, {free_or_lost} and the caller's slots into `template`."""
    now = now_sql()
    slots = caller or PARAMETER_CALLER
    return template.format(
        table=TABLE,
        now=now,
        columns=", ".join(_COLUMNS),
        alive=alive_sql(now),
        free_or_lost=takeable_sql(now),
        deadline_from_now=plus_seconds_sql(now, "CAST(%(interval_s)s AS double precision)"),
        renew_deadline=plus_seconds_sql(now, "interval_s"),
        lock_rows=" FOR UPDATE",
        # `WHERE {locked_ids}SELECT id ... ORDER BY id{lock_rows}{locked_ids_end}`: the rows a
        # sub-select locked in id order (LOCK_ORDER), reached by primary key as an array,
        # whatever the planner would make of `id IN (sub-select)` on small tables.
        locked_ids="id = ANY(ARRAY(",
        locked_ids_end="))",
        conflict_free=tree.conflict_free(slots["caller_workspace"], slots["caller_holder"]).replace(
            "{now}", now
        ),
        # A guard's condition is SQL over {now} too (`Guard`).
        **{name: value.replace("{now}", now) for name, value in slots.items()},
    )


def _snapshot(row: tuple[Any, ...]) -> LeaseSnapshot:
    values = dict(zip((*_COLUMNS, "server_time"), row, strict=True))
    for name in ("acquired_at", "renewed_at", "deadline", "released_at", "server_time"):
        values[name] = parse_timestamp(values[name])
    values["fence"] = int(values["fence"])
    values["interval_s"] = float(values["interval_s"])
    values["grace_s"] = float(values["grace_s"])
    values["handoff_open"] = int(values["handoff_open"] or 0)
    return LeaseSnapshot(**values)


def render(template: str, **caller: str) -> str:
    """Render the engine's conditions ({now}, {alive}, {renew_deadline}, ...) into a statement
    built around them elsewhere (the fleet's one-statement heartbeat, the hot path), so that
    every statement judges a lease by the same SQL. `caller` fills the slots of
    `PARAMETER_CALLER` (all of them, or none for the parameters)."""
    return _sql(template, **caller)


def snapshot(row: tuple[Any, ...]) -> LeaseSnapshot:
    """A snapshot from a row of `COLUMNS` followed by the statement's time."""
    return _snapshot(row)


COLUMNS = _COLUMNS


def tenure_params(
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    interval_s: float,
    grace_s: float,
    ticket: int | None = None,
) -> dict[str, Any]:
    """The parameters of a statement that starts or renews a tenure."""
    return {
        "workspace_id": workspace_id,
        "resource": resource,
        "holder": holder,
        "process_id": process_id,
        "interval_s": float(interval_s),
        "grace_s": float(grace_s),
        "mode": LeaseMode.EXCLUSIVE.value,
        # The key a grant is taken with: a guard that names one overrides this (`Guard`).
        "key_id": None,
        **tree.tree_params(resource),
        **({"ticket": ticket} if ticket is not None else {}),
    }


def one(sql: str, params: dict[str, Any]) -> LeaseSnapshot | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return _snapshot(row) if row else None


def read(*, workspace_id: int, resource: str, settled: bool = False) -> LeaseSnapshot | None:
    """The lease on `resource` with the database's time, or None if never leased.

    `settled` (for `check`, which storage trusts before it applies a write): the row is read
    FOR SHARE, so a read that meets a grant or a break still in flight waits for its
    commit and answers with the new fence. A plain read takes its snapshot before that commit
    but its clock after the transition's stamp, and would call a fence current at a time when,
    by the event log, it no longer was (the long history run found two such writes in 46,000).
    """
    lock = " FOR SHARE" if settled else ""
    return one(
        _sql(
            "SELECT {columns}, {now} FROM {table} "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s "
            f"AND shared_by = ''{lock}"
        ),
        {"workspace_id": workspace_id, "node": names.node_of(resource)},
    )


def take(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    interval_s: float,
    grace_s: float,
    guard: Guard | None = None,
    ticket: int | None = None,
) -> LeaseSnapshot | None:
    """Take an existing lease row that is free: a new tenure, fence + 1.

    A lost tenure is freed first by `expire`, whose row count says that its end must be recorded;
    taking lost rows here too would let a tenure that ran out between the two statements change
    hands with no end on record. The current holder asking again is `renew_holder`, also a
    statement of its own: on PostgreSQL each `clock_timestamp()` in a statement is read
    separately, so no column of one statement that did either could tell a renewal from a new
    tenure; two statements' row counts do.
    """
    params = tenure_params(workspace_id, resource, holder, process_id, interval_s, grace_s, ticket)
    if guard is None:
        return one(_sql(TAKE), params)
    return one(_sql(TAKE, **guard.slots()), {**params, **guard.params})


def renew_holder(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    interval_s: float,
    grace_s: float,
    mode: str = LeaseMode.EXCLUSIVE,
    guard: Guard | None = None,
) -> LeaseSnapshot | None:
    """The current holder acquiring again while its tenure is not lost: renew it, keep the fence
    (the contract: a second acquire by the holder renews), only in the `mode` it holds it: a
    shared tenure renewed for an exclusive ask would answer "yours" while others share it, an
    exclusive one for a shared ask a mode nobody asked for. Asked in the other mode it matches
    nothing, and its own tenure stands in the way of the grant (`tree.in_the_way`), whose
    refusal says so (`held_in_other_mode`). The holder is the hand's process (DESIGN rule 6):
    the same hand asking from another process matches nothing here, and is in the way of
    itself like another hand."""
    return one(
        _sql(
            "UPDATE {table} SET interval_s = %(interval_s)s, "
            "grace_s = %(grace_s)s, renewed_at = {now}, deadline = {deadline_from_now}, "
            "noticed_state = 'live' "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s "
            "AND holder = %(holder)s AND process_id = %(process_id)s AND mode = %(mode)s "
            "AND {alive}{caller_guard} "
            "RETURNING {columns}, {now} AS server_time",
            **(guard.slots() if guard else {}),
        ),
        {
            **tenure_params(workspace_id, resource, holder, process_id, interval_s, grace_s),
            "mode": str(mode),
            **(guard.params if guard else {}),
        },
    )


# A take-over (`take_over: true` on acquire): the tenures of the node that the caller's hand holds
# from another process, alive, end now, so that the grant after it (in the same transaction,
# under the tree's locks) takes the node at its next fence. `released_at` stays NULL, as a
# break leaves it: the old process's retried release is refused (lease_lost), never answered as
# a release of its own. Lost ones are not matched: `expire_tree` records their end first.
def _take_over_sql() -> str:
    """End the tenures on the node's line (the node, its ancestors, its descendants) that the
    hand holds from another process: a crashed session's `src/` and `src/a.py` are both in the
    way of `src/a.py`, and both the new process's to take. LOCK_ORDER: id order."""
    other_process = (
        " AND other.holder = %(holder)s AND other.process_id <> CAST(%(process_id)s AS varchar)"
    )
    line = " UNION ".join(tree.held_on_line("%(workspace_id)s", other_process))
    return _sql(
        "UPDATE {table} SET status = 'free', released_at = NULL, next_check_at = NULL, "
        "noticed_state = 'free', handoff_open = 0 "
        f"WHERE {{locked_ids}}SELECT id FROM {{table}} WHERE id IN ({line}) "
        "ORDER BY id{lock_rows}{locked_ids_end} "
        "AND status = 'held' AND holder = %(holder)s AND {alive} "
        "RETURNING {columns}, {now} AS server_time"
    )


def take_over(
    *, workspace_id: int, resource: str, holder: str, process_id: str
) -> list[LeaseSnapshot]:
    """End the tenures on `resource`'s line of the tree that `holder` holds from a process
    other than `process_id` (the rows as they were held, freed); call inside the transaction
    that holds the tree's locks and grants next. Never another hand's."""
    return all_rows(
        _take_over_sql(),
        {
            **tree.tree_params(resource),
            "workspace_id": workspace_id,
            "holder": holder,
            "process_id": process_id,
        },
    )


def expire(*, workspace_id: int, resource: str) -> LeaseSnapshot | None:
    """Free a resource lease whose tenure is lost but not yet recorded as ended, so that the
    acquire about to take it can record the expiry first (the sweep does the same for leases
    nobody asks for; whichever runs first matches the row, the other matches nothing). Returns
    the row as freed: the ended tenure's holder, fence and deadline."""
    return one(
        _sql(
            "UPDATE {table} SET status = 'free', noticed_state = 'lost', next_check_at = NULL "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s AND shared_by = '' "
            "AND kind = 'resource' AND status = 'held' AND {free_or_lost} "
            "RETURNING {columns}, {now} AS server_time"
        ),
        {"workspace_id": workspace_id, "node": names.node_of(resource)},
    )


def insert(
    *,
    workspace_id: int,
    resource: str,
    kind: str,
    holder: str,
    process_id: str,
    interval_s: float,
    grace_s: float,
    guard: Guard | None = None,
    ticket: int | None = None,
) -> LeaseSnapshot | None:
    """Create the lease row held by `holder` at fence 1; None if the row already exists."""
    return one(
        _sql(INSERT, **(guard.slots() if guard else {})),
        {
            "kind": kind,
            **tenure_params(
                workspace_id, resource, holder, process_id, interval_s, grace_s, ticket
            ),
            **(guard.params if guard else {}),
        },
    )


def create_free(*, workspace_id: int, resource: str, kind: str = LeaseKind.SLOT) -> Lease:
    """A lease row that nobody holds yet (a new run's slots), at fence 0."""
    return Lease.objects.create(
        workspace_id=workspace_id, resource=resource, kind=kind, status=LeaseStatus.FREE
    )


def take_first_free(
    *,
    workspace_id: int,
    lease_ids: list[int],
    holder: str,
    process_id: str,
    interval_s: float,
    grace_s: float,
    guard: Guard | None = None,
) -> LeaseSnapshot | None:
    """Take the lowest free-or-lost lease among `lease_ids` (a run's slots) in one statement
    (and only if `guard`'s condition holds, checked by the statement itself).

    The candidate is picked with FOR UPDATE SKIP LOCKED, so concurrent claimers
    each take a different slot instead of queueing on the same one; the outer WHERE checks the
    condition again on the locked row. If every candidate was locked (a sweep or another claim
    holds the row for a moment), the statement runs once more with a plain FOR UPDATE, which
    waits for the lock instead of answering no_open_slot for a slot that is open.

    The first pass runs in a savepoint that is rolled back when it takes nothing: a row it met
    that another claim had changed since the statement's snapshot stays locked by it although it
    fails the check, and the waiting pass, which starts again from the lowest id, would then
    wait for lower rows while holding a higher one (LOCK_ORDER). Run inside a transaction.
    """
    if not lease_ids:
        return None
    lock_modes = (" FOR UPDATE SKIP LOCKED", " FOR UPDATE")
    placeholders = ", ".join(f"%(id{i})s" for i in range(len(lease_ids)))
    params: dict[str, Any] = {f"id{i}": lease_id for i, lease_id in enumerate(lease_ids)}
    params.update(
        workspace_id=workspace_id,
        holder=holder,
        process_id=process_id,
        interval_s=float(interval_s),
        grace_s=float(grace_s),
        key_id=None,
    )
    for lock in lock_modes:
        skipping = lock.endswith("SKIP LOCKED")
        savepoint = transaction.savepoint() if skipping else None
        taken = one(
            _sql(
                "UPDATE {table} SET fence = fence + 1, acquired_at = {now}, status = 'held', "
                "holder = %(holder)s, process_id = %(process_id)s, interval_s = %(interval_s)s, "
                "grace_s = %(grace_s)s, renewed_at = {now}, deadline = {deadline_from_now}, "
                "released_at = NULL, noticed_state = 'live', next_check_at = {deadline_from_now}, "
                "handoff_open = 0, key_id = %(key_id)s "
                "WHERE id = (SELECT id FROM {table} WHERE workspace_id = %(workspace_id)s "
                f"AND id IN ({placeholders}) AND {{free_or_lost}} ORDER BY id LIMIT 1{lock}) "
                "AND {table}.workspace_id = %(workspace_id)s AND {free_or_lost}{caller_guard} "
                "RETURNING {columns}, {now} AS server_time",
                **(guard.slots() if guard else {}),
            ),
            {**params, **(guard.params if guard else {})},
        )
        if savepoint is not None:
            if taken is None:
                transaction.savepoint_rollback(savepoint)  # and the locks it took with it
            else:
                transaction.savepoint_commit(savepoint)
        if taken is not None:
            return taken
    return None


def renew(
    *, workspace_id: int, resource: str, holder: str, fence: int, process_id: str
) -> LeaseSnapshot | None:
    """Push the deadline to now + interval, only for the current, unlost tenure and process."""
    return one(
        _sql(RENEW),
        {
            "workspace_id": workspace_id,
            "node": names.node_of(resource),
            "holder": holder,
            "fence": fence,
            "process_id": process_id,
        },
    )


# Every live resource lease of one holder's process, renewed together (a session that holds a
# lease per file it edits renews them all in one call). A lost tenure stays lost: `{alive}`.
# The rows are locked first, in id order, by the sub-select (LOCK_ORDER): a plain UPDATE of
# several rows locks them in whatever order its plan visits them, and a pool's take, which
# locks its members in id order, could then wait for this statement while it waits for the take.
# The update names the process's rows as the sub-select does, so that whatever the statistics
# it reads them through `lease_process_idx` (or the locked ids' primary key), never a scan of
# the workspace (tests/leases/test_plans.py).
_PROCESS_ROWS = (
    "{table}.workspace_id = {caller_workspace} AND holder = {caller_holder} "
    "AND process_id = %(process_id)s AND kind = 'resource' AND {alive}"
)
RENEW_ALL = (
    "UPDATE {table} SET renewed_at = {now}, deadline = {renew_deadline}, "
    "noticed_state = 'live' "
    f"WHERE {{locked_ids}}SELECT id FROM {{table}} WHERE {_PROCESS_ROWS} "
    f"ORDER BY id{{lock_rows}}{{locked_ids_end}} AND {_PROCESS_ROWS} "
    "RETURNING {columns}, {now} AS server_time"
)
# A harness session's leases as its event sees them (`harnesses.services`): each live one, and
# renewed when a tenth of its window has passed since its last renewal, so that the events of a
# busy session write nothing, while one that stops loses its leases within their window (less
# at most a tenth of it). The renewed rows are locked in id order (LOCK_ORDER); the rest are
# read from the same snapshot, in which a row renewed here still shows its old renewal.
RENEW_DUE_FRACTION = 0.1
_RENEW_DUE = f"renewed_at < {{now}} - interval_s * {RENEW_DUE_FRACTION} * interval '1 second'"
RENEW_DUE = (
    "UPDATE {table} SET renewed_at = {now}, deadline = {renew_deadline}, "
    "noticed_state = 'live' "
    f"WHERE {{locked_ids}}SELECT id FROM {{table}} WHERE {_PROCESS_ROWS} AND {_RENEW_DUE} "
    f"ORDER BY id{{lock_rows}}{{locked_ids_end}} AND {_PROCESS_ROWS} "
    "RETURNING {columns}, {now} AS server_time"
)
HELD_NOT_DUE = (
    "SELECT {columns}, {now} AS server_time FROM {table} "
    f"WHERE {_PROCESS_ROWS} AND NOT ({_RENEW_DUE})"
)
# The resource leases of that process held on paper but lost (past the deadline, not yet
# recorded by the sweep or a takeover): what a renew-all answers as not renewed.
HELD_LOST = (
    "SELECT {columns}, {now} AS server_time FROM {table} "
    "WHERE {table}.workspace_id = {caller_workspace} AND holder = {caller_holder} "
    "AND process_id = %(process_id)s AND kind = 'resource' AND status = 'held' "
    "AND NOT {alive}"
)


def renew_all(*, workspace_id: int, holder: str, process_id: str) -> list[LeaseSnapshot]:
    """Push the deadline of every live resource lease `holder` holds with `process_id` to now +
    its interval, in one statement; the leases renewed, in no particular order."""
    return all_rows(_sql(RENEW_ALL), _process_params(workspace_id, holder, process_id))


def held_lost(*, workspace_id: int, holder: str, process_id: str) -> list[LeaseSnapshot]:
    """The resource leases `holder`'s process still holds on paper but has lost (past the
    deadline, not yet recorded by the sweep or a takeover)."""
    return all_rows(_sql(HELD_LOST), _process_params(workspace_id, holder, process_id))


def _process_params(workspace_id: int, holder: str, process_id: str) -> dict[str, Any]:
    """The parameters naming one holder's process's resource leases."""
    return {
        "workspace_id": workspace_id,
        "holder": holder,
        "process_id": process_id,
    }


def all_rows(sql: str, params: dict[str, Any]) -> list[LeaseSnapshot]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_snapshot(row) for row in cursor.fetchall()]


def release(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    fence: int,
    process_id: str | None = None,
    retire: bool = False,
) -> LeaseSnapshot | None:
    """End the tenure now; the resource is free at once. The fence stays where it is.

    `retire`: the resource takes no further holder either (a finished slot) until `reopen`.
    """
    process_clause = "AND process_id = %(process_id)s " if process_id is not None else ""
    status = LeaseStatus.RETIRED if retire else LeaseStatus.FREE
    return one(
        _sql(
            f"UPDATE {{table}} SET status = '{status}', released_at = {{now}}, "
            "next_check_at = NULL, noticed_state = 'free', handoff_open = 0, "
            f"tenure_mean_s = {_tenure_mean_sql()} "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s "
            f"AND holder = %(holder)s AND fence = %(fence)s {process_clause}"
            "AND {alive} "
            "RETURNING {columns}, {now} AS server_time"
        ),
        {
            "workspace_id": workspace_id,
            "node": names.node_of(resource),
            "holder": holder,
            "fence": fence,
            "process_id": process_id,
        },
    )


def end_by_keys(*, key_ids: list[int], kind: str) -> list[LeaseSnapshot]:
    """End now every live tenure of `kind` taken with one of the keys `key_ids` (revoked in this
    transaction), in one statement: the resource is free at once; the fence stays where it is
    (the next grant takes the one after), and `released_at` stays NULL (its holder did not
    release it). Returns the tenures as they were ended, their holders and fences kept."""
    if not key_ids:
        return []
    placeholders = ", ".join(f"%(key{i})s" for i in range(len(key_ids)))
    params: dict[str, Any] = {f"key{i}": int(key_id) for i, key_id in enumerate(key_ids)}
    return all_rows(
        _sql(
            "UPDATE {table} SET status = 'free', next_check_at = NULL, noticed_state = 'free', "
            f"handoff_open = 0, tenure_mean_s = {_tenure_mean_sql()} "
            # LOCK_ORDER: the rows in id order (a renew-all or a pool take meets them so).
            "WHERE {locked_ids}SELECT id FROM {table} "
            f"WHERE key_id IN ({placeholders}) AND status = 'held' AND kind = %(kind)s "
            "AND {alive} ORDER BY id{lock_rows}{locked_ids_end} AND status = 'held' AND {alive} "
            "RETURNING {columns}, {now} AS server_time"
        ),
        {**params, "kind": kind},
    )


def reopen(*, workspace_id: int, lease_id: int) -> LeaseSnapshot | None:
    """Make a retired lease free again (a supervisor reopens a finished slot); None unless it
    was retired. The fence stays: the next holder takes the one after the finished tenure's."""
    return one(
        _sql(
            "UPDATE {table} SET status = 'free', released_at = NULL "
            f"WHERE workspace_id = %(workspace_id)s AND id = %(lease_id)s "
            f"AND status = '{LeaseStatus.RETIRED}' "
            "RETURNING {columns}, {now} AS server_time"
        ),
        {"workspace_id": workspace_id, "lease_id": lease_id},
    )


def _tenure_mean_sql() -> str:
    """SQL: the node's moving average of how long a tenure lasts, with the one ending now."""
    held_for = "EXTRACT(EPOCH FROM ({now} - acquired_at))"
    return (
        f"CASE WHEN acquired_at IS NULL THEN tenure_mean_s WHEN tenure_mean_s IS NULL "
        f"THEN {held_for} ELSE 0.8 * tenure_mean_s + 0.2 * {held_for} END"
    )
