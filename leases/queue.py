"""The fair queue of `wait_s` acquires: first come, first served on each line of the tree.

A call that must wait joins the queue (`join`: a `Waiter` row, its id the call's place). Every
grant checks the queue in its one conditional statement (`leases.tree.conflict_free`): a request
is granted only when no waiter that it conflicts with (on its line, in a conflicting mode) joined
before it, so neither a newcomer nor a stream of shared requests passes an exclusive waiter. A
waiter refreshes its `expires_at` while it waits (`stay`) and leaves when it is granted (in the
granting transaction) or gives up (`leave`, which wakes those behind it); one whose process died
stops counting when its `expires_at` passes (`WAITER_TTL_S`). A wait that ends denied keeps its
place for `TICKET_KEEP_S` (`keep`), dormant (it keeps nobody out while its waiter is away):
the denial's `ticket`, passed back on the next acquire, takes it up again (`resume`), ahead of
every waiter that joined after it, so a waiter that keeps coming back keeps its place however
long it waits in all.

`standing` says where a call stands: its position among the waiters, the hands ahead of it, and
an estimate of the wait from the holders' windows and how long tenures of the node have lasted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from apikit import concealing
from leases import engine, names, nodes, tree
from leases.clock import now_expression, now_sql, parse_timestamp, plus_seconds_sql
from leases.engine import LeaseSnapshot
from leases.models import LeaseMode, LeaseState, Waiter

# How long a waiter counts without refreshing: a waiter whose process died leaves within it.
WAITER_TTL_S = 5.0
# How long a waiter's place is kept after its wait ended denied: the denial's `ticket`, passed
# back on an acquire within this time, keeps the place (and so on, for as long as it comes back).
# Less than the retention job's minute for waiters (ops/jobs.py), which would delete it sooner.
TICKET_KEEP_S = 30.0
# Hands named in a standing (the queue may be longer).
AHEAD_SHOWN = 10
# The waiters a list of the line (`line`, the leases page) reads, oldest first: a place counts
# the waiters ahead of it, so each read is bounded; the places of those listed are exact.
LINE_LIMIT = 500


@dataclass(frozen=True)
class Ticket:
    id: int
    queued_at: datetime
    # Every statement on the place names its workspace too: one shard's row when the tables
    # are distributed by workspace (docs/scale.md).
    workspace_id: int


@dataclass(frozen=True)
class Standing:
    """Where a request stands: `position` among the waiters (1: next once the way is clear),
    `ahead` the hands before it (holders in the way, then waiters ahead, in order), and
    `estimated_wait_s` (None when nothing is known to estimate from)."""

    requested: str
    position: int
    ahead: list[str]
    estimated_wait_s: float | None

    def fields(self) -> dict[str, Any]:
        # A hand the caller may not read (another lane's) is ahead all the same, unnamed.
        hidden = concealing.concealed(self.ahead)
        return {
            "requested": self.requested,
            "position": self.position,
            "ahead": [None if name in hidden else name for name in self.ahead],
            "estimated_wait_s": self.estimated_wait_s,
        }


def _expiry_sql() -> str:
    return plus_seconds_sql(now_sql(), repr(WAITER_TTL_S))


def join(*, workspace_id: int, resource: str, holder: str, process_id: str, mode: str) -> Ticket:
    """Take a place at the end of the queue for `resource`."""
    now = now_sql()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {tree.WAITERS} (workspace_id, resource, mode, holder, process_id, "
            f"queued_at, expires_at) VALUES (%s, %s, %s, %s, %s, {now}, {_expiry_sql()}) "
            "RETURNING id, queued_at",
            [workspace_id, resource, mode, holder, process_id],
        )
        ticket_id, queued_at = cursor.fetchone()
    queued = parse_timestamp(queued_at)
    assert queued is not None
    return Ticket(id=int(ticket_id), queued_at=queued, workspace_id=workspace_id)


def stay(ticket: Ticket) -> None:
    """Keep the place: the waiter counts for another `WAITER_TTL_S`."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {tree.WAITERS} SET expires_at = {_expiry_sql()} "
            "WHERE workspace_id = %s AND id = %s",
            [ticket.workspace_id, ticket.id],
        )


def keep(ticket: Ticket) -> None:
    """The wait ended denied: the place stops counting at once (an absent waiter keeps nobody
    out: a free resource is not left idle for it), and is kept, dormant, for `TICKET_KEEP_S`:
    a waiter that comes back with its ticket within that time takes it up again (`resume`),
    ahead of every waiter that joined after it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {tree.WAITERS} SET expires_at = {now_sql()} "
            "WHERE workspace_id = %s AND id = %s",
            [ticket.workspace_id, ticket.id],
        )


def resume(
    ticket_id: int, *, workspace_id: int, resource: str, holder: str, process_id: str, mode: str
) -> Ticket | None:
    """The place `ticket_id`, if it is still this request's (the same name, holder, process and
    mode) and still kept (its wait ended less than `TICKET_KEEP_S` ago, or it is waiting): it
    counts again, for `WAITER_TTL_S`; else None (the place is gone: the request goes to the
    back of the line, as a newcomer)."""
    kept_since = plus_seconds_sql(now_sql(), repr(-TICKET_KEEP_S))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {tree.WAITERS} SET expires_at = {_expiry_sql()} WHERE workspace_id = %s "
            "AND id = %s AND resource = %s AND holder = %s AND process_id = %s AND mode = %s "
            f"AND expires_at > {kept_since} RETURNING id, queued_at",
            [workspace_id, ticket_id, resource, holder, process_id, mode],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    queued = parse_timestamp(row[1])
    assert queued is not None
    return Ticket(id=int(row[0]), queued_at=queued, workspace_id=workspace_id)


def served(ticket: Ticket | None, lease: LeaseSnapshot) -> LeaseSnapshot:
    """`lease` was granted to the waiter `ticket` (if it waited): out of the line, in the
    granting transaction; the lease says when it joined."""
    if ticket is None:
        return lease
    Waiter.objects.filter(id=ticket.id).delete()
    return dataclasses.replace(lease, queued_at=ticket.queued_at)


def leave(ticket: Ticket) -> bool:
    """Give up the place; whether it was still held (then the waiters behind it must be woken:
    it may have been all that stood in their way)."""
    return bool(Waiter.objects.filter(workspace_id=ticket.workspace_id, id=ticket.id).delete()[0])


def standing(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    mode: str,
    ticket: Ticket | None,
    in_the_way: list[LeaseSnapshot],
    first_free: bool = False,
) -> Standing:
    """Where the request of `holder`'s process `process_id` for `resource` in `mode` stands,
    behind the tenures `in_the_way` (`leases.nodes.conflicts`; all of them must end, or only
    one: `first_free`, a pool's members) and the waiters ahead of `ticket` (all of them, without
    one)."""
    params = {
        "workspace_id": workspace_id,
        "holder": holder,
        "process_id": process_id,
        "mode": mode,
        **tree.tree_params(resource),
        "ticket": ticket.id if ticket is not None else tree.NO_TICKET,
    }
    with connection.cursor() as cursor:
        cursor.execute(engine.render(_WAITING), params)
        waiting = [row[0] for row in cursor.fetchall()]
        cursor.execute(engine.render(_TENURE_MEAN), params)
        mean = cursor.fetchone()
    return _standing(resource, in_the_way, waiting, mean[0] if mean else None, first_free)


def standing_in_the_way(
    *, workspace_id: int, resource: str, holder: str, process_id: str, shown: int = 5
) -> tuple[list[LeaseSnapshot], int, Standing]:
    """For an exclusive request that has not joined the line, in one read: the tenures in its
    way (`leases.nodes.conflicts`: the first `shown`, soonest to end first, and how many in all)
    and where it stands behind them and the waiters (`standing`)."""
    params = {
        "workspace_id": workspace_id,
        "holder": holder,
        "process_id": process_id,
        "mode": LeaseMode.EXCLUSIVE.value,
        "limit": shown,
        **tree.tree_params(resource),
    }
    with connection.cursor() as cursor:
        cursor.execute(engine.render(STANDING_IN_THE_WAY), params)
        rows = cursor.fetchall()
    width = len(engine.COLUMNS) + 1
    in_the_way = [engine.snapshot(row[:width]) for row in rows if row[0] is not None]
    waiting, mean = list(rows[0][-2]), rows[0][-1]
    in_all = int(rows[0][width]) if in_the_way else 0
    return in_the_way, in_all, _standing(resource, in_the_way, waiting, mean, first_free=False)


# The holders of the waiters on the line ahead of `%(ticket)s` that the request conflicts with,
# in order; and how long tenures of the node have lasted (`Lease.tenure_mean_s`), to render.
_WAITING = (
    f"SELECT holder FROM {tree.WAITERS} WHERE workspace_id = %(workspace_id)s AND id IN ("
    + " UNION ".join(
        tree.waiting_on_line(
            "%(workspace_id)s",
            tree.in_the_way("%(holder)s", "%(process_id)s", "ahead.")
            + " AND ahead.id < %(ticket)s",
        )
    )
    + ") ORDER BY id"
)
_TENURE_MEAN = (
    "SELECT tenure_mean_s FROM {table} WHERE workspace_id = %(workspace_id)s "
    "AND node = %(node)s AND tenure_mean_s IS NOT NULL ORDER BY id LIMIT 1"
)
# `standing_in_the_way`'s read: one row per tenure in the way (or one of NULLs when none), each
# carrying the line's waiters and the node's tenure mean.
STANDING_IN_THE_WAY = (
    "SELECT way.*, ARRAY(" + _WAITING + ") AS waiting, (" + _TENURE_MEAN + ") AS mean "
    "FROM (SELECT 1) AS one LEFT JOIN LATERAL (" + nodes.conflicts_sql() + ") AS way ON true"
)


def _standing(
    resource: str,
    in_the_way: list[LeaseSnapshot],
    waiting: list[str],
    mean: float | None,
    first_free: bool,
) -> Standing:
    holders = list(dict.fromkeys(lease.holder for lease in in_the_way))
    ahead = list(dict.fromkeys([*holders, *waiting]))[:AHEAD_SHOWN]
    return Standing(
        requested=resource,
        position=len(waiting) + 1,
        ahead=ahead,
        estimated_wait_s=_estimate(mean, in_the_way, len(waiting), first_free),
    )


def _estimate(
    mean: float | None,
    in_the_way: list[LeaseSnapshot],
    waiting: int,
    first_free: bool,
) -> float | None:
    """Until the tenures in the way end (each lasts as long as tenures of the node have lasted,
    `mean`, at least until its current window ends; the first of them, `first_free`), then a
    tenure's length per waiter ahead."""
    per_tenure = mean if mean is not None else max((t.interval_s for t in in_the_way), default=None)
    ends = []
    for lease in in_the_way:
        window = max(lease.expires_in_s or 0.0, 0.0)
        held_for = (
            (lease.server_time - lease.acquired_at).total_seconds() if lease.acquired_at else 0.0
        )
        # A live holder renews: it keeps the lease about as long as tenures last; a late one
        # is gone when its window (and grace) runs out unless it comes back.
        expected = max(mean - held_for, 0.0) if mean is not None else 0.0
        live = lease.state == LeaseState.LIVE
        ends.append(max(window, expected) if live else window)
    clearing = (min(ends) if first_free else max(ends)) if ends else 0.0
    if per_tenure is None:
        return round(clearing, 1) if in_the_way else None
    return round(clearing + waiting * per_tenure, 1)


@dataclass(frozen=True)
class InLine:
    """A waiter in the queue, with the place the queue gives it (`places`)."""

    id: int
    resource: str
    node: str
    holder: str
    process_id: str
    mode: str
    queued_at: datetime
    place: int

    def fields(self) -> dict[str, Any]:
        """As `GET /leases/queue` answers it."""
        return {
            "resource": self.resource,
            "holder": self.holder,
            "mode": self.mode,
            "position": self.place,
            "queued_at": self.queued_at,
        }


def _in_the_way(waiter: Waiter | InLine, ahead: Waiter | InLine) -> bool:
    """`leases.tree.in_the_way` for a waiter's request against a waiter `ahead` on its line:
    another holder's (another hand's, or the same hand's from another process), or the same
    hand's on the very node; in a mode that conflicts (exclusive against anything, shared only
    against exclusive, and a hand's own on the very node)."""
    mine = ahead.holder == waiter.holder and ahead.process_id == waiter.process_id
    same_node = ahead.node == waiter.node
    if mine and not same_node:
        return False
    return (
        waiter.mode == LeaseMode.EXCLUSIVE
        or ahead.mode == LeaseMode.EXCLUSIVE
        or (ahead.holder == waiter.holder and same_node)
    )


def places(waiters: Iterable[Waiter]) -> list[InLine]:
    """Each waiter (all still in the queue) with the place `standing` gives it, oldest first:
    1 + the waiters that joined before it on its line of the tree (its node, an ancestor, a
    descendant: `names.overlaps`) and stand in its way. The Python form of the conditions
    `leases.tree.conflict_free` checks in SQL (tests/lease_tree/test_places.py holds the two
    together), so a place counts the whole queue: a waiter for `src/auth/login.py` behind an
    exclusive waiter for `src/` is second, though first on its own node."""
    ordered = sorted(waiters, key=lambda w: w.pk)
    by_top: dict[str, list[Waiter]] = {}
    answer = []
    for waiter in ordered:
        # Only nodes that share the first segment can be on one line (`names.top_of`).
        earlier = by_top.setdefault(names.top_of(waiter.node), [])
        ahead = sum(
            1
            for other in earlier
            if names.overlaps(other.node, waiter.node) and _in_the_way(waiter, other)
        )
        earlier.append(waiter)
        answer.append(
            InLine(
                id=waiter.pk,
                resource=waiter.resource,
                node=waiter.node,
                holder=waiter.holder,
                process_id=waiter.process_id,
                mode=waiter.mode,
                queued_at=waiter.queued_at,
                place=ahead + 1,
            )
        )
    return answer


def waiting(*, workspace_id: int) -> list[Waiter]:
    """The oldest `LINE_LIMIT + 1` waiters still in the queue (one more: whether there are more);
    a waiter whose refreshes stopped has left it (`WAITER_TTL_S`)."""
    rows = Waiter.objects.filter(workspace_id=workspace_id, expires_at__gt=now_expression())
    return list(rows.order_by("id")[: LINE_LIMIT + 1])


def line(*, workspace_id: int, resource: str | None = None) -> list[dict[str, Any]]:
    """The oldest `LINE_LIMIT` waiters still in the queue (of one resource's line of the tree,
    or all), each with its place in the whole queue (`places`)."""
    ranked = places(waiting(workspace_id=workspace_id)[:LINE_LIMIT])
    if resource is not None:
        node = names.node_of(resource)
        ranked = [w for w in ranked if names.overlaps(w.node, node)]
    return [w.fields() for w in ranked]
