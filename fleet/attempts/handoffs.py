"""Handoffs of slots, and a supervisor's grant (`leases.handoffs` keeps the requests).

A hand asks for a slot of a run in its reach (its workspace, and its key's lane for a
lane-limited key) whose claim would be refused because another hand holds it; a supervisor
grants a request by breaking the lease, through the same break as everywhere
(`fleet.attempts.services.lease_break`: a broken slot's attempt ends as lost), which marks the
request granted in its transaction.
"""

from __future__ import annotations

from apikit.errors import NotFound, ValidationFailed
from fleet.attempts import services as attempt_services
from fleet.models import Slot
from fleet.plan.selectors import run_get
from fleet.plan.services import slot_resource
from hands.models import Hand
from leases import engine, handoffs
from leases.audit import refusals_recorded
from leases.engine import LeaseSnapshot
from leases.errors import HandoffAnswered, HandoffNotNeeded, HandoffOwnLease
from leases.handoffs import HandoffView
from leases.models import HandoffStatus, LeaseStatus
from leases.services import validate_reason


@refusals_recorded
def handoff_ask_slot(
    *, hand: Hand, run_id: int, slot: object, reason: str, lane_id: int | None = None
) -> tuple[HandoffView, bool]:
    """`hand` asks the holder of slot `slot` of run `run_id` to let it go; the request and
    whether it is new."""
    reason = validate_reason(reason, required=True)
    run = run_get(workspace_id=hand.workspace_id, run_id=run_id, lane_id=lane_id)
    count = Slot.objects.filter(run=run).count()
    if isinstance(slot, bool) or not isinstance(slot, int) or not (0 <= slot < count):
        raise ValidationFailed(
            f"slot must be an index from 0 to {count - 1}",
            fields={"slot": [f"An index from 0 to {count - 1}."]},
        )
    attempt_services.refuse_closed_run(run)
    resource = slot_resource(run.pk, slot)
    lease = engine.read(workspace_id=hand.workspace_id, resource=resource)
    assert lease is not None  # a run's slots have their lease rows from its creation
    _refuse_claimable(lease, hand.name)
    return handoffs.handoff_ask(asker=hand.name, tenure=lease, wanted=resource, reason=reason)


def _refuse_claimable(lease: LeaseSnapshot, asker: str) -> None:
    if lease.status == LeaseStatus.RETIRED:
        raise HandoffNotNeeded(
            f"{lease.resource} is done: its work was finished; nobody holds it to ask",
            resource=lease.resource,
        )
    if not lease.held:
        raise HandoffNotNeeded(f"{lease.resource} is open: claim it", resource=lease.resource)
    if lease.holder == asker:
        raise HandoffOwnLease(f"you hold {lease.resource} yourself: there is nobody to ask")


@refusals_recorded
def handoff_grant(
    *, workspace_id: int, handoff_id: int, actor: str, reason: str, lane_id: int | None = None
) -> tuple[HandoffView, LeaseSnapshot]:
    """A supervisor grants an open request: the lease is broken (every tenure of its node, as a
    break does), the request is granted, in one transaction; the other open requests on the
    tenure are answered released (ended by the break). `handoff_answered` when the request is
    no longer open (its tenure ended, or it was answered), and nothing is broken."""
    reason = validate_reason(reason, required=True)
    request = handoffs.handoff_find(workspace_id=workspace_id, handoff_id=handoff_id)
    if request is None:
        raise NotFound(f"no handoff request {handoff_id}")
    view = handoffs.handoff_view(request)
    if view.status != HandoffStatus.OPEN:
        raise HandoffAnswered(
            f"handoff request {handoff_id} is {view.status}: there is nothing to grant",
            status=view.status,
        )
    lease = attempt_services.lease_break(
        workspace_id=workspace_id,
        resource=request.resource,
        actor=actor,
        reason=reason,
        lane_id=lane_id,
        handoff=request,
    )
    request.refresh_from_db()
    return HandoffView(request, request.status), lease
