"""Presenters: the fleet's objects (leases, attempts, reports, slots, runs, refusals, events) as
the contract's JSON. The hot views (`leasing.hot`) answer with the same ones."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from apikit.concealing import shown
from apikit.context import current_call
from fleet.attempts import selectors as attempt_selectors
from fleet.attempts.checkpoints import Inherited
from fleet.attempts.idle import is_idle
from fleet.attempts.selectors import AttemptView
from fleet.costs.spend import budget_notice_now
from fleet.models import Run, WorkPackage
from fleet.plan import dependencies
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from fleet.plan.selectors import SlotView
from hands import selectors as hand_selectors
from leases import handoffs
from leases import services as lease_services
from leases.audit import event_payload
from leases.engine import LeaseSnapshot
from leases.models import Event, LeaseState, LeaseStatus, Refusal
from leases.state import seconds_until, thresholds


def as_number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def lease_json(lease: LeaseSnapshot) -> dict[str, Any]:
    """A resource lease; a free one has no holder and no deadline."""
    state = lease.state
    held = state != LeaseState.FREE
    return {
        "resource": lease.resource,
        "kind": lease.kind,
        "mode": lease.mode,
        "holder": lease.holder or None if held else None,
        "process_id": lease.process_id or None if held else None,
        "fence": lease.fence,
        "state": str(state),
        "ttl_s": as_number(lease.interval_s),
        "grace_s": as_number(lease.grace_s),
        "acquired_at": lease.acquired_at if held else None,
        "renewed_at": lease.renewed_at if held else None,
        "expires_at": lease.deadline if held else None,
        "expires_in_s": lease.expires_in_s if held else None,
        "released_at": lease.released_at,
        "queued_at": lease.queued_at,
        "server_time": lease.server_time,
    }


def renewed_json(
    leases: list[LeaseSnapshot], pending: dict[int, list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Renewed leases, each with the open handoff requests on its tenure (`pending`, else read,
    only for leases whose row counts some: `leases.handoffs.pending`)."""
    if pending is None:
        pending = pending_of_leases(leases)
    return [
        {**lease_json(lease), "handoff_requests": pending.get(lease.id, [])} for lease in leases
    ]


def not_renewed_json(item: lease_services.NotRenewed) -> dict[str, Any]:
    """A tenure a renew-all did not renew, and why."""
    return {
        "resource": item.resource,
        "fence": item.fence,
        "lease": lease_json(item.lease) if item.lease is not None else None,
        "code": item.error.code,
        "message": item.error.message,
    }


def pending_of_leases(leases: list[LeaseSnapshot]) -> dict[int, list[dict[str, Any]]]:
    """The open handoff requests on renewed leases (all of one caller, so one workspace)."""
    if not leases:
        return {}
    return handoffs.pending(
        [(lease.id, lease.fence, lease.handoff_open) for lease in leases],
        workspace_id=leases[0].workspace_id,
    )


def attempt_json(view: AttemptView) -> dict[str, Any]:
    """An attempt with the lease of its tenure, as of the database time of `view`.

    While the slot's lease is still this tenure's (same fence, held), the lease block carries its
    deadline and thresholds; once the tenure has ended or moved on they are null.
    """
    attempt, lease = view.attempt, view.lease
    current = lease.fence == attempt.fence and lease.status == "held"
    return attempt_answer(
        attempt_id=attempt.pk,
        run_id=attempt.run_id,
        slot_index=attempt.slot.index,
        hand=attempt.hand.name,
        lane=attempt.lane.slug,
        process_id=attempt.process_id,
        fence=attempt.fence,
        state=view.state,
        directive=attempt.directive,
        resource=lease.resource,
        lease_fence=lease.fence,
        # The tenure's own: a run's settings are copied into the lease at the claim.
        interval_s=lease.interval_s if current else attempt.run.heartbeat_interval_s,
        grace_s=lease.grace_s if current else attempt.run.grace_s,
        deadline=lease.deadline if current else None,
        now=lease.server_time,
        claimed_at=attempt.claimed_at,
        last_report_at=attempt_selectors.last_report_at(attempt, lease),
        progress_percent=attempt.progress_percent,
        ended_at=attempt.ended_at,
        end_reason=attempt.end_reason,
        summary=attempt.summary,
        progress_timeout_s=attempt.progress_timeout_s,
        last_progress_at=attempt.last_progress_at,
        idle_since=attempt.idle_since,
        budget_notice=attempt.budget_notice,
        budget_until=attempt.budget_until,
    )


def report_row_json(
    row: tuple[Any, ...],
    *,
    workspace_id: int,
    attempt_id: int,
    fence: int,
    recorded_at: datetime | None = None,
) -> dict[str, Any]:
    """`attempt_json(report_view(...))`, read straight off the row of a renewing report that
    selects only what its answer shows (`fleet.attempts.reports.report_statement`,
    `answer_only`): the hot view's answer to the fleet's most frequent call, without the view's
    objects (their cost, docs/performance.md). `attempt_id` and `fence`: the report's own, which
    the statement matched, in `workspace_id`. `recorded_at`: the report record written after the
    row was read (`fleet.attempts.reports.heartbeat_record`), if one was."""
    (
        resource,
        holder,
        interval_s,
        grace_s,
        acquired_at,
        renewed_at,
        deadline,
        now,
        _handoff_open,
        run_id,
        process_id,
        directive,
        claimed_at,
        last_recorded,
        ended_at,
        end_reason,
        summary,
        progress_percent,
        progress_timeout_s,
        last_progress_at,
        idle_since,
        budget_notice,
        budget_until,
        lane_id,
    ) = row
    # The statement renewed this tenure: its lease is held at the attempt's fence, and the
    # attempt is open.
    return attempt_answer(
        attempt_id=attempt_id,
        run_id=run_id,
        slot_index=plan_services.slot_index(resource),
        hand=holder,
        lane=hand_selectors.lane_slug(workspace_id=workspace_id, lane_id=lane_id),
        process_id=process_id,
        fence=fence,
        state=attempt_selectors.tenure_state(
            None, fence, fence, status=LeaseStatus.HELD, deadline=deadline, grace_s=grace_s, now=now
        ),
        directive=directive,
        resource=resource,
        lease_fence=fence,
        interval_s=interval_s,
        grace_s=grace_s,
        deadline=deadline,
        now=now,
        claimed_at=claimed_at,
        last_report_at=attempt_selectors.latest_report_at(
            recorded_at or last_recorded, fence, fence, renewed_at, acquired_at
        ),
        progress_percent=progress_percent,
        ended_at=ended_at,
        end_reason=end_reason,
        summary=summary,
        progress_timeout_s=progress_timeout_s,
        last_progress_at=last_progress_at,
        idle_since=idle_since,
        budget_notice=budget_notice,
        budget_until=budget_until,
    )


def attempt_answer(
    *,
    attempt_id: int,
    run_id: int,
    slot_index: int,
    hand: str,
    lane: str,
    process_id: str,
    fence: int,
    state: str,
    directive: str,
    resource: str,
    lease_fence: int,
    interval_s: float,
    grace_s: float,
    deadline: datetime | None,
    now: datetime,
    claimed_at: datetime,
    last_report_at: datetime | None,
    progress_percent: float | None,
    ended_at: datetime | None,
    end_reason: str,
    summary: str,
    progress_timeout_s: int | None = None,
    last_progress_at: datetime | None = None,
    idle_since: datetime | None = None,
    budget_notice: object = None,
    budget_until: datetime | None = None,
) -> dict[str, Any]:
    """The contract's attempt; `deadline` is None unless the lease is still this tenure's."""
    limits = thresholds(deadline, grace_s) if deadline is not None else None
    idle_now = is_idle(
        state=state,
        progress_timeout_s=progress_timeout_s,
        last_progress_at=last_progress_at,
        claimed_at=claimed_at,
        now=now,
    )
    return {
        "id": attempt_id,
        "run": run_id,
        "slot": slot_index,
        "hand": hand,
        "lane": lane,
        "process_id": process_id,
        "fence": fence,
        "state": state,
        "directive": directive,
        "lease": {
            "resource": resource,
            "fence": fence,
            "current_fence": lease_fence,
            "holder": hand,
            "heartbeat_interval_s": as_number(interval_s),
            "grace_s": as_number(grace_s),
            "expires_at": deadline,
            "expires_in_s": seconds_until(deadline, now),
            "server_time": now,
            "late_at": limits.late_at if limits else None,
            "stalled_at": limits.stalled_at if limits else None,
            "lost_at": limits.lost_at if limits else None,
        },
        "claimed_at": claimed_at,
        "last_report_at": last_report_at,
        "progress_percent": progress_percent,
        "ended_at": ended_at,
        "end_reason": end_reason or None,
        "summary": summary or None,
        "progress_timeout_s": progress_timeout_s,
        "last_progress_at": last_progress_at,
        "idle": idle_now,
        # The sweep's flag is sticky until progress; shown only while the tenure is idle.
        "idle_since": idle_since if idle_now else None,
        "budget": budget_notice_now(budget_notice, budget_until, now),
    }


def checkpoint_json(inherited: Inherited | None) -> dict[str, Any]:
    """The checkpoint an attempt inherits (`fleet.attempts.checkpoints.checkpoint_inherited`),
    as a brief and a claim's answer carry it: null and null when there is none.

    What a hand the caller may not read wrote is its lane's (`apikit.concealing`, the rule the
    run's timeline follows too): its checkpoint is withheld (null, `withheld` true), and only
    which attempt left one, when and how it ended are said."""
    if inherited is None:
        return {"checkpoint": None, "checkpoint_from": None}
    withheld = shown(inherited.hand) is None
    return {
        "checkpoint": None if withheld else inherited.checkpoint,
        "checkpoint_from": {
            "attempt": inherited.attempt_id,
            "hand": None if withheld else inherited.hand,
            "at": inherited.at,
            "end": inherited.end,
            "withheld": withheld,
        },
    }


def slot_json(view: SlotView) -> dict[str, Any]:
    return {
        "index": view.slot.index,
        "state": view.state,
        "holder": view.holder,
        "fence": view.lease.fence,
        "expires_in_s": view.lease.expires_in_s if view.holder else None,
    }


def work_package_json(package: WorkPackage) -> dict[str, Any]:
    return {
        "id": package.pk,
        "lane": package.lane.slug,
        "key": package.key,
        "title": package.title,
        "external_ref": package.external_ref or None,
        "state": package.state,
        "created_at": package.created_at,
    }


def run_dependencies(runs: list[Run]) -> dict[int, list[dependencies.Dependency]]:
    """What each run of a page depends on (one query). To a lane-limited caller (it reads only
    its lane's runs) a run of another lane is counted, never named (docs/api.md, "Lanes")."""
    limited = current_call().conceal is not None
    by_lane: dict[int | None, list[Run]] = {}
    found: dict[int, list[dependencies.Dependency]] = {}
    for run in runs:
        lane_id = run.work_package.lane_id if limited else None
        read = dependencies.from_rows(run, lane_id=lane_id)  # read with the page, if it was
        if read is None:
            by_lane.setdefault(lane_id, []).append(run)
        else:
            found[run.pk] = read
    for lane_id, some in by_lane.items():
        found.update(dependencies.dependencies_of([r.pk for r in some], lane_id=lane_id))
    return found


def run_json(
    run: Run,
    counts: plan_selectors.SlotCounts | None = None,
    depends_on: list[dependencies.Dependency] | None = None,
) -> dict[str, Any]:
    """A run; with `counts`, also how its slots stand now (`slots_by_state`). `depends_on`:
    what it depends on, as `run_dependencies` read it for a page (read here when None)."""
    if depends_on is None:
        depends_on = run_dependencies([run]).get(run.pk, [])
    extra = (
        {"slots_by_state": {"open": counts.open, "held": counts.held, "done": counts.done}}
        if counts is not None
        else {}
    )
    return {
        "id": run.pk,
        "work_package": run.work_package_id,
        "lane": run.work_package.lane.slug,
        "title": run.title,
        "brief": run.brief,
        "evidence_required": run.evidence_required,
        "evidence_grades": run.evidence_grades,
        "capabilities": run.capabilities,
        "slots": run.slot_count,
        "heartbeat_interval_s": run.heartbeat_interval_s,
        "grace_s": run.grace_s,
        "progress_timeout_s": run.progress_timeout_s,
        "idle_directive": run.idle_directive,
        "state": run.state,
        "created_at": run.created_at,
        "closed_at": run.closed_at,
        "work_package_key": run.work_package.key,
        "work_package_title": run.work_package.title,
        "priority": run.priority,
        "depends_on": dependencies.ids(depends_on),
        "waiting_for": dependencies.ids(dependencies.waiting_for(depends_on)),
        **extra,
    }


def runs_json(runs: list[Run], *, counted: bool = True) -> list[dict[str, Any]]:
    """A page of runs with what they depend on and (`counted`) their slots counted: a query
    for each, whatever the page's size."""
    counts = plan_selectors.runs_slot_counts(runs) if counted else {}
    depends_on = run_dependencies(runs)
    return [run_json(run, counts.get(run.pk), depends_on.get(run.pk, [])) for run in runs]


def refusal_json(refusal: Refusal) -> dict[str, Any]:
    return {
        "id": refusal.pk,
        "at": refusal.at,
        "code": refusal.code,
        "message": refusal.message,
        "hand": refusal.hand or None,
        "key_prefix": refusal.key_prefix or None,
        "method": refusal.method,
        "path": refusal.path,
        "request_id": refusal.request_id,
        "details": refusal.details,
    }


def event_json(event: Event) -> dict[str, Any]:
    # The payload webhooks send, with the API's time format.
    return {**event_payload(event), "at": event.at}
