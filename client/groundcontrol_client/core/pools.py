"""A supervisor's calls about pools and the lines of waiters: pools made (a `supervise` key),
listed and read member by member (`leases` or `supervise`), and the requests waiting in line for
a resource (`wait_s` acquires). `Client` and `AsyncClient` both have them (`PoolCalls`):

    boss.pool_create("ports", members=["8001", "8002", "8003"])   # or capacity=3: 1, 2, 3
    for member in boss.pool("ports").members:
        print(member.member, member.state, member.holder)
    for waiter in boss.lease_queue("src/"):     # the waiters on src/'s line of the tree
        print(waiter.position, waiter.holder, waiter.resource)

A pool's members never change: creating one that exists with the same members answers it as it
is, with other members `pool_exists` (`PoolExists`, exit 1); so `pool_create` is safe to repeat. A
member is taken with `lease_from_pool` (`core.calls`) and renewed, checked and released as any
lease, by its `resource` (`pool/<pool>/<member>`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from urllib.parse import quote

from groundcontrol_client.core.errors import describe_holder, hand_called
from groundcontrol_client.core.sending import Sending, drop_none
from groundcontrol_client.core.steps import Steps, call
from groundcontrol_client.core.when import absolute, relative
from groundcontrol_client.core.wire import Number, OrDefault, Text, Time, WholeNumber, WireModel

FREE = "free"


class PoolMember(WireModel, title="pool's member"):
    """One member and its lease (`resource`, `pool/<pool>/<member>`): its `state` (live, late,
    stalled, lost or free), holder, process, fence and window (free: no holder, no window)."""

    member: Text
    resource: Text
    state: Text = FREE
    holder: Text | None = None
    process_id: Text | None = None
    fence: WholeNumber = 0
    expires_at: Time = None
    expires_in_s: Number | None = None


class PoolRecord(WireModel, title="pool"):
    """A pool: its members in the order they are handed out, `available` how many a take would
    grant now (free, or held by a lost holder), as of the server's `server_time`."""

    name: Text
    size: WholeNumber = 0
    available: WholeNumber = 0
    members: OrDefault[list[PoolMember]] = []
    created_at: Time = None
    created_by: Text | None = None
    server_time: Time = None


class Waiter(WireModel, title="waiter"):
    """A request waiting in line for `resource` (an acquire with `wait_s`): who (`holder`, None
    for a hand of another lane), `mode` (exclusive or shared), its `position` in the queue (1 +
    the waiters ahead of it on its line of the tree that conflict with it; 1: next), queued
    since `queued_at`."""

    resource: Text
    holder: Text | None = None
    mode: Text = "exclusive"
    position: WholeNumber
    queued_at: Time = None


def pool_record_path(name: str) -> str:
    """`pools/<name>`, the name quoted as one path segment."""
    return f"pools/{quote(name, safe='')}"


# --- sentences: how gctl says a pool and a line -----------------------------------------------


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def describe_pool_record(pool: PoolRecord) -> str:
    """e.g. "pool ports: 3 members, 2 free now (8001, 8002, 8003)"."""
    names = ", ".join(m.member for m in pool.members)
    return f"pool {pool.name}: {_count(pool.size, 'member')}, {pool.available} free now" + (
        f" ({names})" if names else ""
    )


def describe_member(member: PoolMember) -> str:
    """e.g. "8001: held by hand a (fence 2), renewing; its current window ends in 40 s (process
    host:812)", "8002: free (fence 1)", "8003: lost by hand b (fence 4): the next take gets it"."""
    if member.state == FREE:
        return f"{member.member}: free (fence {member.fence})"
    if member.state == "lost":
        return (
            f"{member.member}: lost by {hand_called(member.holder)} (fence {member.fence}): the "
            "next take gets it"
        )
    held = describe_holder(member.raw)
    process = f" (process {member.process_id})" if member.process_id else ""
    return f"{member.member}: held by {held}{process}"


def describe_pool_members(pool: PoolRecord, now: datetime) -> str:
    """The pool in a line (who made it, when), then each member on its own, in the pool's
    order."""
    made = []
    if pool.created_by:
        made.append(f"by {hand_called(pool.created_by)}")
    if pool.created_at is not None:
        made.append(f"{relative(pool.created_at, now)} ({absolute(pool.created_at)})")
    head = describe_pool_record(pool) + (f"; made {' '.join(made)}" if made else "")
    return "\n".join([head, *(f"  {describe_member(m)}" for m in pool.members)])


def describe_waiter(waiter: Waiter, now: datetime) -> str:
    """e.g. "src/auth/: hand b is next in line (exclusive), waiting since 40 s ago
    (2030-01-01 10:20:36 UTC)"."""
    place = "next in line" if waiter.position == 1 else f"number {waiter.position} in line"
    text = f"{waiter.resource}: {hand_called(waiter.holder)} is {place} ({waiter.mode})"
    if waiter.queued_at is not None:
        text += f", queued {relative(waiter.queued_at, now)} ({absolute(waiter.queued_at)})"
    return text


class PoolCalls(Sending):
    """Pools and the lines of waiters, as steps (`core.steps`); `Client` and `AsyncClient` have
    them."""

    @call
    def pools(self) -> Steps[list[PoolRecord]]:
        """The workspace's pools, each member with its lease as the server saw it."""
        items = yield from self._list("pools")
        return [PoolRecord.from_wire(item) for item in items]

    @call
    def pool(self, name: str) -> Steps[PoolRecord]:
        """One pool (`not_found` if there is none of that name)."""
        return PoolRecord.from_wire((yield from self._request("GET", pool_record_path(name))))

    @call
    def pool_create(
        self,
        name: str,
        *,
        members: Iterable[str] | None = None,
        capacity: int | None = None,
    ) -> Steps[PoolRecord]:
        """A pool of `members` (single segments, handed out in this order), or of `capacity`
        members named 1 to N: give one of the two. The same name with the same members answers
        the pool as it is; with other members, `PoolExists`. Safe to repeat."""
        body = drop_none(
            {
                "name": name,
                "members": None if members is None else list(members),
                "capacity": None if capacity is None else int(capacity),
            }
        )
        return PoolRecord.from_wire((yield from self._request("POST", "pools", json=body)))

    @call
    def lease_queue(self, resource: str | None = None) -> Steps[list[Waiter]]:
        """The requests waiting in line (acquires with `wait_s`), oldest first: every line, or
        only those on `resource`'s line of the tree (the names above it and below it)."""
        items = yield from self._list("leases/queue", drop_none({"resource": resource}))
        return [Waiter.from_wire(item) for item in items]
