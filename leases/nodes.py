"""The statements over a node of the tree and its tenures: the tenures in the way of a grant
(`conflicts`), the lost ones on the node's line (`expire_tree`), a shared tenure (`share`), one
tenure by its fence (`read_tenure`), and a break that ends them all (`break_`). Each is a
conditional statement of the engine's kind, rendered by `leases.engine` around the conditions
of `leases.tree`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.db import connection

from leases import engine, names, tree
from leases.engine import Guard, LeaseSnapshot
from leases.models import LeaseMode

# A shared grant: the node's row counts out the next fence (it must exist: `ENSURE_NODE`), and the
# holder's own row of the node takes it. Both in the transaction that holds the tree's locks.
ENSURE_NODE = (
    "INSERT INTO {table} (workspace_id, resource, kind, status, holder, process_id, fence, "
    "interval_s, grace_s, noticed_state, mode, shared_by) "
    "VALUES (%(workspace_id)s, %(resource)s, 'resource', 'free', '', '', 0, %(interval_s)s, "
    "%(grace_s)s, 'free', 'exclusive', '') "
    "ON CONFLICT (workspace_id, node, shared_by) DO NOTHING"
)
COUNT_OUT = (
    "UPDATE {table} SET fence = fence + 1 "
    "WHERE workspace_id = {caller_workspace} AND node = %(node)s AND shared_by = '' "
    "AND status = 'free' AND {conflict_free}{caller_guard} "
    "RETURNING fence"
)
SHARE = (
    "INSERT INTO {table} (workspace_id, resource, kind, status, holder, process_id, fence, "
    "interval_s, grace_s, acquired_at, renewed_at, deadline, noticed_state, next_check_at, "
    "mode, shared_by, key_id) "
    "VALUES (%(workspace_id)s, %(resource)s, 'resource', 'held', %(holder)s, %(process_id)s, "
    "%(fence)s, %(interval_s)s, %(grace_s)s, {now}, {now}, {deadline_from_now}, 'live', "
    "{deadline_from_now}, 'shared', %(holder)s, %(key_id)s) "
    "ON CONFLICT (workspace_id, node, shared_by) DO UPDATE SET resource = excluded.resource, "
    "status = 'held', process_id = excluded.process_id, fence = excluded.fence, "
    "interval_s = excluded.interval_s, grace_s = excluded.grace_s, "
    "acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at, "
    "deadline = excluded.deadline, released_at = NULL, noticed_state = 'live', "
    "next_check_at = excluded.next_check_at, handoff_open = 0, key_id = excluded.key_id "
    "WHERE {table}.status = 'free' "
    "RETURNING {columns}, {now} AS server_time"
)


def read_tenure(
    *, workspace_id: int, resource: str, fence: int, settled: bool = False
) -> LeaseSnapshot | None:
    """The row of the tenure `fence` of the node, or None once the node has moved past it. A
    shared tenure's row is preferred: the node's row carries the fence it counted out for it as
    its counter, not as a tenure of its own. `settled` as for `read`."""
    lock = " FOR SHARE" if settled else ""
    return engine.one(
        engine.render(
            "SELECT {columns}, {now} FROM {table} "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s AND fence = %(fence)s "
            f"ORDER BY shared_by = '' LIMIT 1{lock}"
        ),
        {"workspace_id": workspace_id, "node": names.node_of(resource), "fence": fence},
    )


def tenures(*, workspace_id: int, resource: str) -> list[LeaseSnapshot]:
    """Every row of the node: its own, then its shared tenures' rows, by fence."""
    return engine.all_rows(
        engine.render(
            "SELECT {columns}, {now} FROM {table} "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s "
            "ORDER BY shared_by <> '', fence"
        ),
        {"workspace_id": workspace_id, "node": names.node_of(resource)},
    )


def conflicts(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str | None,
    mode: str,
    limit: int = 5,
) -> tuple[list[LeaseSnapshot], int]:
    """The held tenures of other holders that stand in the way of `holder`'s process
    `process_id` taking `resource` in `mode` (the condition the granting statements check; with
    `process_id` None, of other hands only), soonest to end first, and how many there are in
    all. The caller's own tenure of the node, in the way only when held in the other mode, comes
    before them all: no wait ends it (`held_in_other_mode`)."""
    params = {
        "workspace_id": workspace_id,
        "holder": holder,
        "process_id": process_id,
        "mode": mode,
        "limit": limit,
        **tree.tree_params(resource),
    }
    with connection.cursor() as cursor:
        cursor.execute(engine.render(conflicts_sql(by_process=process_id is not None)), params)
        rows = cursor.fetchall()
    return [engine.snapshot(row[:-1]) for row in rows], int(rows[0][-1]) if rows else 0


def conflicts_sql(*, by_process: bool = True) -> str:
    """`conflicts`' query, to render: the tenures in the way, the caller's own first (with
    `by_process`), then soonest to end first, each row the engine's columns, the statement's
    time and how many there are in all (parameters `workspace_id`, `holder`, `process_id`,
    `mode`, `limit` and `tree.tree_params`)."""
    process = "%(process_id)s" if by_process else None
    ids = " UNION ALL ".join(
        tree.held_on_line("%(workspace_id)s", tree.in_the_way("%(holder)s", process))
    )
    own_first = f"{tree.mine('%(holder)s', process, '')} DESC, " if by_process else ""
    return (
        "SELECT {columns}, {now} AS server_time, COUNT(*) OVER () AS in_all FROM {table} "
        "WHERE {table}.workspace_id = %(workspace_id)s AND id IN (" + ids + ") "
        f"ORDER BY {own_first}deadline LIMIT %(limit)s"
    )


def expire_tree(*, workspace_id: int, resource: str) -> list[LeaseSnapshot]:
    """Free every lost, unrecorded resource tenure on the line of `resource` (the node, its
    ancestors, its descendants; any holder), so that the acquire about to take it records
    each end first; the rows as freed. The rows are locked first, in id order (the engine's
    LOCK_ORDER): the line of a pool's node holds its members, which a take locks in id order."""
    return engine.all_rows(
        engine.render(
            "UPDATE {table} SET status = 'free', noticed_state = 'lost', next_check_at = NULL "
            "WHERE {locked_ids}SELECT id FROM {table} "
            "WHERE {table}.workspace_id = %(workspace_id)s "
            f"AND id IN ({' UNION ALL '.join(tree.held_on_line('%(workspace_id)s'))}) "
            "AND status = 'held' AND {free_or_lost} ORDER BY id{lock_rows}{locked_ids_end} "
            "AND {table}.workspace_id = %(workspace_id)s AND status = 'held' AND {free_or_lost} "
            "RETURNING {columns}, {now} AS server_time"
        ),
        {"workspace_id": workspace_id, **tree.tree_params(resource)},
    )


def share(
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
    """A shared tenure of `resource` for `holder`, at the next fence of its node; None when a
    tenure stands in the way. Call inside the transaction that holds `lock_tree`."""
    params = {
        **engine.tenure_params(
            workspace_id, resource, holder, process_id, interval_s, grace_s, ticket
        ),
        "mode": LeaseMode.SHARED.value,
        **(guard.params if guard else {}),
    }
    with connection.cursor() as cursor:
        cursor.execute(engine.render(ENSURE_NODE), params)
        cursor.execute(engine.render(COUNT_OUT, **(guard.slots() if guard else {})), params)
        counted = cursor.fetchone()
    if counted is None:
        return None
    return engine.one(engine.render(SHARE), {**params, "fence": int(counted[0])})


@dataclass(frozen=True)
class Broken:
    """What a break ended: the node's row as left (its fence moved on), and each tenure broken,
    as it was held (the node's own exclusive one first, then the shared ones by fence)."""

    node: LeaseSnapshot
    tenures: list[LeaseSnapshot]


def break_(*, workspace_id: int, resource: str) -> Broken | None:
    """A supervisor ends every tenure of the node, exclusive and shared: free at once, and the
    node's fence + 1 so that each broken holder's every later write is stale. None when nobody
    held it."""
    params = {"workspace_id": workspace_id, "node": names.node_of(resource)}
    # Every row of the node (its own and each shared tenure's) locked first, in id order, so the
    # updates below, shared rows before the node's, never lock out of order (LOCK_ORDER).
    engine.all_rows(
        engine.render(
            "SELECT {columns}, {now} FROM {table} WHERE workspace_id = %(workspace_id)s "
            "AND node = %(node)s ORDER BY id FOR UPDATE"
        ),
        params,
    )
    # released_at stays NULL: it marks a release by the holder, which a retried release may
    # repeat; a broken tenure's holder is refused (lease_lost) instead.
    shares = engine.all_rows(
        engine.render(
            "UPDATE {table} SET status = 'free', released_at = NULL, next_check_at = NULL, "
            "noticed_state = 'free', handoff_open = 0 "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s AND shared_by <> '' "
            "AND status = 'held' "
            "RETURNING {columns}, {now} AS server_time"
        ),
        params,
    )
    own = engine.one(
        engine.render(
            "UPDATE {table} SET status = 'free', fence = fence + 1, released_at = NULL, "
            "next_check_at = NULL, noticed_state = 'free', handoff_open = 0 "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s AND shared_by = '' "
            "AND status = 'held' "
            "RETURNING {columns}, {now} AS server_time"
        ),
        params,
    )
    if own is None and not shares:
        return None
    node = own or engine.one(
        engine.render(
            "UPDATE {table} SET fence = fence + 1 "
            "WHERE workspace_id = %(workspace_id)s AND node = %(node)s AND shared_by = '' "
            "RETURNING {columns}, {now} AS server_time"
        ),
        params,
    )
    assert node is not None  # a shared tenure's node has its row (`ENSURE_NODE`)
    # The exclusive tenure as it was held: the fence before the break's.
    broken = [dataclasses.replace(own, fence=own.fence - 1)] if own is not None else []
    return Broken(node=node, tenures=broken + sorted(shares, key=lambda lease: lease.fence))
