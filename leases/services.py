"""Resource leases: acquire, renew, release, break and check, with their events and refusals.

Each operation is one statement of `leases.engine`; this module adds validation, the event written
in the same transaction, and the precise refusal when the statement matched no row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from apikit import concealing
from apikit.errors import GroundControlError, NotFound, ValidationFailed
from apikit.retries import retried
from leases import engine, handoffs, names, nodes, queue, tree, verification
from leases.audit import record_event, refusals_recorded
from leases.engine import LeaseSnapshot
from leases.errors import (
    HandoffAnswered,
    HeldInOtherMode,
    LeaseHeld,
    LeaseLost,
    NotHolder,
    ProcessMismatch,
    StaleFence,
)
from leases.fences import stale_fence, validate_fence
from leases.models import (
    EventKind,
    FenceStatus,
    HandoffRequest,
    LeaseKind,
    LeaseMode,
    LeaseState,
)
from leases.names import MAX_RESOURCE_LENGTH, validate_resource
from leases.state import seconds_until, thresholds
from leases.waiting import notify_freed

MAX_TTL_S = 86_400
MAX_NAME_LENGTH = 200
MAX_REASON_LENGTH = 2000
MAX_INTERVAL_S = 86_400
# Control characters (C0, DEL, C1) have no place in a name; NUL breaks PostgreSQL text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A lone surrogate cannot be encoded for the database at all (only a JSON escape can send one).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Slot leases are the fleet's; a hand may not take one as a resource.
SLOT_PREFIX = "run/"
# Pool members (`names.POOL_TOP`) are taken through their pool, and `pool` would cover them all.
# (`run` stays an ordinary name, as it always was: slots are not resource leases, so a lease on
# `run` covers none of them.)


def validate_stored_resource(resource: object, *, field: str = "resource") -> str:
    """A name to find a lease by, canonical or not (`leases.names` says what canonical is): the
    rule names were taken under before they had to be canonical (non-empty, at most 512
    characters, no control character), so that a supervisor can still break such a lease."""
    if not isinstance(resource, str) or not resource:
        raise ValidationFailed(
            f"{field} must be a non-empty string", fields={field: ["This field is required."]}
        )
    if len(resource) > MAX_RESOURCE_LENGTH:
        raise ValidationFailed(
            f"{field} is longer than {MAX_RESOURCE_LENGTH} characters",
            fields={field: [f"At most {MAX_RESOURCE_LENGTH} characters."]},
        )
    if _CONTROL.search(resource) or _SURROGATE.search(resource):
        raise ValidationFailed(
            f"{field} contains a control character or a lone surrogate",
            fields={field: ["No NUL or other control characters, no lone surrogates."]},
        )
    return resource


def validate_seconds(
    value: object, *, field: str, minimum: float, maximum: float = MAX_TTL_S
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed(f"{field} must be a number", fields={field: ["A number."]})
    if not (minimum <= value <= maximum):
        raise ValidationFailed(
            f"{field} must be between {minimum:g} and {maximum:g}",
            fields={field: [f"Between {minimum:g} and {maximum:g}."]},
        )
    return float(value)


def validate_name(value: object, *, field: str, required: bool = True) -> str:
    if value is None or value == "":
        if required:
            raise ValidationFailed(
                f"{field} is required", fields={field: ["This field is required."]}
            )
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{field} must be a string", fields={field: ["A string."]})
    if len(value) > MAX_NAME_LENGTH or _CONTROL.search(value):
        raise ValidationFailed(
            f"{field} must be at most {MAX_NAME_LENGTH} printable characters",
            fields={field: [f"At most {MAX_NAME_LENGTH} printable characters."]},
        )
    return value


def validate_reason(value: object, *, field: str = "reason", required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise ValidationFailed(
                f"{field} is required", fields={field: ["This field is required."]}
            )
        return ""
    if not isinstance(value, str) or len(value) > MAX_REASON_LENGTH:
        raise ValidationFailed(
            f"{field} must be a string of at most {MAX_REASON_LENGTH} characters",
            fields={field: [f"At most {MAX_REASON_LENGTH} characters."]},
        )
    return value


def validate_flag(value: object, *, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(f"{field} must be true or false", fields={field: ["A boolean."]})
    return value


def validate_choice(value: object, *, field: str, choices: list[str]) -> str:
    if value not in choices:
        raise ValidationFailed(
            f"{field} must be one of {', '.join(choices)}",
            fields={field: [f"One of: {', '.join(choices)}."]},
        )
    return str(value)


def validate_interval(value: object, *, field: str, default: int, minimum: int) -> int:
    """A whole number of seconds up to a day (a heartbeat interval, a grace), or `default`."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(f"{field} must be an integer", fields={field: ["An integer."]})
    return int(validate_seconds(value, field=field, minimum=minimum, maximum=MAX_INTERVAL_S))


# What a hand denied by its own other process can do besides waiting.
OWN_HAND_ADVICE = (
    "wait, pick other work, or, if that process is gone or was this one, take it over "
    "(take_over: true); give each session its own key or process identity"
)


def own_hand(lease: LeaseSnapshot, asker: str | None) -> bool:
    """The tenure in the way is the asker's own hand's, held from another process."""
    return asker is not None and lease.holder == asker


# A harness session's process identity: `<harness>:<session id>` (`harnesses.formats` has one
# format for each of these names, and its sessions hold leases under them).
SESSION_HARNESSES = frozenset(
    {"claude-code", "codex", "gemini", "cursor", "opencode", "cline", "copilot"}
)
SESSION_ADVICE = (
    "wait, pick other work, or ask its holder to hand it over (gctl handoff RESOURCE --reason "
    "..., or POST /api/v1/leases/handoff)"
)


def session_of(process_id: str) -> str | None:
    """The session a harness's process identity names (`claude-code:abc`), else None."""
    harness, colon, session = process_id.partition(":")
    return session if colon and session and harness in SESSION_HARNESSES else None


def describe_holder(lease: LeaseSnapshot, *, asker: str | None = None) -> str:
    """Who holds it and what its numbers mean: `expires_in_s` is only the holder's current
    renewal window, which a live holder keeps pushing forward. Held by the `asker`'s own hand
    (from another process: its own tenures are never in its way), it says so, and which
    process. Held by a harness's session, which keeps it for as long as the session works, it
    says since when, and no window at all."""
    shared = " shared" if lease.mode == LeaseMode.SHARED else ""
    advice = "wait, pick other work, or escalate"
    session = session_of(lease.process_id)
    mine = own_hand(lease, asker)
    if session is not None and lease.state == LeaseState.LIVE:
        acquired = lease.acquired_at
        since = f" since {acquired.astimezone(UTC):%H:%M} UTC" if acquired else ""
        whose = "your own hand" if mine else "hand"
        return (
            f"{lease.resource} is held{shared} by session {session} of {whose} "
            f"'{lease.holder}'{since}, for its session (fence {lease.fence}): {SESSION_ADVICE}"
        )
    if mine:
        by = f"your own hand '{lease.holder}' in another process ({lease.process_id!r})"
        advice = OWN_HAND_ADVICE
    else:
        by = f"hand '{lease.holder}'" if lease.holder else concealing.ANOTHER_LANE
    who = f"{lease.resource} is held{shared} by {by} (fence {lease.fence})"
    window = lease.expires_in_s or 0.0
    lost_in = max(lease_lost_in_s(lease) or 0.0, 0.0)
    if lease.state == LeaseState.LIVE:
        return (
            f"{who}, renewing; its current window ends in {max(window, 0.0):.0f} s "
            f"(it is renewed while the holder works): {advice}"
        )
    return (
        f"{who}, {lease.state}: its renewal was due {max(-window, 0.0):.0f} s ago; it is lost "
        f"in {lost_in:.0f} s unless it renews: {advice}"
    )


def lease_lost_in_s(lease: LeaseSnapshot) -> float | None:
    """Seconds until the tenure is lost if its holder stops renewing now."""
    limits = lease.thresholds
    return seconds_until(limits.lost_at, lease.server_time) if limits else None


def held_error(
    lease: LeaseSnapshot,
    error: type[GroundControlError] = LeaseHeld,
    *,
    others: int = 0,
    standing: queue.Standing | None = None,
    asker: str | None = None,
) -> GroundControlError:
    """The denial that says which tenure is in the way, who holds it, its fence, mode, state,
    and for how long (rule 8), and how many others are in the way too. A tenure of the
    `asker`'s own hand (another process's) is named so, with `own_hand` and its `process_id`.
    A holder the caller may not read (a hand of another lane, to a lane-limited key) is named
    by nobody, nor its process (`apikit.concealing`): the sentence, the answer and the refusal
    recorded with it."""
    if lease.holder and concealing.shown(lease.holder) is None:
        lease = replace(lease, holder="", process_id="")
    also = f" (and {others} other lease{'s' if others != 1 else ''} in the way)" if others else ""
    mine = {"own_hand": True, "process_id": lease.process_id} if own_hand(lease, asker) else {}
    session = session_of(lease.process_id)
    if session is not None and lease.acquired_at is not None:
        # Held for a harness's session: who, and since when (its window says nothing of it).
        mine.update(session=session, since=lease.acquired_at.astimezone(UTC).isoformat())
    return error(
        describe_holder(lease, asker=asker) + also,
        **mine,
        # An unnamed holder is no `holder` at all: the refusal's record keeps these fields.
        **({"holder": lease.holder} if lease.holder else {}),
        fence=lease.fence,
        expires_in_s=lease.expires_in_s,
        lost_in_s=lease_lost_in_s(lease),
        state=str(lease.state),
        resource=lease.resource,
        mode=lease.mode,
        others=others,
        **(standing.fields() if standing is not None else {}),
    )


def other_mode_error(lease: LeaseSnapshot, *, asked: str) -> HeldInOtherMode:
    """The refusal of an acquire in mode `asked` by the process that holds `lease`, its tenure of
    the node in the other mode: a tenure keeps the mode it was granted in, so the acquire
    neither renews it (an answer in a mode not asked for) nor grants a second tenure beside it.
    Nothing is written: the tenure stays as it was."""
    return HeldInOtherMode(
        f"this process holds {lease.resource} {lease.mode} already (fence {lease.fence}), and a "
        f"tenure keeps its mode: an acquire {asked} renews nothing and grants nothing; release "
        f"fence {lease.fence}, then acquire it {asked} (or acquire it {lease.mode} to renew it)",
        resource=lease.resource,
        fence=lease.fence,
        mode=lease.mode,
        expires_in_s=lease.expires_in_s,
    )


def own_tenure(
    leases: list[LeaseSnapshot], *, holder: str, process_id: str
) -> LeaseSnapshot | None:
    """The tenure of the caller (`holder`'s process `process_id`) among `leases`, if any."""
    return next(
        (lease for lease in leases if (lease.holder, lease.process_id) == (holder, process_id)),
        None,
    )


def diagnose(
    lease: LeaseSnapshot | None,
    *,
    resource: str,
    holder: str,
    fence: int,
    process_id: str | None = None,
) -> GroundControlError:
    """Why a fenced statement on `resource` by `holder` at `fence` matched no row."""
    if lease is None:
        return NotFound(f"no lease on {resource!r}")
    stale = stale_fence(fence, lease.fence, repr(resource))
    if stale is not None:
        return stale
    if lease.holder != holder:
        return NotHolder(f"the lease on {resource!r} at fence {fence} belongs to another hand")
    if lease.state in (LeaseState.FREE, LeaseState.LOST):
        how = "was released" if lease.state == LeaseState.FREE else "is past its grace"
        return LeaseLost(f"the lease on {resource!r} at fence {fence} {how}", current_fence=fence)
    if process_id is not None and process_id != lease.process_id:
        return ProcessMismatch(
            f"another process ({lease.process_id!r}) holds the lease on {resource!r}"
        )
    return LeaseLost(f"the lease on {resource!r} at fence {fence} is no longer valid")


def taken_over(
    lease: LeaseSnapshot, *, holder: str, fence: int, process_id: str | None
) -> GroundControlError | None:
    """`lease_lost` when the tenure `fence` of `holder`'s process `process_id` was taken over:
    `lease` (the node's tenure now) is held by the same hand from another process at a later
    fence. None otherwise."""
    if (
        process_id is None
        or lease.holder != holder
        or lease.process_id == process_id
        or lease.fence <= fence
        or not lease.held
    ):
        return None
    return LeaseLost(
        f"the lease on {lease.resource!r} at fence {fence} is no longer this process's: your own "
        f"hand holds it from another process ({lease.process_id!r}) at fence {lease.fence} "
        "(taken over, or taken again after this tenure ended)",
        current_fence=lease.fence,
    )


def renewal_refusal(
    *, workspace_id: int, resource: str, holder: str, fence: int, process_id: str
) -> GroundControlError:
    """Why a renewal of `holder`'s tenure `fence` of `resource` by `process_id` matched no row:
    taken over by the hand's other process (`lease_lost`), else as `diagnose` says."""
    for lease in nodes.tenures(workspace_id=workspace_id, resource=resource):
        taken = taken_over(lease, holder=holder, fence=fence, process_id=process_id)
        if taken is not None:
            return taken
    return diagnose(
        tenure_or_node(workspace_id=workspace_id, resource=resource, fence=fence),
        resource=resource,
        holder=holder,
        fence=fence,
        process_id=process_id,
    )


def refuse_slot_resource(resource: str) -> None:
    """A run slot's lease is the fleet's: claimed, renewed and let go through its attempt, never
    through the resource calls (a holder releasing it so would leave the attempt lost with no
    event). Told apart whatever the case or surrounding space, so no look-alike is accepted."""
    if resource.strip().lower().startswith(SLOT_PREFIX):
        raise ValidationFailed(
            "resources under 'run/' are run slots: claim them through their run",
            fields={"resource": ["Names under 'run/' are reserved for run slots."]},
        )


def refuse_reserved_for_acquire(resource: str) -> None:
    """Names no hand takes directly: run slots (`run/...`), and a pool's members, taken through
    the pool, with `pool` above them all. Told apart whatever the case or surrounding space."""
    refuse_slot_resource(resource)
    if names.top_of(names.node_of(resource.strip())).lower() == names.POOL_TOP:
        raise ValidationFailed(
            "names under 'pool/' are pool members: take one through its pool "
            "(POST /api/v1/pools/{name}/acquire)",
            fields={"resource": ["Names under 'pool/' are pool members."]},
        )


def validate_acquire(
    *, resource: object, process_id: object, mode: object, ttl_s: object, take_over: object
) -> tuple[str, float, bool]:
    """An acquire's values, checked as every way of acquiring checks them: its mode, ttl_s and
    take_over as kept."""
    validate_resource(resource)
    refuse_reserved_for_acquire(resource)  # type: ignore[arg-type]
    validate_name(process_id, field="process_id")
    return (
        validate_choice(mode, field="mode", choices=list(LeaseMode.values)),
        validate_seconds(ttl_s, field="ttl_s", minimum=1),
        validate_flag(take_over, field="take_over"),
    )


def validate_renewal(*, resource: object, fence: object, process_id: object) -> None:
    """A renewal's values, checked as every way of renewing checks them."""
    validate_resource(resource)
    refuse_slot_resource(resource)  # type: ignore[arg-type]
    validate_fence(fence)
    validate_name(process_id, field="process_id")


@refusals_recorded
@retried
def lease_acquire(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    ttl_s: float,
    mode: str = LeaseMode.EXCLUSIVE,
    guard: engine.Guard | None = None,
    ticket: queue.Ticket | None = None,
    take_over: bool = False,
    grant_missed: bool = False,
) -> LeaseSnapshot:
    """Take `resource` in `mode` if no other holder's tenure on its line of the tree stands in
    the way, nor a waiter it conflicts with ahead of its `ticket` (fence + 1), or renew the
    caller's tenure of it. The holder is the hand's process: the same hand's tenure from another
    process is in the way like another hand's, unless `take_over`, which ends that tenure of the
    node (`lease_taken_over`) in the transaction that grants it anew. With a `guard` every
    granting statement also checks it, and a grant it prevented raises what it explains (a key
    revoked meanwhile: `key_revoked`). A denial says what is in the way and where the request
    stands in the queue.

    `grant_missed`: the caller's own statement (a hot call's, with its key check) tried this
    exclusive grant a moment ago and it matched nothing. The denial is then explained from one
    read of what stands in the way (`missed_grant_denial`); the steps below run only when that
    read shows what the statement does not do: the caller's own tenure of the node to renew, a
    lost tenure whose end must be recorded first, or the way cleared meanwhile."""
    mode, ttl_s, take_over = validate_acquire(
        resource=resource, process_id=process_id, mode=mode, ttl_s=ttl_s, take_over=take_over
    )
    if grant_missed:
        denial = missed_grant_denial(
            workspace_id=workspace_id, resource=resource, holder=holder, process_id=process_id
        )
        if denial is not None:
            raise denial
    options = {
        "workspace_id": workspace_id,
        "resource": resource,
        "holder": holder,
        "process_id": process_id,
        "interval_s": ttl_s,
        "grace_s": 0,
    }
    # Between a failed grant and the read that explains it the way may clear; try again.
    data: dict[str, object] = {"ttl_s": ttl_s, "process_id": process_id, "mode": str(mode)}
    for _ in range(3):
        with transaction.atomic():
            if guard is not None:
                guard.hold()  # LOCK_ORDER: the guard's rows, then the tree, then lease rows
            tree.lock_tree(workspace_id=workspace_id, resource=resource)
            renewed = engine.renew_holder(mode=mode, guard=guard, **options)
            if renewed is not None:
                return renewed  # the holder asked again: a renewal, not a state change
            # Every lost tenure on the line ends on record before anything is granted over it.
            freed = nodes.expire_tree(workspace_id=workspace_id, resource=resource)
            for expired in freed:
                record_expiry(expired)
            grant = partial(
                grant_tenure,
                mode=mode,
                guard=guard,
                ticket=ticket.id if ticket is not None else None,
                options=options,
            )
            if take_over:
                lease = take_over_and_grant(grant, data, **options)
            else:
                lease = grant()
            if lease is not None:
                return record_grant(lease, ticket, data)
            refusal = guard.explain() if guard is not None else None
            if refusal is not None:
                raise refusal
        in_the_way, count = nodes.conflicts(
            workspace_id=workspace_id,
            resource=resource,
            holder=holder,
            process_id=process_id,
            mode=mode,
        )
        if any(not lease.held for lease in in_the_way):
            continue  # lost since the expiry step (or in its way): the next try records its end
        # The caller's own tenure of the node (listed first): held in the other mode, which no
        # wait ends; or granted to its process meanwhile, which the next try renews.
        own = own_tenure(in_the_way, holder=holder, process_id=process_id)
        if own is not None:
            if own.mode == mode:
                continue
            raise other_mode_error(own, asked=mode)
        place = queue.standing(
            workspace_id=workspace_id,
            resource=resource,
            holder=holder,
            process_id=process_id,
            mode=mode,
            ticket=ticket,
            in_the_way=in_the_way,
        )
        if in_the_way:
            raise held_error(in_the_way[0], others=count - 1, standing=place, asker=holder)
        if place.position > 1:
            raise queued_error(
                workspace_id=workspace_id,
                resource=resource,
                holder=holder,
                process_id=process_id,
                mode=mode,
                ticket=ticket,
            )
    raise LeaseHeld(f"{resource} is changing hands too fast to take; try again", resource=resource)


def missed_grant_denial(
    *, workspace_id: int, resource: str, holder: str, process_id: str
) -> GroundControlError | None:
    """The denial of an exclusive grant that its statement just refused, from one read of what
    stands in the way (`queue.standing_in_the_way`): the caller's own tenure of the node held
    shared (`held_in_other_mode`), others' tenures, all still held, or waiters ahead. None when
    the read shows the caller's own exclusive tenure of the node, a lost one or nothing in the
    way: the statement renews nothing and records no end, so the service must."""
    in_the_way, in_all, place = queue.standing_in_the_way(
        workspace_id=workspace_id, resource=resource, holder=holder, process_id=process_id
    )
    own = own_tenure(in_the_way, holder=holder, process_id=process_id)
    if own is not None and own.held and own.mode != LeaseMode.EXCLUSIVE:
        return other_mode_error(own, asked=LeaseMode.EXCLUSIVE.value)
    if own is not None or any(not lease.held for lease in in_the_way):
        return None
    if in_the_way:
        return held_error(in_the_way[0], others=in_all - 1, standing=place, asker=holder)
    if place.position > 1:
        return _queued(resource, LeaseMode.EXCLUSIVE, place)
    return None


def queued_error(
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    mode: str,
    ticket: queue.Ticket | None,
) -> GroundControlError:
    """The denial of a request that only waiters stand in the way of: where it stands, behind
    the waiters and what they wait for (the tenures an exclusive taker would wait for)."""
    line_waits_for, _ = nodes.conflicts(
        workspace_id=workspace_id,
        resource=resource,
        holder=holder,
        process_id=process_id,
        mode=LeaseMode.EXCLUSIVE,
    )
    place = queue.standing(
        workspace_id=workspace_id,
        resource=resource,
        holder=holder,
        process_id=process_id,
        mode=mode,
        ticket=ticket,
        in_the_way=line_waits_for,
    )
    return _queued(resource, mode, place)


def _queued(resource: str, mode: str, place: queue.Standing) -> GroundControlError:
    waiting = place.position - 1
    return LeaseHeld(
        f"nothing held stands in the way of {resource}, but {waiting} waiting "
        f"request{'s' if waiting != 1 else ''} came first: wait in line (wait_s), or pick other "
        "work",
        resource=resource,
        mode=mode,
        **place.fields(),
    )


def grant_tenure(
    *, mode: str, guard: engine.Guard | None, ticket: int | None, options: dict[str, Any]
) -> LeaseSnapshot | None:
    """The granting statement of an acquire in `mode`: a shared tenure, or the node's row
    inserted or taken; None when something stands in the way."""
    if mode == LeaseMode.SHARED:
        return nodes.share(guard=guard, ticket=ticket, **options)
    return engine.insert(
        kind=LeaseKind.RESOURCE, guard=guard, ticket=ticket, **options
    ) or engine.take(guard=guard, ticket=ticket, **options)


def take_over_and_grant(
    grant: Callable[[], LeaseSnapshot | None],
    data: dict[str, object],
    *,
    workspace_id: int,
    resource: str,
    holder: str,
    process_id: str,
    **_: object,
) -> LeaseSnapshot | None:
    """`take_over: true`: end the tenures on the node's line that `holder` holds from another
    process (`engine.take_over`), then `grant()`, which takes the node at its next fence; each ended
    tenure's `lease_taken_over`, in the same transaction. When the grant is refused all the
    same (another hand, or a waiter, is in the way too) nothing was taken over: the ended
    tenures are rolled back with it. Never another hand's: the statement matches only the
    caller's hand's rows."""
    savepoint = transaction.savepoint()
    taken = engine.take_over(
        workspace_id=workspace_id, resource=resource, holder=holder, process_id=process_id
    )
    lease = grant()
    if lease is None:
        transaction.savepoint_rollback(savepoint)
        return None
    transaction.savepoint_commit(savepoint)
    for tenure in taken:
        record_event(
            workspace_id=workspace_id,
            kind=EventKind.LEASE_TAKEN_OVER,
            at=lease.server_time,
            actor=holder,
            hand=holder,
            resource=lease.resource,
            fence=lease.fence,
            data={
                "taken_resource": tenure.resource,
                "taken_fence": tenure.fence,
                "from_process_id": tenure.process_id,
                "process_id": process_id,
                "mode": tenure.mode,
            },
        )
    if taken:
        data["taken_over"] = [tenure.fence for tenure in taken]
    return lease


def record_grant(
    lease: LeaseSnapshot, ticket: queue.Ticket | None, data: dict[str, object]
) -> LeaseSnapshot:
    """A new tenure, in the transaction that granted it: out of the line if it waited, and its
    `lease_acquired` event (a resource's and a pool member's alike)."""
    lease = queue.served(ticket, lease)
    record_event(
        workspace_id=lease.workspace_id,
        kind=EventKind.LEASE_ACQUIRED,
        at=lease.server_time,
        actor=lease.holder,
        hand=lease.holder,
        resource=lease.resource,
        fence=lease.fence,
        data=data,
    )
    return lease


def record_expiry(lease: LeaseSnapshot) -> None:
    """`lease_expired` for the tenure `lease` held, as the sweep would have written it."""
    assert lease.deadline is not None
    record_event(
        workspace_id=lease.workspace_id,
        kind=EventKind.LEASE_EXPIRED,
        at=lease.server_time,
        actor="system",
        hand=lease.holder,
        resource=lease.resource,
        fence=lease.fence,
        data={
            "since": thresholds(lease.deadline, lease.grace_s).lost_at.isoformat(),
            "deadline": lease.deadline.isoformat(),
            "grace_s": lease.grace_s,
        },
    )


# The reason recorded for every tenure a revocation ends.
KEY_REVOKED_REASON = "key revoked"

# Sent by `key_tenures_end`, in its transaction, with `tenures` (the slot tenures it ended, as
# LeaseSnapshots), `actor` and `reason`: the layer above (fleet) ends the attempts on them there.
# This layer knows nothing of attempts; a receiver must not swallow an error (the transaction
# rolls back with it).
slot_tenures_ended = Signal()


def key_tenures_end(*, key_ids: list[int], actor: str) -> list[LeaseSnapshot]:
    """End, now, every live tenure taken with one of `key_ids` (keys revoked in the caller's
    transaction, whose rows its UPDATE holds): one statement per kind, each tenure with its
    event and the reason `key revoked`, its handoff requests answered, its waiters woken.

    A grant racing the revocation checks the key in its own statement and locks the key's row
    while it does (`hands.services.key_guard`, FOR SHARE), which the revocation's UPDATE of that
    row waits for, or the other way round: either the grant commits first and its tenure is one
    this statement (a later snapshot) ends, or it waits, sees the key revoked, and grants nothing.
    """
    if not key_ids:
        return []
    key_ids = sorted(set(key_ids))
    reason = KEY_REVOKED_REASON
    resources = engine.end_by_keys(key_ids=key_ids, kind=LeaseKind.RESOURCE)
    for lease in resources:
        record_event(
            workspace_id=lease.workspace_id,
            kind=EventKind.LEASE_RELEASED,
            at=lease.server_time,
            actor=actor,
            hand=lease.holder,
            resource=lease.resource,
            fence=lease.fence,
            data={"reason": reason},
        )
        notify_freed(workspace_id=lease.workspace_id, resource=lease.resource)
    slots = engine.end_by_keys(key_ids=key_ids, kind=LeaseKind.SLOT)
    for ended in (resources, slots):
        if ended:
            handoffs.handoffs_close(
                ended, at=ended[0].server_time, actor=actor, ended_by="released"
            )
    if slots:
        slot_tenures_ended.send(sender=None, tenures=slots, actor=actor, reason=reason)
    return [*resources, *slots]


@refusals_recorded
@retried
def lease_renew(
    *, workspace_id: int, resource: str, holder: str, fence: int, process_id: str
) -> LeaseSnapshot:
    """Push the tenure's deadline to now + its ttl_s (refused, and said why, when the statement
    matches nothing: `renewal_refusal`)."""
    validate_renewal(resource=resource, fence=fence, process_id=process_id)
    lease = engine.renew(
        workspace_id=workspace_id,
        resource=resource,
        holder=holder,
        fence=fence,
        process_id=process_id,
    )
    if lease is None:
        raise renewal_refusal(
            workspace_id=workspace_id,
            resource=resource,
            holder=holder,
            fence=fence,
            process_id=process_id,
        )
    return lease


# A renew-all's `held`: the tenures the caller believes it holds, at most this many.
MAX_HELD = 500


@dataclass(frozen=True)
class NotRenewed:
    """A tenure a renew-all did not renew: `resource` and `fence` name it, `lease` is its row
    as it stands (or the node's, once it moved on; None when the name was never leased), and
    `error` says why, in the words a renewal of it would have had."""

    resource: str
    fence: int
    lease: LeaseSnapshot | None
    error: GroundControlError


@dataclass(frozen=True)
class RenewedAll:
    """What one renew-all did: the leases it renewed, and those the process had lost."""

    renewed: list[LeaseSnapshot]
    lost: list[NotRenewed]


def validate_held(value: object) -> list[tuple[str, int]]:
    """A renew-all's `held`: a list of `{resource, fence}` (at most `MAX_HELD`)."""
    if not isinstance(value, list) or len(value) > MAX_HELD:
        raise ValidationFailed(
            f"held must be a list of at most {MAX_HELD} {{resource, fence}}",
            fields={"held": [f"A list of at most {MAX_HELD} {{resource, fence}}."]},
        )
    held = []
    for item in value:
        if not isinstance(item, Mapping):
            raise ValidationFailed(
                "held lists {resource, fence} objects", fields={"held": ["{resource, fence}."]}
            )
        try:
            resource = validate_resource(item.get("resource"), field="resource")
            refuse_slot_resource(resource)  # a renew-all renews resource leases only
            fence = validate_fence(item.get("fence"))
        except ValidationFailed as refused:
            raise ValidationFailed(
                f"held: {refused.message}", fields={"held": [refused.message]}
            ) from None
        held.append((resource, fence))
    return held


def lost_of(lease: LeaseSnapshot, holder: str) -> NotRenewed:
    """A tenure the process holds on paper but has lost, explained as a renewal of it would be
    (the same words as `lease_renew`'s refusal)."""
    error = diagnose(lease, resource=lease.resource, holder=holder, fence=lease.fence)
    return NotRenewed(resource=lease.resource, fence=lease.fence, lease=lease, error=error)


@refusals_recorded
@retried
def lease_renew_all(
    *, workspace_id: int, holder: str, process_id: str, held: object = None
) -> RenewedAll:
    """Renew every live resource lease `holder` holds with `process_id`, in one statement (a
    renewal is no event); say which ones it still holds on paper but has lost. A lease broken,
    released or taken over is the process's no longer, so it is in neither list, unless the
    caller names it in `held` (the tenures it believes it holds, `{resource, fence}` each): then
    each of those not renewed is in `lost` with its reason (`held_not_renewed`)."""
    validate_name(process_id, field="process_id")
    scope = {"workspace_id": workspace_id, "holder": holder, "process_id": process_id}
    return renewed_all(
        **scope,
        renewed=engine.renew_all(**scope),
        lost=engine.held_lost(**scope),
        held=validate_held(held) if held is not None else [],
    )


def renewed_all(
    *,
    workspace_id: int,
    holder: str,
    process_id: str,
    renewed: list[LeaseSnapshot],
    lost: list[LeaseSnapshot],
    held: list[tuple[str, int]],
) -> RenewedAll:
    """A renew-all's answer, from what its statement renewed and found lost (the same for every
    way of renewing all: this service's and the hot call's, leasing/hot.py): the lost ones and
    each tenure of `held` in neither list explained as a renewal of it would be, each list in
    order."""
    not_renewed = [lost_of(lease, holder) for lease in lost]
    answered = {(names.node_of(lease.resource), lease.fence) for lease in renewed} | {
        (names.node_of(item.resource), item.fence) for item in not_renewed
    }
    not_renewed += _held_not_renewed(
        workspace_id=workspace_id,
        holder=holder,
        process_id=process_id,
        held=held,
        answered=answered,
    )
    return RenewedAll(
        renewed=sorted(renewed, key=lambda lease: lease.resource),
        lost=sorted(not_renewed, key=lambda item: (item.resource, item.fence)),
    )


def _held_not_renewed(
    *,
    workspace_id: int,
    holder: str,
    process_id: str,
    held: list[tuple[str, int]],
    answered: set[tuple[str, int]],
) -> list[NotRenewed]:
    """Each tenure of `held` not `answered` (renewed or found lost), with the reason a renewal
    of it would have been refused (taken over by the hand's other process: `lease_lost`), read
    from the lease as it stands."""
    explained = []
    for resource, fence in dict.fromkeys(held):
        if (names.node_of(resource), fence) in answered:
            continue
        answered.add((names.node_of(resource), fence))
        now = tenure_or_node(workspace_id=workspace_id, resource=resource, fence=fence)
        error = renewal_refusal(
            workspace_id=workspace_id,
            resource=resource,
            holder=holder,
            fence=fence,
            process_id=process_id,
        )
        explained.append(NotRenewed(resource=resource, fence=fence, lease=now, error=error))
    return explained


@refusals_recorded
@retried
def lease_release(
    *, workspace_id: int, resource: str, holder: str, fence: int, process_id: str | None = None
) -> LeaseSnapshot:
    """End the tenure; a retried release of the same tenure answers as the first did. With
    `process_id`, only that process's tenure: the hand's other process is refused
    (`process_mismatch`), as it would be in the way of an acquire (take it over instead)."""
    validate_resource(resource)
    refuse_slot_resource(resource)
    validate_fence(fence)
    if process_id is not None:
        validate_name(process_id, field="process_id")
    with transaction.atomic():
        lease = engine.release(
            workspace_id=workspace_id,
            resource=resource,
            holder=holder,
            fence=fence,
            process_id=process_id,
        )
        if lease is not None:
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.LEASE_RELEASED,
                at=lease.server_time,
                actor=holder,
                hand=holder,
                resource=resource,
                fence=fence,
            )
            # Its handoff requests are answered in this transaction: released.
            handoffs.handoffs_close(
                [lease], at=lease.server_time, actor=holder, ended_by="released"
            )
            notify_freed(workspace_id=workspace_id, resource=resource)
            return lease
    current = tenure_or_node(workspace_id=workspace_id, resource=resource, fence=fence)
    if (
        current is not None
        and current.fence == fence
        and current.holder == holder
        and current.released_at is not None
        and current.state == LeaseState.FREE
        and (process_id is None or current.process_id == process_id)
    ):
        return current
    raise diagnose(current, resource=resource, holder=holder, fence=fence, process_id=process_id)


def tenure_or_node(*, workspace_id: int, resource: str, fence: int) -> LeaseSnapshot | None:
    """The row of the node's tenure `fence` if it still has one, else the node's row (whose
    fence has moved past it): what explains a fenced call that matched nothing."""
    return nodes.read_tenure(
        workspace_id=workspace_id, resource=resource, fence=fence
    ) or engine.read(workspace_id=workspace_id, resource=resource)


@refusals_recorded
def lease_check(*, workspace_id: int, resource: str, fence: int) -> LeaseSnapshot:
    """Is `fence` a current, unlost tenure of `resource`? For storage that applies a write only
    after asking (rule 5). A shared tenure stays current while it is held, though later shared
    grants have taken later fences."""
    validate_resource(resource)
    refuse_slot_resource(resource)
    validate_fence(fence)
    found = verification.standing(workspace_id=workspace_id, resource=resource, fence=fence)
    if found.status == FenceStatus.CURRENT:
        assert found.tenure is not None
        return found.tenure
    node = found.node
    if node is None:
        raise NotFound(f"no lease on {resource!r}")
    if found.tenure is None or node.fence > fence:
        raise StaleFence(
            f"fence {fence} is not the current fence {node.fence} of {resource!r}",
            current_fence=node.fence,
        )
    raise LeaseLost(f"the lease on {resource!r} at fence {fence} has ended", current_fence=fence)


@refusals_recorded
@retried
def lease_break(
    *,
    workspace_id: int,
    resource: str,
    actor: str,
    reason: str,
    handoff: HandoffRequest | None = None,
) -> LeaseSnapshot:
    """A supervisor frees `resource` at once, ending every tenure of its node (exclusive or
    shared); its fence moves on so each old holder is stale. Any name a lease may hold will do,
    canonical or not (one taken before names had to be).

    The open handoff requests on the tenures it ends are answered `released` (ended by a
    break), or, for `handoff`, `granted`: then the break must end that request's tenure, or
    nothing is broken (`handoff_answered`)."""
    validate_stored_resource(resource)
    with transaction.atomic():
        # After any grant of the node in flight (it holds the node's lock until it commits), so
        # the break ends the tenure that grant made too.
        tree.lock_tree(workspace_id=workspace_id, resource=resource)
        broken = nodes.break_(workspace_id=workspace_id, resource=resource)
        if broken is None:
            raise NotFound(f"no held lease on {resource!r}")
        for tenure in broken.tenures:
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.LEASE_BROKEN,
                at=broken.node.server_time,
                actor=actor,
                hand=tenure.holder,
                resource=tenure.resource,
                fence=broken.node.fence,
                data={"reason": reason, "broken_fence": tenure.fence, "mode": tenure.mode},
            )
        granted = handoffs.handoffs_close(
            broken.tenures,
            at=broken.node.server_time,
            actor=actor,
            ended_by="broken",
            granted=handoff.pk if handoff is not None else None,
            answer=reason,
        )
        if handoff is not None and handoff.pk not in granted:
            # The tenure asked about ended before this break; another one is not the grant's.
            raise HandoffAnswered(
                f"handoff request {handoff.pk} is no longer open: its tenure of "
                f"{handoff.resource!r} at fence {handoff.fence} has ended"
            )
        notify_freed(workspace_id=workspace_id, resource=resource)
    return broken.node
