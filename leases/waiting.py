"""`wait_s` on acquire: hold the request until the resource frees or the wait ends.

The waiter never hammers the database:

1. On PostgreSQL it LISTENs on the resource's channel before its first try, so a release or
   break that commits after that try (and NOTIFYs in its transaction, `notify_freed`) wakes it
   at once; elsewhere it backs off (50 ms doubling to 1 s).
2. A holder that simply goes quiet frees the resource without any write (its state is computed
   from its deadline), so the waiter also wakes when the denial said the holder's time runs out.
3. Every try is the engine's one conditional statement, which computes the new deadline from the
   database's clock at the moment it grants: a waiter is never handed a lease that has already
   expired, however long it waited.

Only the final answer counts as the call's: tries denied on the way are not refusals.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections

from apikit import reads
from leases import names, queue
from leases.audit import refusals_recorded
from leases.engine import Guard, LeaseSnapshot
from leases.errors import LeaseHeld

logger = logging.getLogger(__name__)

MAX_WAIT_S = 60
T = TypeVar("T")
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0
# Past its deadline a resource lease (grace 0) is lost; look a moment after, not exactly at it.
_EXPIRY_MARGIN_S = 0.02
# Even while listening, look again at least this often (a NOTIFY lost with a dropped connection).
_LISTEN_MAX_S = 5.0


def _channel(kind: str, workspace_id: int, node: str) -> str:
    """A PostgreSQL channel name (an identifier, at most 63 bytes)."""
    digest = hashlib.sha1(f"{workspace_id}\0{node}".encode(), usedforsecurity=False)
    return f"gc_{kind}_{digest.hexdigest()}"


def node_channel(*, workspace_id: int, node: str) -> str:
    """Notified when a lease on `node` itself frees."""
    return _channel("node", workspace_id, node)


def subtree_channel(*, workspace_id: int, node: str) -> str:
    """Notified when a lease on `node` or on any node below it frees (a pool's waiters listen
    on the pool's node)."""
    return _channel("tree", workspace_id, node)


def freed_channels(*, workspace_id: int, resource: str) -> list[str]:
    """Every channel a freed `resource` notifies: its node's, and the subtree of the node and of
    each of its ancestors."""
    node = names.node_of(resource)
    return [
        node_channel(workspace_id=workspace_id, node=node),
        *(
            subtree_channel(workspace_id=workspace_id, node=above)
            for above in (*names.ancestors_of(node), node)
        ),
    ]


def waiting_channels(*, workspace_id: int, resource: str) -> list[str]:
    """The channels a waiter on `resource` listens on: whatever could be in its way frees on
    one of them (its node or a node below it, or a node above it)."""
    node = names.node_of(resource)
    return [
        subtree_channel(workspace_id=workspace_id, node=node),
        *(
            node_channel(workspace_id=workspace_id, node=above)
            for above in names.ancestors_of(node)
        ),
    ]


def notify_freed(*, workspace_id: int, resource: str) -> None:
    """Wake the waiters that `resource` was in the way of; call inside the transaction that
    frees it (PostgreSQL delivers the notification at commit, so nobody wakes for a change that
    rolls back)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(name, '') FROM unnest(%s::text[]) AS name",
            [freed_channels(workspace_id=workspace_id, resource=resource)],
        )


# `wait(pause, backoff)`: True when a notification ended it, False when its time ran out.
Waiter = Callable[[float, float], bool]


def _sleep(pause: float, backoff: float) -> bool:
    time.sleep(max(0.0, min(pause, backoff)))
    return False


@contextmanager
def listening(channels: list[str]) -> Iterator[Waiter]:
    """A wait, `wait(pause, backoff)`, that ends early when one of `channels` is notified (inside
    a transaction it sleeps `min(pause, backoff)`); it says whether a notification ended it.

    It listens on the direct connection when there is one (`DATABASE_DIRECT_URL`: behind a
    transaction pooler a LISTEN would stay on whichever server connection ran it, and its
    notifications would wake some other client or nobody); a direct connection that cannot
    listen leaves the wait polling, with its backoff."""
    # Inside a transaction notifications arrive only after it ends: poll instead.
    if connection.in_atomic_block:
        yield _sleep
        return
    db = connections[reads.direct_alias()]
    try:
        with db.cursor() as cursor:
            for name in channels:
                cursor.execute(f'LISTEN "{name}"')
    except DatabaseError:
        if db.alias == DEFAULT_DB_ALIAS:
            raise
        logger.warning("the direct connection cannot LISTEN; the wait polls", exc_info=True)
        yield _sleep
        return
    pg = db.connection

    def wait(pause: float, backoff: float) -> bool:
        # On the raw connection: Django's wrapper makes a connection that dies meanwhile (a
        # primary gone) its OperationalError, answered 503, and marks the connection for closing.
        with connection.wrap_database_errors:
            for _ in pg.notifies(timeout=max(0.0, min(pause, _LISTEN_MAX_S)), stop_after=1):
                return True
        return False

    try:
        yield wait
    finally:
        try:
            with db.cursor() as cursor:
                for name in channels:
                    cursor.execute(f'UNLISTEN "{name}"')
        except DatabaseError:  # the connection is gone; so is its LISTEN
            pass


@refusals_recorded
def lease_acquire_waiting(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    ttl_s: float,
    wait_s: float,
    mode: str = "exclusive",
    guard: Guard | None = None,
    permit: Callable[[], AbstractContextManager[object]] | None = None,
    take_over: bool = False,
    grant_missed: bool = False,
    ticket: int | None = None,
) -> LeaseSnapshot:
    """`lease_acquire` (and its `take_over`), trying again until granted or `wait_s` (0 to 60)
    has passed (`grant_missed`: said of the first try, see `lease_acquire`); with `ticket` (a
    denial's), from the place in line it names, if it is still kept (`queue.resume`). `guard`
    (the caller's key, say) is checked by every try's granting statement: whatever happened to
    the caller while it waited, the grant is judged at the instant it is made. A call that must
    wait first enters `permit()` (which may refuse it: leasing/waits.py), and holds it until it
    ends; one granted on its first try needs none."""
    # Imported here: leases.services imports this module for notify_freed.
    from leases.services import lease_acquire

    # The undecorated service: a denial on the way is not the call's answer, so not a refusal.
    acquire = lease_acquire.__wrapped__  # type: ignore[attr-defined]
    options = {
        "workspace_id": workspace_id,
        "resource": resource,
        "holder": holder,
        "process_id": process_id,
        "ttl_s": ttl_s,
        "mode": mode,
        "guard": guard,
        "take_over": take_over,
    }
    return wait_in_line(
        lambda ticket: acquire(
            **options, ticket=ticket, grant_missed=grant_missed and ticket is None
        ),
        wait_s=wait_s,
        place={
            "workspace_id": workspace_id,
            "resource": resource,
            "holder": holder,
            "process_id": process_id,
            "mode": mode,
        },
        channels=lambda: waiting_channels(workspace_id=workspace_id, resource=resource),
        permit=permit,
        ticket=ticket,
    )


def wait_in_line(
    attempt: Callable[[queue.Ticket | None], T],
    *,
    wait_s: float,
    place: dict[str, Any],
    channels: Callable[[], list[str]],
    permit: Callable[[], AbstractContextManager[object]] | None = None,
    ticket: int | None = None,
) -> T:
    """`attempt(ticket)` (which raises `LeaseHeld` when denied) until it grants or `wait_s` has
    passed: first without a place (or from the place `ticket` names, if it is still kept); then
    with a place in the line (`queue.join(**place)`), kept while it waits, waking when one of
    `channels()` is notified (asked once the first try has validated the call), when the
    denial says the way may clear (`expires_in_s`), and at least twice per waiter TTL. A wait
    that ends denied keeps its place for `queue.TICKET_KEEP_S` and says so in the denial
    (`ticket`, `ticket_kept_s`); one that ends otherwise gives it up."""
    from leases.services import validate_seconds

    wait_s = validate_seconds(wait_s, field="wait_s", minimum=0, maximum=MAX_WAIT_S)
    give_up_at = time.monotonic() + wait_s
    place_kept = queue.resume(ticket, **place) if ticket is not None else None
    if place_kept is None:
        try:
            return attempt(None)
        except LeaseHeld:
            if wait_s == 0:
                raise
    backoff = _BACKOFF_START_S
    with (
        permit() if permit is not None and wait_s > 0 else nullcontext(),
        # Listening before the next try: a release committed after it wakes the wait.
        listening(channels()) as wait,
    ):
        held = place_kept if place_kept is not None else queue.join(**place)
        served = kept = False
        try:
            while True:
                try:
                    granted = attempt(held)
                    served = True
                    return granted
                except LeaseHeld as denied:
                    remaining = give_up_at - time.monotonic()
                    if remaining <= 0:
                        _step_aside(held, **place)
                        kept = True
                        denied.fields.update(ticket=held.id, ticket_kept_s=queue.TICKET_KEEP_S)
                        raise
                    queue.stay(held)
                    remaining = min(remaining, queue.WAITER_TTL_S / 2)
                    expires_in = denied.fields.get("expires_in_s")
                    if isinstance(expires_in, int | float):
                        remaining = min(remaining, max(expires_in, 0.0) + _EXPIRY_MARGIN_S)
                    wait(remaining, backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX_S)
        finally:
            if not served and not kept:
                _leave(held, workspace_id=place["workspace_id"], resource=place["resource"])


def _step_aside(ticket: queue.Ticket, *, workspace_id: int, resource: str, **_: Any) -> None:
    """The wait ended denied: its place is kept, dormant (`queue.keep`), and those behind it are
    woken, since it keeps them out no longer; a database gone meanwhile leaves the row to stop
    counting by itself (`queue.WAITER_TTL_S`)."""
    try:
        queue.keep(ticket)
        notify_freed(workspace_id=workspace_id, resource=resource)
    except DatabaseError:
        pass


def _leave(ticket: queue.Ticket, *, workspace_id: int, resource: str) -> None:
    """Out of the queue, waking those behind; a database gone meanwhile leaves the row to expire
    by itself (`queue.WAITER_TTL_S`)."""
    try:
        if queue.leave(ticket):
            notify_freed(workspace_id=workspace_id, resource=resource)
    except DatabaseError:
        pass
