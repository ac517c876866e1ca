"""Handoffs: a hand refused a lease asks its holder to let it go (issue 22, part 2).

A request is a row against one tenure (a lease row at its fence), from one hand, with a reason.
Its answer: `released` (the tenure ended by its holder's release or finish, or by a break:
`ended_by` says which), `declined` (with the holder's words), `granted` (a supervisor broke the
lease for it), `withdrawn` (by its asker), or, never stored, `lapsed`: an open request whose
tenure ended otherwise (expired, lost, taken over) reads as lapsed, so correctness never waits
for the sweep.

The lease row counts the tenure's open requests (`Lease.handoff_open`), which every renewal
already returns: a renewal reads the requests only when the count is not 0. Every transition
locks the lease row first (the count's UPDATE, or the release or break that ends the tenure),
then answers the request with a conditional UPDATE (`status = 'open'`): so a release and a
decline of one request take turns and exactly one answer wins, and the count moves with the
requests in the same transaction. A grant resets the count (`leases.engine`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from apikit import concealing
from apikit.errors import NotFound

# `services` as a module: it imports this one (a release answers the tenure's requests).
from leases import engine, nodes
from leases import services as lease_services
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now, parse_timestamp
from leases.engine import LeaseSnapshot
from leases.errors import (
    HandoffAnswered,
    HandoffLimit,
    HandoffNotNeeded,
    HandoffOwnLease,
    NotHolder,
)
from leases.models import EventKind, HandoffRequest, HandoffStatus, Lease, LeaseMode, LeaseState
from leases.names import validate_resource

# Open requests one tenure may carry at once: a holder reads them all in a renewal's answer.
MAX_OPEN_PER_TENURE = 16
LAPSED = "lapsed"
TABLE = Lease._meta.db_table


class _Duplicate(Exception):
    """The asker's open request for the tenure exists: roll the count back, answer it."""


class _Rollback(Exception):
    """An answer whose statements did not both match: roll back, then say why."""


@dataclass(frozen=True)
class HandoffView:
    """A request with its answer as of `now` (an open one whose tenure has ended: lapsed)."""

    request: HandoffRequest
    status: str


def effective_status(request: HandoffRequest, lease: LeaseSnapshot | None) -> str:
    """The stored answer, or `lapsed` for an open request whose tenure is no longer held."""
    if request.status != HandoffStatus.OPEN:
        return request.status
    if (
        lease is None
        or lease.fence != request.fence
        or lease.holder != request.holder
        or lease.state in (LeaseState.FREE, LeaseState.LOST)
    ):
        return LAPSED
    return HandoffStatus.OPEN


def _lease_update(sql: str, params: dict[str, Any]) -> datetime | None:
    """One conditional UPDATE of a lease row returning the database's time, or None."""
    with connection.cursor() as cursor:
        cursor.execute(engine.render(sql), params)
        row = cursor.fetchone()
    return parse_timestamp(row[0]) if row else None


# The ask: one more open request on the tenure, only while it is held, unlost, by that holder,
# at that fence, and under the bound. It locks the lease row, so askers of one tenure take turns.
_BUMP = (
    "UPDATE {table} SET handoff_open = handoff_open + 1 "
    "WHERE id = %(lease_id)s AND fence = %(fence)s AND holder = %(holder)s AND {alive} "
    f"AND handoff_open < {MAX_OPEN_PER_TENURE} "
    "RETURNING {now}"
)
# An answer by the holder (decline): only the current holder at that fence, tenure unlost.
_DROP_HELD = (
    "UPDATE {table} SET handoff_open = handoff_open - 1 "
    "WHERE id = %(lease_id)s AND fence = %(fence)s AND holder = %(holder)s AND {alive} "
    "AND handoff_open > 0 "
    "RETURNING {now}"
)
# A withdrawal: the row locked whatever became of the tenure; the count moves only while it is
# the request's tenure (a later grant reset it).
_DROP_ANY = (
    "UPDATE {table} SET handoff_open = CASE WHEN fence = %(fence)s AND handoff_open > 0 "
    "THEN handoff_open - 1 ELSE handoff_open END "
    "WHERE id = %(lease_id)s "
    "RETURNING {now}"
)


def tenure_in_the_way(*, workspace_id: int, asker: str, resource: str, mode: str) -> LeaseSnapshot:
    """The held tenure that refuses `asker` an acquire of `resource` in `mode` (the one whose
    window ends first, as the denial names it); 409 when the asker holds it itself or nothing
    held is in the way."""
    # Hand to hand: the asker's own hand's tenures (from any process) are nobody else's to
    # let go; another process of its own is taken over instead (`take_over` on acquire).
    in_the_way, _ = nodes.conflicts(
        workspace_id=workspace_id, resource=resource, holder=asker, process_id=None, mode=mode
    )
    held = [lease for lease in in_the_way if lease.held]
    if held:
        return held[0]
    own = nodes.tenures(workspace_id=workspace_id, resource=resource)
    if any(lease.holder == asker and lease.held for lease in own):
        raise HandoffOwnLease(
            f"you hold {resource!r} yourself: there is nobody to ask (if another process of "
            "yours holds it, acquire it with take_over: true)"
        )
    raise HandoffNotNeeded(
        f"nothing held stands in the way of {resource!r}: acquire it", resource=resource
    )


@refusals_recorded
def handoff_ask_resource(
    *, workspace_id: int, holder: str, resource: str, reason: str, mode: str = LeaseMode.EXCLUSIVE
) -> tuple[HandoffView, bool]:
    """`holder` (the asker, named so for the refusal's record) asks whoever's tenure refuses it
    `resource` to let it go. Returns the request and whether it is new (a repeated ask answers
    the open one)."""
    validate_resource(resource)
    lease_services.refuse_reserved_for_acquire(resource)
    mode = lease_services.validate_choice(mode, field="mode", choices=list(LeaseMode.values))
    reason = lease_services.validate_reason(reason, required=True)
    tenure = tenure_in_the_way(
        workspace_id=workspace_id, asker=holder, resource=resource, mode=mode
    )
    return handoff_ask(asker=holder, tenure=tenure, wanted=resource, reason=reason)


def handoff_ask(
    *, asker: str, tenure: LeaseSnapshot, wanted: str, reason: str, tries: int = 3
) -> tuple[HandoffView, bool]:
    """Open a request against `tenure` (held by another hand), or answer the asker's open one."""
    if tenure.holder == asker:
        raise HandoffOwnLease(f"you hold {tenure.resource!r} yourself: there is nobody to ask")
    existing = _open_of(tenure, asker)
    if existing is not None:
        return HandoffView(existing, HandoffStatus.OPEN), False
    params = {"lease_id": tenure.id, "fence": tenure.fence, "holder": tenure.holder}
    try:
        with transaction.atomic():
            at = _lease_update(_BUMP, params)
            if at is None:
                raise _explain_bump(tenure, asker)
            try:
                with transaction.atomic():
                    request = HandoffRequest.objects.create(
                        workspace_id=tenure.workspace_id,
                        lease_id=tenure.id,
                        fence=tenure.fence,
                        resource=tenure.resource,
                        kind=tenure.kind,
                        holder=tenure.holder,
                        asker=asker,
                        wanted=wanted,
                        reason=reason,
                        asked_at=at,
                    )
            except IntegrityError:
                # Another ask by the same hand won the unique index: undo the count.
                raise _Duplicate from None
            _record(request, EventKind.HANDOFF_REQUESTED, at=at, actor=asker)
    except _Duplicate:
        found = _open_of(tenure, asker)
        if found is None and tries > 1:  # answered in between: ask again
            return handoff_ask(
                asker=asker, tenure=tenure, wanted=wanted, reason=reason, tries=tries - 1
            )
        if found is None:
            raise HandoffNotNeeded(
                f"the tenure of {tenure.resource!r} is changing hands: acquire it or ask again",
                resource=tenure.resource,
            ) from None
        return HandoffView(found, HandoffStatus.OPEN), False
    return HandoffView(request, HandoffStatus.OPEN), True


def _open_of(tenure: LeaseSnapshot, asker: str) -> HandoffRequest | None:
    return HandoffRequest.objects.filter(
        workspace_id=tenure.workspace_id,
        lease_id=tenure.id,
        fence=tenure.fence,
        asker=asker,
        status=HandoffStatus.OPEN,
    ).first()


def _explain_bump(tenure: LeaseSnapshot, asker: str) -> Exception:
    """Why the ask's UPDATE matched nothing: the tenure ended, or it carries the most requests."""
    existing = _open_of(tenure, asker)
    if existing is not None:
        return _Duplicate()
    row = (
        Lease.objects.filter(workspace_id=tenure.workspace_id, pk=tenure.id)
        .values("fence", "holder", "handoff_open")
        .first()
    )
    if row and row["fence"] == tenure.fence and row["handoff_open"] >= MAX_OPEN_PER_TENURE:
        return HandoffLimit(
            f"{tenure.resource!r} already has {MAX_OPEN_PER_TENURE} open handoff requests",
            limit=MAX_OPEN_PER_TENURE,
        )
    return HandoffNotNeeded(
        f"the tenure of {tenure.resource!r} at fence {tenure.fence} has just ended: acquire it",
        resource=tenure.resource,
    )


def _record(request: HandoffRequest, kind: str, *, at: datetime, actor: str, **data: Any) -> None:
    record_event(
        workspace_id=request.workspace_id,
        kind=kind,
        at=at,
        actor=actor,
        hand=request.holder,
        resource=request.resource,
        fence=request.fence,
        data={"handoff": request.pk, "asker": request.asker, "reason": request.reason, **data},
    )


def _reread(request: HandoffRequest) -> None:
    """The request's row as it is now, found by its workspace and id."""
    request.refresh_from_db(
        from_queryset=HandoffRequest.objects.filter(workspace_id=request.workspace_id)
    )


def _answer(
    request: HandoffRequest,
    *,
    status: str,
    at: datetime,
    by: str,
    answer: str = "",
    ended_by: str = "",
) -> bool:
    """The request's answer, only if it is still open (the row count decides)."""
    return bool(
        HandoffRequest.objects.filter(
            workspace_id=request.workspace_id, pk=request.pk, status=HandoffStatus.OPEN
        ).update(status=status, answered_at=at, answered_by=by, answer=answer, ended_by=ended_by)
    )


def _request_in(workspace_id: int, handoff_id: int) -> HandoffRequest:
    request = handoff_find(workspace_id=workspace_id, handoff_id=handoff_id)
    if request is None:
        raise NotFound(f"no handoff request {handoff_id}")
    return request


def handoff_find(*, workspace_id: int, handoff_id: int) -> HandoffRequest | None:
    """The workspace's request `handoff_id`, or None."""
    return HandoffRequest.objects.filter(workspace_id=workspace_id, pk=handoff_id).first()


def _answered_error(request: HandoffRequest) -> HandoffAnswered:
    status = handoff_view(request).status
    return HandoffAnswered(
        f"handoff request {request.pk} is {status}: it takes no other answer", status=status
    )


@refusals_recorded
def handoff_decline(*, workspace_id: int, holder: str, handoff_id: int, reason: str) -> HandoffView:
    """The holder keeps its tenure and says why; only the current holder at that fence."""
    reason = lease_services.validate_reason(reason, required=True)
    request = _request_in(workspace_id, handoff_id)
    if request.holder != holder:
        if request.asker == holder:
            raise NotHolder(f"handoff request {handoff_id} is yours to withdraw, not to decline")
        raise NotFound(f"no handoff request {handoff_id}")
    try:
        with transaction.atomic():
            at = _lease_update(
                _DROP_HELD,
                {"lease_id": request.lease_id, "fence": request.fence, "holder": holder},
            )
            if at is None or not _answer(
                request, status=HandoffStatus.DECLINED, at=at, by=holder, answer=reason
            ):
                raise _Rollback
            _reread(request)
            _record(request, EventKind.HANDOFF_DECLINED, at=at, actor=holder, answer=reason)
    except _Rollback:
        _reread(request)
        raise _answered_error(request) from None
    return HandoffView(request, HandoffStatus.DECLINED)


@refusals_recorded
def handoff_withdraw(*, workspace_id: int, holder: str, handoff_id: int) -> HandoffView:
    """The asker takes its request back (`holder`: the asker, named so for the record)."""
    request = _request_in(workspace_id, handoff_id)
    if request.asker != holder:
        raise NotFound(f"no handoff request {handoff_id} of yours")
    try:
        with transaction.atomic():
            at = _lease_update(_DROP_ANY, {"lease_id": request.lease_id, "fence": request.fence})
            if at is None or not _answer(request, status=HandoffStatus.WITHDRAWN, at=at, by=holder):
                raise _Rollback
            _reread(request)
            _record(request, EventKind.HANDOFF_WITHDRAWN, at=at, actor=holder)
    except _Rollback:
        _reread(request)
        raise _answered_error(request) from None
    return HandoffView(request, HandoffStatus.WITHDRAWN)


def handoffs_close(
    tenures: Iterable[LeaseSnapshot],
    *,
    at: datetime,
    actor: str,
    ended_by: str,
    granted: int | None = None,
    answer: str = "",
) -> list[int]:
    """Answer every open request on `tenures`, which the caller's statement has just ended in
    this transaction (its UPDATE holds the lease rows and reset their counts): `released`, with
    how (`ended_by`), or, for `granted`, granted. Returns the ids answered."""
    answered: list[int] = []
    for tenure in tenures:
        rows = list(
            HandoffRequest.objects.filter(
                workspace_id=tenure.workspace_id,
                lease_id=tenure.id,
                fence=tenure.fence,
                status=HandoffStatus.OPEN,
            ).order_by("id")
        )
        for request in rows:
            grant = request.pk == granted
            status = HandoffStatus.GRANTED if grant else HandoffStatus.RELEASED
            if not _answer(
                request,
                status=status,
                at=at,
                by=actor,
                answer=answer if grant else "",
                ended_by=ended_by,
            ):
                continue  # pragma: no cover - the lease row's lock keeps others out
            kind = EventKind.HANDOFF_GRANTED if grant else EventKind.HANDOFF_RELEASED
            _record(request, kind, at=at, actor=actor, ended_by=ended_by)
            answered.append(request.pk)
    return answered


def pending(
    tenures: list[tuple[int, int, int]], *, workspace_id: int
) -> dict[int, list[dict[str, Any]]]:
    """The open requests on each tenure (lease id, fence, the row's `handoff_open`) of the
    workspace, by lease id, as a renewal shows them: one query, and none at all when no row
    counts any."""
    flagged = [(lease_id, fence) for lease_id, fence, count in tenures if count > 0]
    if not flagged:
        return {}
    tenure = Q()
    for lease_id, fence in flagged:
        tenure |= Q(lease_id=lease_id, fence=fence)
    found: dict[int, list[dict[str, Any]]] = {}
    found_open = HandoffRequest.objects.filter(
        tenure, workspace_id=workspace_id, status=HandoffStatus.OPEN
    )
    for request in found_open.order_by("id"):
        found.setdefault(request.lease_id, []).append(pending_json(request))
    return found


def pending_of(*, workspace_id: int, lease_id: int, fence: int, count: int) -> list[dict[str, Any]]:
    """`pending` for one tenure."""
    return pending([(lease_id, fence, count)], workspace_id=workspace_id).get(lease_id, [])


def pending_json(request: HandoffRequest) -> dict[str, Any]:
    """A request as the holder's renewal or heartbeat answer lists it."""
    return {
        "id": request.pk,
        "from": request.asker,
        "resource": request.resource,
        "wanted": request.wanted,
        "reason": request.reason,
        "at": request.asked_at,
    }


# --- Reads ------------------------------------------------------------------------------------


def handoff_view(request: HandoffRequest, now: datetime | None = None) -> HandoffView:
    """The request with its answer as of the database's time (one read of the lease)."""
    if request.status != HandoffStatus.OPEN:
        return HandoffView(request, request.status)
    lease = Lease.objects.filter(workspace_id=request.workspace_id, pk=request.lease_id).first()
    snapshot = LeaseSnapshot.from_model(lease, now or db_now()) if lease else None
    return HandoffView(request, effective_status(request, snapshot))


def handoff_views(requests: list[HandoffRequest]) -> list[HandoffView]:
    """`handoff_view` for a page: the leases in one query, the clock in one."""
    open_ids = {(r.workspace_id, r.lease_id) for r in requests if r.status == HandoffStatus.OPEN}
    if not open_ids:
        return [HandoffView(r, r.status) for r in requests]
    now = db_now()
    leases = {
        lease.pk: LeaseSnapshot.from_model(lease, now)
        for workspace_id in {workspace for workspace, _ in open_ids}
        for lease in Lease.objects.filter(
            workspace_id=workspace_id, pk__in=[pk for ws, pk in open_ids if ws == workspace_id]
        )
    }
    return [HandoffView(r, effective_status(r, leases.get(r.lease_id))) for r in requests]


def handoff_get(*, workspace_id: int, handoff_id: int, reader: str | None) -> HandoffView:
    """One request, for its asker, its holder, or (`reader` None) a supervisor; nobody else."""
    request = HandoffRequest.objects.filter(workspace_id=workspace_id, pk=handoff_id).first()
    if request is None or (reader is not None and reader not in (request.asker, request.holder)):
        raise NotFound(f"no handoff request {handoff_id}")
    return handoff_view(request)


def handoffs_of(*, workspace_id: int, hand: str, role: str = "", status: str = "") -> Any:
    """A hand's requests, newest first: those it asked and those it received (`role`: `asked`
    or `received` for one side, `workspace` for every request of the workspace); `status`: as
    stored (an open one may read as lapsed)."""
    found = HandoffRequest.objects.filter(workspace_id=workspace_id)
    if role == "asked":
        found = found.filter(asker=hand)
    elif role == "received":
        found = found.filter(holder=hand)
    elif role != "workspace":
        found = found.filter(Q(asker=hand) | Q(holder=hand))
    if status:
        found = found.filter(status=status)
    return found.order_by("-id")


def handoffs_open(*, workspace_id: int, limit: int = 100) -> list[HandoffView]:
    """Open requests of the workspace whose tenure is still held (the board's), newest first."""
    rows = list(
        HandoffRequest.objects.filter(
            workspace_id=workspace_id, status=HandoffStatus.OPEN
        ).order_by("-id")[: limit * 2]
    )
    return [view for view in handoff_views(rows) if view.status == HandoffStatus.OPEN][:limit]


def sentence(request: HandoffRequest) -> str:
    """What the holder is told (the client says the same from the answer's fields)."""
    wants = f" (for `{request.wanted}`)" if request.wanted != request.resource else ""
    # An asker the reader may not read (another lane's hand) is named by nobody.
    asker = f"hand {request.asker}" if concealing.shown(request.asker) else concealing.ANOTHER_LANE
    return f"{asker} asks for `{request.resource}`{wants}: release when you can"
