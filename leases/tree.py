"""The tree's SQL (`leases.names` defines the tree): which held tenures are on a node's line, and
the locks that serialize the grants that could conflict. The engine's statements are built
around these conditions (`leases.engine`), so there is one form of each."""

from __future__ import annotations

from typing import Any

from django.db import connection

from leases import names
from leases.models import Lease, LeaseKind, LeaseMode, LeaseStatus, Waiter

TABLE = Lease._meta.db_table
WAITERS = Waiter._meta.db_table
# The place in the queue of a call that has not joined it: behind every waiter.
NO_TICKET = 2**62


def line_conditions(alias: str) -> tuple[str, str]:
    """SQL, two ways for the row at `alias` to be on the line of the statement's node
    (`tree_params`): the node itself or an ancestor (`lineage`), or a descendant (the range of
    `leases.names`). Two conditions, each a lookup of `lease_held_node_idx` of its own: joined
    by OR, PostgreSQL would read every held lease of the workspace instead."""
    column = f"{alias}node"
    lineage = f"{column} = ANY(CAST(%(lineage)s AS text[]))"
    return lineage, f"{column} >= %(below_low)s AND {column} < %(below_high)s"


def held_on_line(workspace: str, also: str = "") -> list[str]:
    """SELECTs of the ids of held resource tenures on the node's line, one per condition of
    `_line_conditions`, with the SQL condition `also` on the row `other`."""
    return [
        f"SELECT other.id FROM {TABLE} AS other WHERE other.workspace_id = {workspace} "
        f"AND other.status = '{LeaseStatus.HELD.value}' "
        f"AND other.kind = '{LeaseKind.RESOURCE.value}' AND {condition}{also}"
        for condition in line_conditions("other.")
    ]


def mine(holder: str, process: str | None, alias: str = "other.") -> str:
    """SQL on the row at `alias`: the caller's own tenure (or place in line). A tenure is held by
    a process identity (DESIGN rule 6): the caller's own is its hand's, from its process; the
    same hand from another process is another holder. `process` None: any process of the hand
    (a handoff is asked hand to hand)."""
    if process is None:
        return f"{alias}holder = {holder}"
    # CAST: one parameter has one type in a statement, and the statements that write it into
    # `process_id` read it as varchar (a bare comparison would read it as text).
    return f"({alias}holder = {holder} AND {alias}process_id = CAST({process} AS varchar))"


def in_the_way(holder: str, process: str | None, alias: str = "other.") -> str:
    """SQL on the row at `alias`: another holder's (another hand's, or the caller's hand's from
    another process: `mine`), which a grant in mode `%(mode)s` conflicts with (an exclusive
    grant with any tenure, a shared one with exclusive ones); or the caller's own on the very
    node, which it renews rather than hold a second tenure of (its own leases never conflict,
    but it holds one tenure per node); or its hand's on the very node from another process (a
    hand has one row per node: the other process must let it go, or be taken over)."""
    return (
        f" AND (NOT {mine(holder, process, alias)} OR {alias}node = %(node)s) "
        f"AND (%(mode)s = '{LeaseMode.EXCLUSIVE.value}' "
        f"OR {alias}mode = '{LeaseMode.EXCLUSIVE.value}' "
        f"OR ({alias}holder = {holder} AND {alias}node = %(node)s))"
    )


def waiting_on_line(workspace: str, also: str = "") -> list[str]:
    """SELECTs of the ids of the waiters on the node's line still in the queue at `{now}`, one per
    condition of `line_conditions`, with the SQL condition `also` on the row `ahead`."""
    return [
        f"SELECT ahead.id FROM {WAITERS} AS ahead WHERE ahead.workspace_id = {workspace} "
        f"AND {condition} AND ahead.expires_at > {{now}}{also}"
        for condition in line_conditions("ahead.")
    ]


def conflict_free(workspace: str, holder: str, process: str = "%(process_id)s") -> str:
    """SQL: no other holder's tenure on the node's line stands in the way of a grant by
    `holder`'s process `process`, and no conflicting waiter on it is ahead of the caller's place
    in the queue (`%(ticket)s`, its waiter's id; `NO_TICKET` for a call that has not joined:
    every waiter is ahead of it)."""
    ahead = in_the_way(holder, process, "ahead.") + " AND ahead.id < %(ticket)s"
    return " AND ".join(
        f"NOT EXISTS ({select})"
        for select in (
            *held_on_line(workspace, in_the_way(holder, process)),
            *waiting_on_line(workspace, ahead),
        )
    )


def tree_params(resource: str) -> dict[str, Any]:
    """The parameters that place `resource` in its tree, for `{conflict_free}` and `_on_line`."""
    node = names.node_of(resource)
    lineage = [*names.ancestors_of(node), node]
    low, high = names.descendants_range(node)
    return {
        "node": node,
        "lineage": lineage,
        "below_low": low,
        "below_high": high,
        "ticket": NO_TICKET,
    }


def lock_tree_sql(workspace: str) -> str:
    """`lock_tree`'s statement, for the workspace the SQL expression `workspace` names (the hot
    path's key check, which knows it before any Python does); parameters `lineage_locks`."""
    key = f"hashtext('gc-tree:' || {workspace} || ':' || depth)"
    return (
        "SELECT CASE WHEN depth < %(lock_depth)s "
        f"THEN pg_advisory_xact_lock_shared({key}, hashtext(name)) "
        f"ELSE pg_advisory_xact_lock({key}, hashtext(name)) END "
        "FROM unnest(CAST(%(lock_lineage)s AS text[])) WITH ORDINALITY AS line(name, depth) "
        "ORDER BY depth"
    )


def lineage_locks(resource: str) -> dict[str, Any]:
    """The parameters of `lock_tree_sql` for `resource`."""
    node = names.node_of(resource)
    lineage = [*names.ancestors_of(node), node]
    return {"lock_depth": len(lineage), "lock_lineage": lineage}


def lock_tree(*, workspace_id: int, resource: str) -> None:
    """Serialize the grants that could conflict with one on `resource` until the transaction
    ends: a shared advisory lock on each ancestor
    and an exclusive one on the node. Two grants on one line of the tree meet on the higher
    node; siblings only share locks. Taken top-down, and keyed by depth as well as name, so two
    transactions can never wait for each other in a cycle."""
    with connection.cursor() as cursor:
        cursor.execute(
            lock_tree_sql("CAST(%(lock_workspace)s AS text)"),
            {"lock_workspace": workspace_id, **lineage_locks(resource)},
        )
        cursor.fetchall()
