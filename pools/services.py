"""Pools: create one, and take one free member of it (or be told who holds each).

A member's tenure is an ordinary resource lease named `pool/<pool>/<member>` (`pools.models`);
once granted it is renewed, released, checked and broken through the resource calls like any
other. What is the pool's own is the grant:

1. The holder's own member first: a hand that already holds a member of this pool with this
   process identity (and has not lost it) asking again is renewed and keeps its fence, as a
   second acquire of a resource renews. Another process of the same hand is another tenant and
   takes another member (two workers of one hand each need their own port).
2. Else the lowest free member, in one conditional statement (`take_member`): the outer WHERE
   checking again that it is free; fence + 1 on the database's clock.
3. Else, members whose holder is lost but whose end nobody has recorded yet are freed with
   `leases.engine.expire` and their `lease_expired` written (`leases.services.record_expiry`)
   in the same transaction, then the take runs again: every tenure has its end in the log.
4. Nothing free: `lease_held` naming every member's holder, fence, state and window.

Every grant writes `lease_acquired` (with `pool` and `member`) in its transaction.

Lock order: the transaction first locks every member's row, in id order (`lock_members`), and
only then runs the steps, so nothing it does afterwards waits for a row lock. The steps lock
rows in an order of their own (a take, then the expiry of a lower member, then a take again):
three concurrent takes that each locked some of them met in a cycle, and PostgreSQL aborted one
with `deadlock detected`. Taking the whole pool's rows first serializes the takes of one pool
(each is a few statements on four to 256 rows); a member's renewal, release or break, which
locks its one row, waits for a take or is waited for, never both. Every other statement that
locks several lease rows takes them in id order too (`leases.engine`'s LOCK_ORDER), and a
conflict PostgreSQL reports anyway runs the take again (`apikit.retries`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, connection, transaction

from apikit import concealing
from apikit.errors import NotFound, ScopeDenied, ValidationFailed
from apikit.retries import retried
from hands.models import Workspace
from leases import engine, queue, tree
from leases.audit import refusals_recorded
from leases.engine import LeaseSnapshot
from leases.errors import LeaseHeld
from leases.models import Lease, LeaseKind
from leases.names import validate_resource
from leases.services import (
    MAX_NAME_LENGTH,
    lease_lost_in_s,
    record_expiry,
    record_grant,
    validate_name,
    validate_seconds,
)
from leases.waiting import subtree_channel, wait_in_line
from pools.errors import PoolExists
from pools.models import Pool, pool_node
from pools.selectors import member_json, member_of, members_sql, read_members

MAX_MEMBERS = 256
# Members a full pool's message names one by one; `members` in the refusal lists them all.
_NAMED_IN_MESSAGE = 5


# --- Names ---------------------------------------------------------------------------------------


def _segment(value: object, *, field: str, what: str) -> str:
    """A canonical resource name of one segment (no `/` at all) and at most 200 characters."""
    name = validate_resource(value, field=field)
    if "/" in name:
        raise ValidationFailed(
            f"{field} {name!r} holds a '/': a {what} is a single segment of a resource name",
            fields={field: [f"A single segment: no '/' (a {what} names one thing)."]},
        )
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationFailed(
            f"{field} is longer than {MAX_NAME_LENGTH} characters ({len(name)})",
            fields={field: [f"At most {MAX_NAME_LENGTH} characters."]},
        )
    return name


def validate_pool_name(value: object, *, field: str = "name") -> str:
    return _segment(value, field=field, what="pool's name")


def validate_members(members: object, capacity: object) -> list[str]:
    """The members as given (`members`), or `1`..`N` for a `capacity` N: exactly one of the two;
    1 to 256 canonical single segments, none twice."""
    if members is not None and capacity is not None:
        message = "give either members (a list of names) or capacity (a number), not both"
        raise ValidationFailed(message, fields={"members": [message], "capacity": [message]})
    if members is None and capacity is None:
        raise ValidationFailed(
            "give members (a list of names) or capacity (a number)",
            fields={"members": ["members or capacity is required."]},
        )
    if capacity is not None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise ValidationFailed(
                "capacity must be an integer", fields={"capacity": ["An integer."]}
            )
        if not 1 <= capacity <= MAX_MEMBERS:
            raise ValidationFailed(
                f"capacity must be between 1 and {MAX_MEMBERS}",
                fields={"capacity": [f"Between 1 and {MAX_MEMBERS}."]},
            )
        return [str(n) for n in range(1, capacity + 1)]
    if not isinstance(members, list) or not members or len(members) > MAX_MEMBERS:
        raise ValidationFailed(
            f"members must be a list of 1 to {MAX_MEMBERS} names",
            fields={"members": [f"A list of 1 to {MAX_MEMBERS} names."]},
        )
    names = [_segment(m, field=f"members[{i}]", what="member") for i, m in enumerate(members)]
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ValidationFailed(
                f"members[{i}] {name!r} is named twice: each member is one thing",
                fields={f"members[{i}]": ["Named twice."]},
            )
        seen.add(name)
    return names


# --- Creating a pool -----------------------------------------------------------------------------


@refusals_recorded
def pool_create(
    *,
    workspace: Workspace,
    name: str,
    members: list[str] | None = None,
    capacity: int | None = None,
    actor: str = "",
    caller_lane_id: int | None = None,
) -> tuple[Pool, bool]:
    """Create the pool and each member's lease row (free, fence 0), in one transaction; or
    return the existing pool of that name when its members are the same (created=False). The
    same name with other members is `pool_exists`: members never change under their holders.

    A member whose lease row exists already keeps it, and its fence: a fence never goes back."""
    if caller_lane_id is not None:
        raise ScopeDenied("a lane-limited key cannot create pools", required_scope="supervise")
    name = validate_pool_name(name)
    wanted = validate_members(members, capacity)
    for _ in range(2):  # a concurrent create of the same name: the second round finds it
        existing = Pool.objects.filter(workspace=workspace, name=name).first()
        if existing is not None:
            if existing.members != wanted:
                raise PoolExists(
                    f"a pool named {name!r} exists with other members "
                    f"({len(existing.members)}); pick another name",
                    pool=name,
                    members=existing.members,
                )
            return existing, False
        try:
            with transaction.atomic():
                pool = Pool.objects.create(
                    workspace=workspace, name=name, members=wanted, created_by=actor[:200]
                )
                resources = pool.resources()
                have = set(
                    Lease.objects.filter(
                        workspace_id=workspace.pk, resource__in=resources
                    ).values_list("resource", flat=True)
                )
                for resource in resources:
                    if resource not in have:
                        engine.create_free(
                            workspace_id=workspace.pk, resource=resource, kind=LeaseKind.RESOURCE
                        )
            return pool, True
        except IntegrityError:
            continue
    raise PoolExists(f"a pool named {name!r} is being created by another call", pool=name)


# --- Taking a member -----------------------------------------------------------------------------


def _caller(guard: engine.Guard | None) -> dict[str, str]:
    return guard.slots() if guard is not None else dict(engine.PARAMETER_CALLER)


def _one(sql: str, params: dict[str, Any]) -> LeaseSnapshot | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return engine.snapshot(row) if row else None


def renew_own_member(
    *,
    pool: Pool,
    holder: str,
    process_id: str,
    interval_s: float,
    guard: engine.Guard | None = None,
) -> LeaseSnapshot | None:
    """The member `holder` holds with `process_id` (not lost), renewed to now + `interval_s`,
    fence kept; None if it holds none. next_check_at stays (the engine's RENEWAL_NOTE)."""
    members, params = members_sql(pool)
    mine = "holder = {caller_holder} AND process_id = %(process_id)s AND {alive}"
    sql = engine.render(
        "UPDATE {table} SET interval_s = %(interval_s)s, grace_s = %(grace_s)s, "
        "renewed_at = {now}, deadline = {deadline_from_now}, noticed_state = 'live' "
        "WHERE id = (SELECT id FROM {table} WHERE workspace_id = {caller_workspace} "
        f"AND kind = 'resource' AND {members} AND {mine} ORDER BY id LIMIT 1) "
        f"AND {{table}}.workspace_id = {{caller_workspace}} AND {mine}{{caller_guard}} "
        "RETURNING {columns}, {now} AS server_time",
        **_caller(guard),
    )
    return _one(sql, _tenure_params(pool, holder, process_id, interval_s, params, guard))


def take_member(
    *,
    pool: Pool,
    holder: str,
    process_id: str,
    interval_s: float,
    guard: engine.Guard | None = None,
    ticket: queue.Ticket | None = None,
) -> LeaseSnapshot | None:
    """Take the lowest free member's lease in one statement: a new tenure, fence + 1.

    Run in the transaction that holds the members' locks (`lock_members`): the candidate is
    the lowest free one as this statement sees it, and the outer WHERE checks again that it is
    free. A lost member is not taken here: `expire_lost` frees
    it first, so that its end is recorded (`leases.engine.take` says why). Nor is one taken
    while a waiter of the pool that joined the line before `ticket` (every waiter, without one)
    still waits: first come, first served (`leases.queue`)."""
    members, params = members_sql(pool)
    params = {
        **params,
        **tree.tree_params(pool_node(pool.name)),
        "ticket": ticket.id if ticket is not None else tree.NO_TICKET,
    }
    # A waiter of the caller's own process is not ahead of it; another process's of its hand is
    # (a tenure is held by a process identity: `tree.mine`).
    ahead = (
        " AND ahead.id < %(ticket)s "
        f"AND NOT {tree.mine('{caller_holder}', '%(process_id)s', 'ahead.')}"
    )
    waiting = tree.waiting_on_line("{caller_workspace}", ahead)
    line_clear = "".join(f" AND NOT EXISTS ({select})" for select in waiting)
    sql = engine.render(
        "UPDATE {table} SET fence = fence + 1, acquired_at = {now}, status = 'held', "
        "holder = {caller_holder}, process_id = %(process_id)s, "
        "interval_s = %(interval_s)s, grace_s = %(grace_s)s, renewed_at = {now}, "
        "deadline = {deadline_from_now}, released_at = NULL, noticed_state = 'live', "
        "next_check_at = {deadline_from_now}, key_id = {caller_key} "
        "WHERE id = (SELECT id FROM {table} WHERE workspace_id = {caller_workspace} "
        f"AND kind = 'resource' AND {members} AND status = 'free' "
        "ORDER BY id LIMIT 1) "
        "AND {table}.workspace_id = {caller_workspace} "
        f"AND status = 'free'{line_clear}{{caller_guard}} "
        "RETURNING {columns}, {now} AS server_time",
        **_caller(guard),
    )
    return _one(sql, _tenure_params(pool, holder, process_id, interval_s, params, guard))


def lock_members(pool: Pool) -> None:
    """Lock every member's lease row, in id order, for the rest of the transaction (the
    module's lock order)."""
    members, params = members_sql(pool)
    with connection.cursor() as cursor:
        cursor.execute(
            engine.render(
                "SELECT id FROM {table} WHERE workspace_id = %(workspace_id)s "
                f"AND kind = 'resource' AND {members} ORDER BY id FOR UPDATE"
            ),
            {"workspace_id": pool.workspace_id, **params},
        )


def _tenure_params(
    pool: Pool,
    holder: str,
    process_id: str,
    interval_s: float,
    members: dict[str, Any],
    guard: engine.Guard | None,
) -> dict[str, Any]:
    return {
        "workspace_id": pool.workspace_id,
        "holder": holder,
        "process_id": process_id,
        "interval_s": float(interval_s),
        "grace_s": 0.0,
        "key_id": None,  # a key guard names the key the grant is taken with
        **members,
        **(guard.params if guard is not None else {}),
    }


def expire_lost(pool: Pool) -> list[LeaseSnapshot]:
    """Free every member whose holder is lost and record each end, once: `engine.expire` matches
    only a tenure nobody has ended yet (the sweep, or another take, may have)."""
    members, params = members_sql(pool)
    with connection.cursor() as cursor:
        cursor.execute(
            engine.render(
                "SELECT resource FROM {table} WHERE workspace_id = %(workspace_id)s "
                f"AND kind = 'resource' AND {members} AND status = 'held' AND {{free_or_lost}} "
                "ORDER BY id"
            ),
            {"workspace_id": pool.workspace_id, **params},
        )
        lost = [row[0] for row in cursor.fetchall()]
    expired = []
    for resource in lost:
        ended = engine.expire(workspace_id=pool.workspace_id, resource=resource)
        if ended is not None:
            record_expiry(ended)
            expired.append(ended)
    return expired


def full_error(
    pool: Pool, leases: list[LeaseSnapshot], standing: queue.Standing | None = None
) -> LeaseHeld:
    """The denial of a full pool: every member's holder, fence, state and window (`members`),
    and, as a resource's denial has them, the fields of the member whose window ends first. A
    holder the caller may not read (a hand of another lane) is named by nobody, nor its process
    (`apikit.concealing`)."""
    hidden = concealing.concealed(lease.holder for lease in leases)
    leases = [
        replace(lease, holder="", process_id="") if lease.holder in hidden else lease
        for lease in leases
    ]
    held = [lease for lease in leases if lease.held]
    soonest = min(held, key=lambda lease: lease.expires_in_s or 0.0) if held else None
    named = [
        f"{member_of(pool, lease.resource)} by "
        + (f"hand '{lease.holder}'" if lease.holder else concealing.ANOTHER_LANE)
        + f" (fence {lease.fence}, "
        f"{lease.state}, window ends in {max(lease.expires_in_s or 0.0, 0.0):.0f} s)"
        for lease in held[:_NAMED_IN_MESSAGE]
    ]
    more = len(held) - len(named)
    message = (
        f"pool {pool.name} is full ({len(held)} of {len(leases)} members held): "
        + "; ".join(named)
        + (f"; and {more} more" if more > 0 else "")
        + ": wait (wait_s), pick other work, or escalate"
    )
    fields: dict[str, Any] = {
        "pool": pool.name,
        "members": [member_json(pool, lease) for lease in leases],
    }
    if standing is not None:
        fields.update(standing.fields())
    if soonest is not None:
        if soonest.holder:  # unnamed, no holder at all (as a resource's denial)
            fields["holder"] = soonest.holder
        fields.update(
            fence=soonest.fence,
            expires_in_s=soonest.expires_in_s,
            lost_in_s=lease_lost_in_s(soonest),
            state=str(soonest.state),
            resource=soonest.resource,
        )
    return LeaseHeld(message, **fields)


def pool_get(*, workspace_id: int, name: object) -> Pool:
    """The workspace's pool of that name, or `not_found` (another workspace's is never
    described)."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH or "\x00" in name:
        raise NotFound(f"no pool named {name!r}")
    pool = Pool.objects.filter(workspace_id=workspace_id, name=name).first()
    if pool is None:
        raise NotFound(f"no pool named {name!r}")
    return pool


@refusals_recorded
@retried
def pool_acquire(
    *,
    workspace_id: int,
    name: str,
    holder: str,
    process_id: str,
    ttl_s: float,
    guard: engine.Guard | None = None,
    ticket: queue.Ticket | None = None,
) -> tuple[Pool, LeaseSnapshot]:
    """One member of pool `name` for `holder` (see the module's steps), unless waiters of the
    pool joined the line before `ticket`. With a `guard` every granting statement checks it too,
    and a grant it prevented raises what it explains."""
    pool = pool_get(workspace_id=workspace_id, name=name)
    validate_name(process_id, field="process_id")
    ttl_s = validate_seconds(ttl_s, field="ttl_s", minimum=1)
    options = {"pool": pool, "holder": holder, "process_id": process_id, "interval_s": ttl_s}
    leases: list[LeaseSnapshot] = []
    # Between a failed take and the read that explains it a member may free up; try again.
    for _ in range(3):
        with transaction.atomic():
            if guard is not None:
                guard.hold()  # LOCK_ORDER: the guard's rows before the members'
            lock_members(pool)
            renewed = renew_own_member(guard=guard, **options)
            if renewed is not None:
                return pool, renewed  # the holder's process asked again: a renewal, no event
            lease = take_member(guard=guard, ticket=ticket, **options)
            if lease is None:
                refusal = guard.explain() if guard is not None else None
                if refusal is not None:
                    raise refusal
                if expire_lost(pool):
                    lease = take_member(guard=guard, ticket=ticket, **options)
            if lease is not None:
                data = {
                    "ttl_s": ttl_s,
                    "process_id": process_id,
                    "pool": pool.name,
                    "member": member_of(pool, lease.resource),
                }
                return pool, record_grant(lease, ticket, data)
        leases = read_members(pool)
        held = [lease for lease in leases if lease.held]
        place = queue.standing(
            workspace_id=workspace_id,
            resource=pool_node(pool.name),
            holder=holder,
            process_id=process_id,
            mode="exclusive",
            ticket=ticket,
            in_the_way=held,
            first_free=True,
        )
        if len(held) == len(leases):
            raise full_error(pool, leases, place)
        if place.position > 1:
            raise LeaseHeld(
                f"pool {pool.name} has {len(leases) - len(held)} free member(s), but "
                f"{place.position - 1} waiting request(s) came first: wait in line (wait_s), or "
                "pick other work",
                pool=pool.name,
                members=[member_json(pool, lease) for lease in leases],
                **place.fields(),
            )
    raise full_error(pool, leases)


@refusals_recorded
def pool_acquire_waiting(
    *,
    workspace_id: int,
    name: str,
    holder: str,
    process_id: str,
    ttl_s: float,
    wait_s: float,
    guard: engine.Guard | None = None,
    permit: Callable[[], AbstractContextManager[object]] | None = None,
) -> tuple[Pool, LeaseSnapshot]:
    """`pool_acquire`, trying again until a member is granted or `wait_s` (0 to 60) has passed,
    as `leases.waiting.lease_acquire_waiting` does for a resource: on PostgreSQL it LISTENs on
    the pool's subtree (every release or break of `pool/<name>/<m>` notifies it), and it also
    wakes when the soonest member's window ends. Denials on the way are not refusals; a call
    that must wait first enters `permit()`."""
    acquire = pool_acquire.__wrapped__  # type: ignore[attr-defined]
    options = {
        "workspace_id": workspace_id,
        "name": name,
        "holder": holder,
        "process_id": process_id,
        "ttl_s": ttl_s,
        "guard": guard,
    }
    node = pool_node(name)
    return wait_in_line(
        lambda ticket: acquire(**options, ticket=ticket),
        wait_s=wait_s,
        place={
            "workspace_id": workspace_id,
            "resource": node,
            "holder": holder,
            "process_id": process_id,
            "mode": "exclusive",
        },
        channels=lambda: [subtree_channel(workspace_id=workspace_id, node=node)],
        permit=permit,
    )
