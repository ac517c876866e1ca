"""Attempts: a hand's tenure on a slot, from its claim to its end (finished, released, lost),
the supervisor's directive, and breaking a lease.

Every transition is one conditional statement (the lease engine's, or an `UPDATE ... WHERE` on
the attempt) plus its event, in one transaction. Every refusal is recorded by
`refusals_recorded`."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from apikit.errors import NotFound, ValidationFailed
from apikit.retries import retried
from fleet.attempts.selectors import AttemptView, attempt_get, attempt_view
from fleet.costs.budgets import refuse_over_budget
from fleet.errors import CapabilityMissing, NoOpenSlot, RunClosed, RunWaiting, SlotTaken
from fleet.models import Attempt, AttemptEnd, Directive, PlanState, Run, RunState, Slot, SlotState
from fleet.plan import dependencies
from fleet.plan.selectors import SlotCounts, run_get, run_slot_counts
from fleet.plan.services import lock_run, mark_run_done_if_finished, slot_resource
from hands import capabilities as hand_capabilities
from hands import services as hand_services
from hands.models import Hand, HandKey
from leases import engine, handoffs, tree
from leases import services as lease_services
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now
from leases.engine import LeaseSnapshot
from leases.errors import LeaseLost, NotHolder, ProcessMismatch
from leases.fences import stale_fence, validate_fence
from leases.models import EventKind, HandoffRequest, Lease, LeaseKind, LeaseState, LeaseStatus
from leases.services import held_error, validate_choice, validate_name, validate_reason


@refusals_recorded
@retried
def attempt_claim(
    *,
    hand: Hand,
    run_id: int,
    process_id: str,
    slot: int | None = None,
    lane_id: int | None = None,
    key: HandKey | None = None,
) -> AttemptView:
    """Take an open slot (the lowest, or `slot`) of the run: a new tenure of its lease.

    A slot whose holder is lost is open at once; no background job has to notice first. With
    the caller's `key`, the claim's statement checks that it is still usable and records it on
    the tenure, whose revocation then ends the attempt (`hands.services.key_guard`).
    """
    validate_name(process_id, field="process_id")
    run = run_get(workspace_id=hand.workspace_id, run_id=run_id, lane_id=lane_id)
    refuse_closed_run(run)
    slots = list(
        Slot.objects.filter(workspace_id=run.workspace_id, run=run)
        .order_by("index")
        .values_list("index", "lease_id")
    )
    if slot is not None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not (0 <= slot < len(slots)):
            raise ValidationFailed(
                f"slot must be an index from 0 to {len(slots) - 1}",
                fields={"slot": [f"An index from 0 to {len(slots) - 1}."]},
            )
        candidates = [slots[slot][1]]
    else:
        candidates = [lease_id for _, lease_id in slots]
    guard = engine.Guard.all(
        capability_guard(hand=hand, run=run),
        hand_services.key_guard(key) if key is not None else None,
        dependency_guard(run=run, lane_id=lane_id),
    )
    assert guard is not None
    with transaction.atomic():
        guard.hold()  # LOCK_ORDER: the key's row before any lease row
        # In the claim's transaction, behind the lane's budget locks: a report reaching the
        # budget meanwhile has either stamped this attempt too or been seen (budgets.py).
        refuse_over_budget(workspace_id=run.workspace_id, lane_id=run.work_package.lane_id)
        lease = engine.take_first_free(
            workspace_id=hand.workspace_id,
            lease_ids=candidates,
            holder=hand.name,
            process_id=process_id,
            interval_s=run.heartbeat_interval_s,
            grace_s=run.grace_s,
            guard=guard,
        )
        if lease is not None:
            taken = Slot.objects.get(workspace_id=hand.workspace_id, lease_id=lease.id)
            # The tenure this claim replaced (if its holder was lost) ends now, recorded once.
            for previous in Attempt.objects.filter(
                workspace_id=hand.workspace_id, slot=taken, end=None
            ).values_list("pk", flat=True):
                attempt_mark_lost(
                    workspace_id=hand.workspace_id,
                    attempt_id=previous,
                    at=lease.server_time,
                    reason="slot reclaimed",
                )
            attempt = Attempt.objects.create(
                workspace_id=hand.workspace_id,
                run=run,
                slot=taken,
                hand=hand,
                lane_id=run.work_package.lane_id,
                lease_id=lease.id,
                fence=lease.fence,
                process_id=process_id,
                claimed_at=lease.server_time,
                progress_timeout_s=run.progress_timeout_s,
            )
            record_event(
                workspace_id=hand.workspace_id,
                kind=EventKind.CLAIMED,
                at=lease.server_time,
                actor=hand.name,
                hand=hand.name,
                attempt_id=attempt.pk,
                resource=lease.resource,
                fence=lease.fence,
                data={"run": run.pk, "slot": taken.index, "process_id": process_id},
            )
            return AttemptView(
                attempt_get(workspace_id=hand.workspace_id, attempt_id=attempt.pk), lease
            )
    unfit = guard.explain()
    if unfit is not None:
        raise unfit
    if slot is not None:
        current = engine.read(workspace_id=hand.workspace_id, resource=slot_resource(run.pk, slot))
        assert current is not None
        if current.status == LeaseStatus.RETIRED:
            raise SlotTaken(
                f"slot {slot} of run {run.pk} is done: its work was finished; "
                "claim another slot, or ask a supervisor to reopen it",
                state=SlotState.DONE,
                resource=current.resource,
                fence=current.fence,
            )
        raise held_error(current, SlotTaken)
    counts = run_slot_counts(run_id=run.pk)
    if counts.all_done:  # the last slot was finished while this claim looked
        run.state = RunState.DONE
        refuse_closed_run(run)
    raise NoOpenSlot(
        _no_open_slot_message(run.pk, counts),
        slots=counts.total,
        held=counts.held,
        done=counts.done,
        next_expires_in_s=counts.next_expires_in_s,
    )


def capability_guard(*, hand: Hand, run: Run) -> engine.Guard:
    """The run's capabilities, all of them the hand's, as a condition of the claim's one
    statement (`leases.engine.Guard`), with `missing` to explain a refusal.

    Why in the statement: a supervisor may change the hand's (or the run's) capabilities while
    a claim is on its way. The statement reads both rows as of its own start, so a change that
    committed before the statement began refuses the claim, and one committing later orders
    the claim before it (the change governs every claim whose statement starts after it). A
    check in Python before the statement would let a change that committed between that read
    and the grant pass unseen (tests/capabilities/test_capability_races.py pauses a claim just
    there). The explanation reads the rows again only after the statement matched nothing."""

    def explain() -> Exception | None:
        ws = hand.workspace_id
        needed = (
            Run.objects.filter(workspace_id=ws, pk=run.pk)
            .values_list("capabilities", flat=True)
            .first()
        )
        has = (
            Hand.objects.filter(workspace_id=ws, pk=hand.pk)
            .values_list("capabilities", flat=True)
            .first()
        )
        lacking = hand_capabilities.missing(needed or [], has or [])
        if not lacking:
            return None
        return CapabilityMissing(
            f"run {run.pk} needs {', '.join(lacking)}, which hand {hand.name!r} lacks "
            f"(it has: {', '.join(has or []) or 'none'}); claim a run that fits, or ask a "
            "supervisor to give the hand these capabilities",
            missing=lacking,
            capabilities=list(needed or []),
            hand_capabilities=list(has or []),
        )

    return engine.Guard(
        sql=f"EXISTS (SELECT 1 FROM {Run._meta.db_table} guard_run, {Hand._meta.db_table} "
        "guard_hand WHERE guard_run.workspace_id = %(guard_workspace_id)s AND guard_run.id = "
        "%(guard_run_id)s AND guard_hand.workspace_id = %(guard_workspace_id)s AND "
        "guard_hand.id = %(guard_hand_id)s AND "
        f"{hand_capabilities.fits_sql('guard_run.capabilities', 'guard_hand.capabilities')})",
        params={
            "guard_workspace_id": hand.workspace_id,
            "guard_run_id": run.pk,
            "guard_hand_id": hand.pk,
        },
        explain=explain,
    )


def dependency_guard(*, run: Run, lane_id: int | None = None) -> engine.Guard:
    """Every run `run` depends on done, as a condition of the claim's one statement (the rule
    `fleet.plan.dependencies.waits_sql`), with `run_waiting` to explain a refusal.

    In the statement for the reason `capability_guard` gives: a dependency's last finish commits
    the run's `done` in its own transaction (`mark_run_done_if_finished`). A claim whose
    statement starts before that commit reads the dependency not done and is refused; one that
    starts after reads it done and may be granted; none is granted while it is not done
    (tests/run_dependencies/test_dependency_races.py). `lane_id`: the claimer's lane, for a
    lane-limited key, to which another lane's run is counted but not named."""

    def explain() -> Exception | None:
        waiting = dependencies.waiting_for(
            dependencies.dependencies_of([run.pk], lane_id=lane_id).get(run.pk, [])
        )
        if not waiting:
            return None
        return RunWaiting(
            dependencies.said_waiting(run.pk, waiting),
            waiting_for=[dependency.as_waiting() for dependency in waiting],
        )

    return engine.Guard(
        sql="NOT "
        + dependencies.waits_sql("%(guard_waiting_run_id)s", "%(guard_waiting_workspace_id)s"),
        params={"guard_waiting_run_id": run.pk, "guard_waiting_workspace_id": run.workspace_id},
        explain=explain,
    )


def refuse_closed_run(run: Run) -> None:
    """run_closed, saying why, for a run that takes no claims."""
    if run.state == RunState.DONE:
        raise RunClosed(
            f"run {run.pk} is done: every slot was finished; there is nothing left to claim",
            run_state=RunState.DONE,
        )
    if run.state != RunState.OPEN:
        raise RunClosed(f"run {run.pk} is closed: it takes no claims", run_state=run.state)
    if run.work_package.state != PlanState.OPEN:
        raise RunClosed(
            f"run {run.pk} takes no claims: its work package {run.work_package.key!r} is closed",
            run_state=run.state,
        )


def _no_open_slot_message(run_id: int, counts: SlotCounts) -> str:
    held = f"{counts.held} held"
    if counts.next_expires_in_s is not None:
        held += (
            f" (the soonest holder's current renewal window ends in "
            f"{counts.next_expires_in_s:.0f} s; a slot opens only if its holder releases it or "
            "stops renewing past its grace)"
        )
    done = f", {counts.done} done" if counts.done else ""
    return f"run {run_id} has no open slot: {held}{done}; wait, or pick other work"


def attempt_mark_lost(*, workspace_id: int, attempt_id: int, at: datetime, reason: str) -> bool:
    """End a tenure as lost and record it, once: only the caller whose update matched writes
    the event, however many sweeps and claims race here."""
    mine = Attempt.objects.filter(workspace_id=workspace_id, pk=attempt_id)
    attempt = mine.select_related("hand", "lease").get()
    if not mine.filter(end=None).update(end=AttemptEnd.LOST, ended_at=at, end_reason=reason):
        return False
    record_event(
        workspace_id=attempt.workspace_id,
        kind=EventKind.LOST,
        at=at,
        actor="system",
        hand=attempt.hand.name,
        attempt_id=attempt.pk,
        resource=attempt.lease.resource,
        fence=attempt.fence,
        data={"reason": reason},
    )
    return True


def attempts_end_revoked(
    *, tenures: list[LeaseSnapshot], actor: str, reason: str, **_: object
) -> int:
    """End as released the attempts on slot tenures a key's revocation has just ended
    (`leases.services.key_tenures_end`, whose statement holds their lease rows in this
    transaction, so no finish or release of theirs can be on its way), each with its `released`
    event and the reason. Receives `leases.services.slot_tenures_ended`."""
    ended = 0
    for lease in tenures:
        mine = Attempt.objects.filter(
            workspace_id=lease.workspace_id, lease_id=lease.id, fence=lease.fence, end=None
        )
        attempt = mine.select_related("hand").first()
        if attempt is None or not mine.update(
            end=AttemptEnd.RELEASED, ended_at=lease.server_time, end_reason=reason
        ):
            continue
        ended += 1
        record_event(
            workspace_id=lease.workspace_id,
            kind=EventKind.RELEASED,
            at=lease.server_time,
            actor=actor,
            hand=attempt.hand.name,
            attempt_id=attempt.pk,
            resource=lease.resource,
            fence=lease.fence,
            data={"reason": reason},
        )
    return ended


def attempt_for_hand(*, hand: Hand, attempt_id: int, fence: object, lane_id: int | None) -> Attempt:
    """The caller's own attempt, at the fence it carries (checks shared by every hand call)."""
    attempt = attempt_get(workspace_id=hand.workspace_id, attempt_id=attempt_id, lane_id=lane_id)
    if attempt.hand_id != hand.pk:
        raise NotHolder(f"attempt {attempt.pk} belongs to another hand")
    stale = stale_fence(validate_fence(fence), attempt.fence, f"attempt {attempt.pk}")
    if stale is not None:
        # The lease's fence now, which a caller needs to see how far it fell behind.
        stale.fields["current_fence"] = attempt.lease.fence
        raise stale
    return attempt


def tenure_error(
    attempt: Attempt, lease: LeaseSnapshot | None, process_id: str | None
) -> Exception:
    """Why a fenced statement on the attempt's slot lease matched no row."""
    if (
        lease is None
        or lease.fence != attempt.fence
        or lease.state in (LeaseState.FREE, LeaseState.LOST)
    ):
        return LeaseLost(
            f"attempt {attempt.pk} has lost its slot lease",
            current_fence=lease.fence if lease else None,
        )
    if process_id is not None and process_id != lease.process_id:
        return ProcessMismatch(
            f"attempt {attempt.pk} is held by process {lease.process_id!r}, not {process_id!r}",
            process_id=lease.process_id,
        )
    return LeaseLost(f"attempt {attempt.pk} is no longer valid")


def refuse_ended(attempt: Attempt) -> None:
    if attempt.end:
        raise LeaseLost(f"attempt {attempt.pk} has ended ({attempt.end})", end=attempt.end)


@refusals_recorded
def attempt_set_directive(
    *, workspace_id: int, attempt_id: int, directive: str, actor: str
) -> AttemptView:
    """Continue, pause or stop: it reaches the hand in its next heartbeat's answer (rule 7)."""
    validate_choice(directive, field="directive", choices=[d.value for d in Directive])
    attempt = attempt_get(workspace_id=workspace_id, attempt_id=attempt_id)
    refuse_ended(attempt)
    with transaction.atomic():
        now = db_now()
        if (
            Attempt.objects.filter(workspace_id=workspace_id, pk=attempt.pk, end=None)
            .exclude(directive=directive)
            .update(directive=directive)
        ):
            record_event(
                workspace_id=workspace_id,
                kind=EventKind.DIRECTIVE_SET,
                at=now,
                actor=actor,
                hand=attempt.hand.name,
                attempt_id=attempt.pk,
                resource=attempt.lease.resource,
                fence=attempt.fence,
                data={"directive": directive},
            )
    return attempt_view(attempt_get(workspace_id=workspace_id, attempt_id=attempt_id))


def attempt_end(
    *,
    hand: Hand,
    attempt: Attempt,
    process_id: str,
    end: str,
    reason: str = "",
    summary: str = "",
) -> AttemptView:
    """Release the slot lease and end the attempt as finished or released, with its event.

    Runs inside the caller's transaction (finish adds its evidence in the same one). A finish
    retires the slot (done, never handed out again) and, if it was the run's last open slot,
    makes the run done in the same transaction.
    """
    finished = end == AttemptEnd.FINISHED
    if finished:
        # Finishes of one run take turns from here to the commit, so the last of two
        # concurrent ones sees the other's slot done and marks the run (no write skew).
        lock_run(workspace_id=attempt.workspace_id, run_id=attempt.run_id)
    lease = engine.release(
        workspace_id=hand.workspace_id,
        resource=attempt.lease.resource,
        holder=hand.name,
        fence=attempt.fence,
        process_id=process_id,
        retire=finished,
    )
    if lease is None:
        raise tenure_error(
            attempt,
            engine.read(workspace_id=hand.workspace_id, resource=attempt.lease.resource),
            process_id,
        )
    updated = Attempt.objects.filter(
        workspace_id=hand.workspace_id, pk=attempt.pk, end=None
    ).update(end=end, ended_at=lease.server_time, end_reason=reason, summary=summary)
    if not updated:  # pragma: no cover - the lease statement above already decided the race
        raise LeaseLost(f"attempt {attempt.pk} has ended")
    # The slot's handoff requests are answered with the tenure's end: released (or finished).
    handoffs.handoffs_close([lease], at=lease.server_time, actor=hand.name, ended_by=end)
    record_event(
        workspace_id=hand.workspace_id,
        kind=end,
        at=lease.server_time,
        actor=hand.name,
        hand=hand.name,
        attempt_id=attempt.pk,
        resource=lease.resource,
        fence=attempt.fence,
        data={"reason": reason} if reason else {},
    )
    if finished:
        mark_run_done_if_finished(
            workspace_id=hand.workspace_id,
            run_id=attempt.run_id,
            at=lease.server_time,
            actor=hand.name,
        )
    attempt.refresh_from_db(from_queryset=Attempt.objects.filter(workspace_id=hand.workspace_id))
    return AttemptView(attempt, lease)


def attempt_for_ending(
    *, hand: Hand, attempt_id: int, fence: int, process_id: str, end: str, lane_id: int | None
) -> tuple[Attempt, bool]:
    """The attempt a finish or release acts on; (attempt, True) when this exact end was already
    recorded for it, so a retried call answers as the first did instead of acting twice."""
    validate_name(process_id, field="process_id")
    attempt = attempt_for_hand(hand=hand, attempt_id=attempt_id, fence=fence, lane_id=lane_id)
    if attempt.end == end and attempt.process_id == process_id:
        return attempt, True
    refuse_ended(attempt)
    return attempt, False


@refusals_recorded
@retried
def attempt_release(
    *,
    hand: Hand,
    attempt_id: int,
    fence: int,
    process_id: str,
    reason: str,
    lane_id: int | None = None,
) -> AttemptView:
    """Give the slot back with a reason; it is open again at once."""
    reason = validate_reason(reason, required=True)
    attempt, done = attempt_for_ending(
        hand=hand,
        attempt_id=attempt_id,
        fence=fence,
        process_id=process_id,
        end=AttemptEnd.RELEASED,
        lane_id=lane_id,
    )
    if done:
        return attempt_view(attempt)
    with transaction.atomic():
        return attempt_end(
            hand=hand,
            attempt=attempt,
            process_id=process_id,
            end=AttemptEnd.RELEASED,
            reason=reason,
        )


@refusals_recorded
@retried
def lease_break(
    *,
    workspace_id: int,
    resource: str,
    actor: str,
    reason: str,
    lane_id: int | None = None,
    handoff: HandoffRequest | None = None,
) -> LeaseSnapshot:
    """Break any lease; a broken slot lease ends its attempt as lost in the same transaction.

    A lane-limited caller (`lane_id`) breaks only its lane's leases: a slot of a run in its lane,
    or a resource held by a hand of its lane. The lease's row is locked while that is checked,
    so no other holder can take it between the check and the break."""
    reason = validate_reason(reason, required=True)
    with transaction.atomic():
        # The tree's advisory locks before the row lock the lane check takes, as every grant
        # and break takes them (the engine's LOCK_ORDER): taken after it, an acquire of the
        # node holding them and waiting for the row would wait for this break in a cycle.
        lease_services.validate_stored_resource(resource)
        tree.lock_tree(workspace_id=workspace_id, resource=resource)
        if lane_id is not None and not _in_lane(workspace_id, resource, lane_id):
            raise NotFound(f"no lease on {resource!r} in this key's lane")
        lease = lease_services.lease_break(
            workspace_id=workspace_id,
            resource=resource,
            actor=actor,
            reason=reason,
            handoff=handoff,
        )
        if lease.kind == LeaseKind.SLOT:
            for attempt_id in Attempt.objects.filter(
                workspace_id=workspace_id, lease_id=lease.id, fence=lease.fence - 1, end=None
            ).values_list("pk", flat=True):
                attempt_mark_lost(
                    workspace_id=workspace_id,
                    attempt_id=attempt_id,
                    at=lease.server_time,
                    reason=f"broken: {reason}",
                )
    return lease


def _in_lane(workspace_id: int, resource: str, lane_id: int) -> bool:
    lease = (
        Lease.objects.select_for_update()
        .filter(workspace_id=workspace_id, resource=resource)
        .values("pk", "kind", "holder")
        .first()
    )
    if lease is None:
        return False
    if lease["kind"] == LeaseKind.SLOT:
        in_lane = Slot.objects.filter(
            workspace_id=workspace_id, lease_id=lease["pk"], run__work_package__lane_id=lane_id
        )
        return in_lane.exists()
    return Hand.objects.filter(
        workspace_id=workspace_id, name=lease["holder"], lane_id=lane_id
    ).exists()
