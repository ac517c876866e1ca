"""The fleet's REST API (CONTRACT.md): hand calls, resource leases and supervisor calls.

One class per endpoint, thin: validate the input with a serializer, call a service or selector,
shape the answer with a presenter. Business rules live in `fleet.services`, `leases.services` and
`evidence.services`; authentication and scopes in `fleet.authentication`; the error body, limits
and pagination in `groundcontrol.api`. Resource-lease views live here, not in `leases/`, because
authentication is the fleet's and `leases/` imports nothing from it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from fleet import selectors
from fleet import services as fleet
from fleet.authentication import HandKeyAuthentication, ScopeRequired, lane_id_of
from fleet.idempotency import idempotent
from fleet.models import (
    Directive,
    Hand,
    HandKey,
    Lane,
    PlanState,
    ReportKind,
    Run,
    RunState,
    Scope,
    SlotState,
    WorkPackage,
)
from fleet.selectors import AttemptView, SlotView
from fleet.webhooks import event_payload
from groundcontrol.api import (
    RATE_COUNTED,
    LimitedJSONParser,
    check_body_size,
    error_responses,
    paginated,
)
from groundcontrol.ratelimit import rate_caller, rate_limit
from leases import services as lease_services
from leases.engine import LeaseSnapshot
from leases.errors import RateLimited, ValidationFailed
from leases.fences import FENCE_MAX
from leases.models import Event, EventKind, LeaseState, LeaseStatus, Refusal
from leases.state import seconds_until, thresholds
from leases.waiting import MAX_WAIT_S, lease_acquire_waiting

MAX_NAME = 200
SLOT_STATES = [state.value for state in SlotState]
RUN_STATES = [state.value for state in RunState]
MAX_REASON = fleet.MAX_REASON_LENGTH
MAX_INTERVAL = fleet.MAX_INTERVAL_S
PAGE_PARAMS = [
    OpenApiParameter("cursor", str, description="From the previous page's X-Next-Cursor."),
    OpenApiParameter("limit", int, description="Page size, 1 to 500 (default 100)."),
    OpenApiParameter(
        "X-Next-Cursor",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description="The next page's cursor; absent on the last page.",
    ),
    OpenApiParameter(
        "Link",
        str,
        OpenApiParameter.HEADER,
        response=[200],
        description='The next page\'s URL: <url>; rel="next".',
    ),
]
IDEMPOTENCY_PARAMS = [
    OpenApiParameter(
        "Idempotency-Key",
        str,
        OpenApiParameter.HEADER,
        description="A repeat with the same key and body returns the first answer and creates "
        "nothing; the same key with another body answers idempotency_conflict.",
    )
]


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


# --- Presenters: domain objects to the contract's JSON ------------------------------------------


def lease_json(lease: LeaseSnapshot) -> dict[str, Any]:
    """A resource lease; a free one has no holder and no deadline."""
    state = lease.state
    held = state != LeaseState.FREE
    return {
        "resource": lease.resource,
        "kind": lease.kind,
        "holder": lease.holder or None if held else None,
        "process_id": lease.process_id or None if held else None,
        "fence": lease.fence,
        "state": str(state),
        "ttl_s": _num(lease.interval_s),
        "grace_s": _num(lease.grace_s),
        "acquired_at": lease.acquired_at if held else None,
        "renewed_at": lease.renewed_at if held else None,
        "expires_at": lease.deadline if held else None,
        "expires_in_s": lease.expires_in_s if held else None,
        "released_at": lease.released_at,
        "server_time": lease.server_time,
    }


def attempt_json(view: AttemptView) -> dict[str, Any]:
    """An attempt with the lease of its tenure, as of the database time of `view`.

    While the slot's lease is still this tenure's (same fence, held), the lease block carries its
    deadline and thresholds; once the tenure has ended or moved on they are null.
    """
    attempt, lease = view.attempt, view.lease
    current = lease.fence == attempt.fence and lease.status == "held"
    return _attempt_answer(
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
        last_report_at=selectors.last_report_at(attempt, lease),
        progress_percent=attempt.progress_percent,
        ended_at=attempt.ended_at,
        end_reason=attempt.end_reason,
        summary=attempt.summary,
    )


def report_row_json(
    row: tuple[Any, ...], *, attempt_id: int, fence: int, recorded_at: datetime | None = None
) -> dict[str, Any]:
    """`attempt_json(fleet.report_view(...))`, read straight off the row of a renewing report
    that selects only what its answer shows (`fleet.services.report_statement`, `answer_only`):
    the hot view's answer to the fleet's most frequent call, without the view's objects (their
    cost, docs/performance.md). `attempt_id` and
    `fence`: the report's own, which the statement matched. `recorded_at`: the report record
    written after the row was read (`fleet.services.heartbeat_record`), if one was."""
    (
        resource,
        holder,
        interval_s,
        grace_s,
        acquired_at,
        renewed_at,
        deadline,
        now,
        run_id,
        process_id,
        directive,
        claimed_at,
        last_recorded,
        ended_at,
        end_reason,
        summary,
        progress_percent,
        lane_id,
    ) = row
    # The statement renewed this tenure: its lease is held at the attempt's fence, and the
    # attempt is open.
    return _attempt_answer(
        attempt_id=attempt_id,
        run_id=run_id,
        slot_index=fleet.slot_index(resource),
        hand=holder,
        lane=selectors.lane_slug(lane_id),
        process_id=process_id,
        fence=fence,
        state=selectors.tenure_state(
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
        last_report_at=selectors.latest_report_at(
            recorded_at or last_recorded, fence, fence, renewed_at, acquired_at
        ),
        progress_percent=progress_percent,
        ended_at=ended_at,
        end_reason=end_reason,
        summary=summary,
    )


def _attempt_answer(
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
) -> dict[str, Any]:
    """The contract's attempt; `deadline` is None unless the lease is still this tenure's."""
    limits = thresholds(deadline, grace_s) if deadline is not None else None
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
            "heartbeat_interval_s": _num(interval_s),
            "grace_s": _num(grace_s),
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
    }


def slot_json(view: SlotView) -> dict[str, Any]:
    return {
        "index": view.slot.index,
        "state": view.state,
        "holder": view.holder,
        "fence": view.lease.fence,
        "expires_in_s": view.lease.expires_in_s if view.holder else None,
    }


def lane_json(lane: Lane) -> dict[str, Any]:
    return {
        "id": lane.pk,
        "slug": lane.slug,
        "name": lane.name,
        "heartbeat_interval_s": lane.heartbeat_interval_s,
        "grace_s": lane.grace_s,
        "closed_at": lane.closed_at,
        "created_at": lane.created_at,
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


def run_json(run: Run, counts: selectors.SlotCounts | None = None) -> dict[str, Any]:
    """A run; with `counts`, also how its slots stand now (`slots_by_state`)."""
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
        "slots": run.slot_count,
        "heartbeat_interval_s": run.heartbeat_interval_s,
        "grace_s": run.grace_s,
        "state": run.state,
        "created_at": run.created_at,
        "closed_at": run.closed_at,
        "work_package_key": run.work_package.key,
        "work_package_title": run.work_package.title,
        **extra,
    }


def runs_json(runs: list[Run]) -> list[dict[str, Any]]:
    """A page of runs with their slots counted (one query for the page)."""
    counts = selectors.runs_slot_counts(runs)
    return [run_json(run, counts[run.pk]) for run in runs]


def hand_json(hand: Hand) -> dict[str, Any]:
    return {
        "id": hand.pk,
        "name": hand.name,
        "lane": hand.lane.slug if hand.lane_id else None,
        "is_supervisor": hand.is_supervisor,
        "created_at": hand.created_at,
    }


def key_json(key: HandKey) -> dict[str, Any]:
    """A key without its secret (the secret is shown once, at issue, and never stored)."""
    return {
        "prefix": key.prefix,
        "hand": key.hand.name,
        "scopes": key.scopes,
        "lane": key.lane.slug if key.lane_id else None,
        "expires_at": key.expires_at,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
        "revoke_reason": key.revoke_reason or None,
    }


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


# --- Output serializers: the OpenAPI schema of the presenters' JSON -----------------------------


class AttemptLeaseOut(serializers.Serializer):
    resource = serializers.CharField()
    fence = serializers.IntegerField(help_text="This attempt's fence: carry it on every write.")
    current_fence = serializers.IntegerField(help_text="The slot lease's fence now.")
    holder = serializers.CharField()
    heartbeat_interval_s = serializers.FloatField()
    grace_s = serializers.FloatField()
    expires_at = serializers.DateTimeField(allow_null=True)
    expires_in_s = serializers.FloatField(allow_null=True)
    server_time = serializers.DateTimeField()
    late_at = serializers.DateTimeField(allow_null=True)
    stalled_at = serializers.DateTimeField(allow_null=True)
    lost_at = serializers.DateTimeField(allow_null=True)


class AttemptOut(serializers.Serializer):
    id = serializers.IntegerField()
    run = serializers.IntegerField()
    slot = serializers.IntegerField()
    hand = serializers.CharField()
    lane = serializers.CharField()
    process_id = serializers.CharField()
    fence = serializers.IntegerField()
    state = serializers.ChoiceField(choices=selectors.ATTEMPT_STATES)
    directive = serializers.ChoiceField(choices=Directive.choices)
    lease = AttemptLeaseOut()
    claimed_at = serializers.DateTimeField()
    last_report_at = serializers.DateTimeField(allow_null=True)
    progress_percent = serializers.FloatField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField(allow_null=True)
    summary = serializers.CharField(allow_null=True)


class LeaseOut(serializers.Serializer):
    resource = serializers.CharField()
    kind = serializers.CharField()
    holder = serializers.CharField(allow_null=True)
    process_id = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField()
    state = serializers.ChoiceField(choices=selectors.LEASE_STATES)
    ttl_s = serializers.FloatField()
    grace_s = serializers.FloatField()
    acquired_at = serializers.DateTimeField(allow_null=True)
    renewed_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    expires_in_s = serializers.FloatField(allow_null=True)
    released_at = serializers.DateTimeField(allow_null=True)
    server_time = serializers.DateTimeField()


class SlotOut(serializers.Serializer):
    index = serializers.IntegerField()
    state = serializers.ChoiceField(choices=SLOT_STATES)
    holder = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField()
    expires_in_s = serializers.FloatField(allow_null=True)


class MeOut(serializers.Serializer):
    hand = serializers.CharField()
    workspace = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    key_prefix = serializers.CharField()
    lane = serializers.CharField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)


class BriefRunOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    brief = serializers.CharField(help_text="Markdown.")
    evidence_required = serializers.ListField(child=serializers.CharField())


class BriefPackageOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    key = serializers.CharField()
    external_ref = serializers.CharField(allow_null=True)


class BriefLaneOut(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()


class BriefOut(serializers.Serializer):
    attempt = AttemptOut()
    run = BriefRunOut()
    work_package = BriefPackageOut()
    lane = BriefLaneOut()


class ReportOut(serializers.Serializer):
    renewed = serializers.BooleanField()
    attempt = AttemptOut()


class ReleasedOut(serializers.Serializer):
    released = serializers.BooleanField()
    lease = LeaseOut()


class CheckOut(serializers.Serializer):
    valid = serializers.BooleanField()
    lease = LeaseOut()


class LaneOut(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()
    heartbeat_interval_s = serializers.IntegerField(allow_null=True)
    grace_s = serializers.IntegerField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class WorkPackageOut(serializers.Serializer):
    id = serializers.IntegerField()
    lane = serializers.CharField()
    key = serializers.CharField()
    title = serializers.CharField()
    external_ref = serializers.CharField(allow_null=True)
    state = serializers.ChoiceField(choices=PlanState.choices)
    created_at = serializers.DateTimeField()


class SlotsByStateOut(serializers.Serializer):
    open = serializers.IntegerField()
    held = serializers.IntegerField()
    done = serializers.IntegerField()


class RunOut(serializers.Serializer):
    id = serializers.IntegerField()
    work_package = serializers.IntegerField()
    lane = serializers.CharField()
    title = serializers.CharField()
    brief = serializers.CharField()
    evidence_required = serializers.ListField(child=serializers.CharField())
    slots = serializers.IntegerField()
    heartbeat_interval_s = serializers.IntegerField()
    grace_s = serializers.IntegerField()
    state = serializers.ChoiceField(
        choices=RunState.choices,
        help_text="open; closed by a supervisor; done once every slot was finished.",
    )
    created_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(
        allow_null=True, help_text="When it was closed, or became done."
    )
    work_package_key = serializers.CharField()
    work_package_title = serializers.CharField()
    slots_by_state = SlotsByStateOut(
        required=False, help_text="How many slots are open, held and done now (lists of runs)."
    )


class HandOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    lane = serializers.CharField(allow_null=True)
    is_supervisor = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class KeyOut(serializers.Serializer):
    prefix = serializers.CharField()
    hand = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    lane = serializers.CharField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    revoke_reason = serializers.CharField(allow_null=True)


class IssuedKeyOut(KeyOut):
    key = serializers.CharField(
        allow_null=True,
        help_text="gc_<prefix>_<secret>, shown once. Null in an Idempotency-Key replay: the "
        "secret is never stored.",
    )


class RefusalOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    code = serializers.CharField()
    message = serializers.CharField()
    hand = serializers.CharField(allow_null=True)
    key_prefix = serializers.CharField(allow_null=True)
    method = serializers.CharField()
    path = serializers.CharField()
    request_id = serializers.CharField()
    details = serializers.DictField()


class EventOut(serializers.Serializer):
    id = serializers.IntegerField()
    workspace = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=EventKind.choices)
    at = serializers.DateTimeField()
    actor = serializers.CharField(allow_null=True)
    hand = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    resource = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField(allow_null=True)
    data = serializers.DictField()


# --- Input serializers ---------------------------------------------------------------------------


class _JsonTyped:
    """JSON has types, and the API keeps them: a string field takes only a string, a number
    field only a number (not "30", not true). DRF's fields would coerce, and a fence or a ttl
    read from the wrong type is a client bug worth a clear validation_error, not a guess."""

    json_types: tuple[type, ...] = ()
    default_error_messages = {"type": "Expected {expected}."}
    expected = ""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) and bool not in self.json_types or not isinstance(
            data, self.json_types
        ):
            self.fail("type", expected=self.expected)  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class StrictCharField(_JsonTyped, serializers.CharField):
    json_types, expected = (str,), "a string"


class StrictSlugField(_JsonTyped, serializers.SlugField):
    json_types, expected = (str,), "a string"


class StrictIntegerField(_JsonTyped, serializers.IntegerField):
    json_types, expected = (int,), "an integer"


class StrictFloatField(_JsonTyped, serializers.FloatField):
    json_types, expected = (int, float), "a number"


class StrictBooleanField(_JsonTyped, serializers.BooleanField):
    json_types, expected = (bool,), "true or false"


def _name(**kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=MAX_NAME, **kwargs)


def _reason(**kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=MAX_REASON, **kwargs)


def _resource() -> serializers.CharField:
    return StrictCharField(
        max_length=lease_services.MAX_RESOURCE_LENGTH,
        trim_whitespace=False,
        help_text="Any name up to 512 characters, no control characters (a path is normal).",
    )


def _fence() -> serializers.IntegerField:
    return StrictIntegerField(min_value=0, max_value=FENCE_MAX)


class ClaimIn(serializers.Serializer):
    process_id = _name(help_text="The hand's process identity (host:pid, or any stable string).")
    slot = StrictIntegerField(required=False, allow_null=True, min_value=0)


class ReportIn(serializers.Serializer):
    fence = _fence()
    process_id = _name(required=False, allow_null=True)
    kind = serializers.ChoiceField(choices=ReportKind.choices)
    message = _reason(required=False, allow_blank=True)
    percent = StrictFloatField(required=False, allow_null=True, min_value=0, max_value=100)
    details = serializers.DictField(required=False, allow_null=True)


class ReleaseIn(serializers.Serializer):
    fence = _fence()
    process_id = _name()
    reason = _reason()


class AcquireIn(serializers.Serializer):
    resource = _resource()
    ttl_s = StrictFloatField(min_value=1, max_value=lease_services.MAX_TTL_S)
    process_id = _name()
    wait_s = StrictFloatField(required=False, default=0, min_value=0, max_value=MAX_WAIT_S)


class RenewIn(serializers.Serializer):
    resource = _resource()
    fence = _fence()
    process_id = _name()


class FencedResourceIn(serializers.Serializer):
    resource = _resource()
    fence = _fence()


class BreakIn(serializers.Serializer):
    resource = _resource()
    reason = _reason()


class LaneIn(serializers.Serializer):
    slug = StrictSlugField(max_length=100)
    name = _name(required=False, allow_blank=True)
    heartbeat_interval_s = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INTERVAL
    )
    grace_s = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_INTERVAL
    )


class WorkPackageIn(serializers.Serializer):
    title = _name()
    key = _name(help_text="Unique in the lane: creating a package whose key exists returns it.")
    external_ref = StrictCharField(
        max_length=500, required=False, allow_blank=True, allow_null=True
    )


class RunIn(serializers.Serializer):
    title = _name()
    brief = StrictCharField(
        required=False, allow_blank=True, default="", trim_whitespace=False
    )
    slots = StrictIntegerField(
        required=False, default=1, min_value=1, max_value=fleet.MAX_SLOTS
    )
    evidence_required = serializers.ListField(
        child=StrictCharField(max_length=64), required=False, default=list
    )
    heartbeat_interval_s = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INTERVAL
    )
    grace_s = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_INTERVAL
    )


class RunPatchIn(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=PlanState.choices,
        help_text="closed: no more claims. open: claims again (a run whose slots are all done "
        "reopens as done: reopen a slot or add slots to work on it again).",
    )


class SlotsAddIn(serializers.Serializer):
    count = StrictIntegerField(min_value=1, max_value=fleet.MAX_SLOTS)
    reason = _reason()


class SlotReopenIn(serializers.Serializer):
    reason = _reason()


class HandIn(serializers.Serializer):
    name = _name()
    lane = StrictSlugField(required=False, allow_null=True, help_text="A lane's slug.")


class KeyIn(serializers.Serializer):
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=fleet.ALL_SCOPES), allow_empty=False
    )
    expires_in_s = StrictFloatField(
        required=False, allow_null=True, min_value=1, max_value=366 * 86_400
    )
    lane = StrictSlugField(
        required=False, allow_null=True, help_text="Limit the key to this lane's runs."
    )
    revoke_when_done = StrictBooleanField(required=False, default=False)


class RevokeIn(serializers.Serializer):
    reason = _reason(required=False, allow_blank=True, default="")


class DirectiveIn(serializers.Serializer):
    directive = serializers.ChoiceField(choices=Directive.choices)


def created_or_found(created: bool) -> int:
    """201 for a new object; 200 when the create found the one that existed (a retry)."""
    return 201 if created else 200


def valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """The request body, validated; invalid input answers validation_error with `fields`."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _text_param(request: Request, name: str, *, max_length: int = MAX_NAME) -> str:
    """A free-text query parameter: no NUL (PostgreSQL cannot compare one), bounded length."""
    value = request.query_params.get(name, "")
    if "\x00" in value or len(value) > max_length:
        raise ValidationFailed(
            f"{name} must be text of at most {max_length} characters, without NUL",
            fields={name: [f"At most {max_length} characters, no NUL."]},
        )
    return value


def _choice_param(request: Request, name: str, choices: list[str]) -> str:
    value = request.query_params.get(name, "")
    if value and value not in choices:
        raise ValidationFailed(
            f"{name} must be one of {', '.join(choices)}",
            fields={name: [f"One of: {', '.join(choices)}."]},
        )
    return value


# --- The base class ------------------------------------------------------------------------------


class HandAPIView(APIView):
    """Every endpoint: a hand's key, its scope, the body limit and the key's rate limit.

    `required_scope` is a scope, a tuple of scopes any of which will do, or a dict by method.
    """

    authentication_classes = [HandKeyAuthentication]
    permission_classes = [ScopeRequired]
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    required_scope: str | tuple[str, ...] | dict[str, str | tuple[str, ...]] | None = None

    def perform_authentication(self, request: Request) -> None:
        super().perform_authentication(request)
        # A hot view (fleet/hot.py) may have counted this call already before handing it over:
        # count each call once.
        counted = request._request.META.get(RATE_COUNTED)
        if isinstance(counted, RateLimited):
            raise counted
        if counted is None:
            rate_limit(rate_caller(request.auth.prefix, request.auth.secret_hash))
        check_body_size(request)

    @property
    def hand(self) -> Hand:
        return self.request.user  # type: ignore[return-value]

    @property
    def key(self) -> HandKey:
        return self.request.auth  # type: ignore[return-value]

    @property
    def workspace_id(self) -> int:
        return self.hand.workspace_id

    @property
    def lane_id(self) -> int | None:
        return lane_id_of(self.request)


WORK = Scope.WORK.value
LEASES = Scope.LEASES.value
PLAN = Scope.PLAN.value
HANDS = Scope.HANDS.value
SUPERVISE = Scope.SUPERVISE.value
READ_ATTEMPT = (WORK, SUPERVISE)


# --- Hand calls -----------------------------------------------------------------------------------


class MeApi(HandAPIView):
    """Who the key belongs to: hand, workspace, scopes, key prefix and lane."""

    @extend_schema(tags=["hand"], responses={200: MeOut, **error_responses()})
    def get(self, request: Request) -> Response:
        key = self.key
        return Response(
            {
                "hand": self.hand.name,
                "workspace": self.hand.workspace.name,
                "scopes": key.scopes,
                "key_prefix": key.prefix,
                "lane": key.lane.slug if key.lane_id else None,
                "expires_at": key.expires_at,
            }
        )


class SlotsApi(HandAPIView):
    """A run's slots: open (free, or its holder lost), held, or done (finished: never handed
    out again unless a supervisor reopens it), with holder and fence; POST adds slots."""

    required_scope = {"GET": READ_ATTEMPT, "POST": PLAN}

    @extend_schema(
        tags=["hand"],
        parameters=[OpenApiParameter("state", str, enum=SLOT_STATES)],
        responses={
            200: SlotOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, run_id: int) -> Response:
        state = _choice_param(request, "state", SLOT_STATES)
        run = selectors.run_get(workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id)
        return Response([slot_json(view) for view in selectors.run_slots(run=run, state=state)])

    @extend_schema(
        tags=["plan"],
        request=SlotsAddIn,
        description="Add open slots to a run that is open or done (a done run is open again); "
        "recorded as the event slots_added with the reason.",
        responses={
            201: RunOut,
            **error_responses("scope_denied", "not_found", "run_closed", body=True),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        data = valid(SlotsAddIn, request)
        run = fleet.run_add_slots(
            workspace_id=self.workspace_id,
            run_id=run_id,
            count=data["count"],
            reason=data["reason"],
            actor=self.hand.name,
            lane_id=self.lane_id,
        )
        return Response(runs_json([run])[0], status=201)


class SlotReopenApi(HandAPIView):
    """Reopen a done slot: claimable again at the next fence; a done run is open again."""

    required_scope = PLAN

    @extend_schema(
        tags=["plan"],
        request=SlotReopenIn,
        description="Recorded as the event slot_reopened with the reason. The finished "
        "attempt and its evidence stay on record.",
        responses={
            200: SlotOut,
            **error_responses("scope_denied", "not_found", "slot_not_done", body=True),
        },
    )
    def post(self, request: Request, run_id: int, index: int) -> Response:
        data = valid(SlotReopenIn, request)
        view = fleet.slot_reopen(
            workspace_id=self.workspace_id,
            run_id=run_id,
            index=index,
            reason=data["reason"],
            actor=self.hand.name,
            lane_id=self.lane_id,
        )
        return Response(slot_json(view))


class RunsIndexApi(HandAPIView):
    """The workspace's runs (a lane-limited key: its lane's), newest first, with how their
    slots stand: how a hand finds work to claim."""

    required_scope = (WORK, PLAN, SUPERVISE)

    @extend_schema(
        tags=["hand"],
        parameters=[
            OpenApiParameter(
                "state", str, enum=RUN_STATES, description="open: runs that take claims."
            ),
            OpenApiParameter("lane", str, description="A lane's slug."),
            *PAGE_PARAMS,
        ],
        responses={
            200: RunOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            selectors.runs_of_workspace(
                workspace_id=self.workspace_id,
                state=_choice_param(request, "state", RUN_STATES),
                lane_slug=_text_param(request, "lane"),
                lane_id=self.lane_id,
            ),
            runs_json,
        )


class ClaimApi(HandAPIView):
    """Claim the lowest open slot of the run (or `slot`): a new tenure, fence + 1."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=ClaimIn,
        responses={
            201: AttemptOut,
            **error_responses(
                "scope_denied", "not_found", "no_open_slot", "slot_taken", "run_closed", body=True
            ),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        data = valid(ClaimIn, request)
        view = fleet.attempt_claim(
            hand=self.hand,
            run_id=run_id,
            process_id=data["process_id"],
            slot=data.get("slot"),
            lane_id=self.lane_id,
        )
        return Response(attempt_json(view), status=201)


class AttemptApi(HandAPIView):
    """One attempt with its computed state and the lease of its tenure."""

    required_scope = READ_ATTEMPT

    @extend_schema(
        tags=["hand"], responses={200: AttemptOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        return Response(attempt_json(selectors.attempt_view(attempt)))


class BriefApi(HandAPIView):
    """What the attempt is for: the run's brief, its required evidence, package and lane."""

    required_scope = READ_ATTEMPT

    @extend_schema(
        tags=["hand"], responses={200: BriefOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        run, package = attempt.run, attempt.run.work_package
        return Response(
            {
                "attempt": attempt_json(selectors.attempt_view(attempt)),
                "run": {
                    "id": run.pk,
                    "title": run.title,
                    "brief": run.brief,
                    "evidence_required": run.evidence_required,
                },
                "work_package": {
                    "id": package.pk,
                    "title": package.title,
                    "key": package.key,
                    "external_ref": package.external_ref or None,
                },
                "lane": {"slug": attempt.lane.slug, "name": attempt.lane.name},
            }
        )


TENURE_ERRORS = ("scope_denied", "not_found", "not_holder", "lease_lost", "stale_fence")


class ReportApi(HandAPIView):
    """Heartbeat, progress, blocker or note. With the claim's process_id it renews the lease
    (renewed: true); without, it is recorded only; another process_id is refused.
    """

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=ReportIn,
        responses={
            200: ReportOut,
            **error_responses(*TENURE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(ReportIn, request)
        renewed, view = fleet.attempt_report(
            hand=self.hand,
            attempt_id=attempt_id,
            fence=data["fence"],
            kind=data["kind"],
            process_id=data.get("process_id"),
            message=data.get("message") or "",
            percent=data.get("percent"),
            details=data.get("details"),
            lane_id=self.lane_id,
        )
        return Response({"renewed": renewed, "attempt": attempt_json(view)})


class ReleaseApi(HandAPIView):
    """Give the slot back with a reason; it is open again at once."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=ReleaseIn,
        responses={
            200: AttemptOut,
            **error_responses(*TENURE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(ReleaseIn, request)
        view = fleet.attempt_release(
            hand=self.hand,
            attempt_id=attempt_id,
            fence=data["fence"],
            process_id=data["process_id"],
            reason=data["reason"],
            lane_id=self.lane_id,
        )
        return Response(attempt_json(view))


# --- Resource leases ------------------------------------------------------------------------------


class LeaseAcquireApi(HandAPIView):
    """Take a resource lease (see the operation's description)."""

    required_scope = LEASES

    @extend_schema(
        tags=["leases"],
        request=AcquireIn,
        description="Take the resource if free (fence + 1), or renew it if the caller holds it. "
        "With wait_s the request is held until the resource frees or the wait ends.",
        responses={201: LeaseOut, **error_responses("scope_denied", "lease_held", body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(AcquireIn, request)
        lease = lease_acquire_waiting(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            holder=self.hand.name,
            process_id=data["process_id"],
            ttl_s=data["ttl_s"],
            wait_s=data["wait_s"],
        )
        return Response(lease_json(lease), status=201)


FENCED_LEASE_ERRORS = ("scope_denied", "not_found", "not_holder", "lease_lost", "stale_fence")


class LeaseRenewApi(HandAPIView):
    """Push the lease's deadline to now + ttl_s, for the current fence and process."""

    required_scope = LEASES

    @extend_schema(
        tags=["leases"],
        request=RenewIn,
        responses={
            200: LeaseOut,
            **error_responses(*FENCED_LEASE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(RenewIn, request)
        lease = lease_services.lease_renew(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            holder=self.hand.name,
            fence=data["fence"],
            process_id=data["process_id"],
        )
        return Response(lease_json(lease))


class LeaseReleaseApi(HandAPIView):
    """End the tenure now; the resource is free at once and the fence stays."""

    required_scope = LEASES

    @extend_schema(
        tags=["leases"],
        request=FencedResourceIn,
        responses={200: ReleasedOut, **error_responses(*FENCED_LEASE_ERRORS, body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(FencedResourceIn, request)
        lease = lease_services.lease_release(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            holder=self.hand.name,
            fence=data["fence"],
        )
        return Response({"released": True, "lease": lease_json(lease)})


class LeaseCheckApi(HandAPIView):
    """Is this fence the current, unexpired tenure of the resource?"""

    required_scope = (LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        request=FencedResourceIn,
        description="Is this fence the current, unexpired tenure? Ask before applying a write.",
        responses={
            200: CheckOut,
            **error_responses("scope_denied", "not_found", "lease_lost", "stale_fence", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(FencedResourceIn, request)
        lease = lease_services.lease_check(
            workspace_id=self.workspace_id, resource=data["resource"], fence=data["fence"]
        )
        return Response({"valid": True, "lease": lease_json(lease)})


class LeaseListApi(HandAPIView):
    """Resource leases of the workspace, newest first, by prefix, holder and state."""

    required_scope = (LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        parameters=[
            OpenApiParameter("prefix", str, description="Resources starting with this."),
            OpenApiParameter("holder", str, description="A hand's name."),
            OpenApiParameter("state", str, enum=selectors.LEASE_STATES),
            *PAGE_PARAMS,
        ],
        responses={200: LeaseOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        leases = selectors.leases_list(
            workspace_id=self.workspace_id,
            prefix=params.get("prefix", ""),
            holder=params.get("holder", ""),
            state=_choice_param(request, "state", selectors.LEASE_STATES),
        )
        return paginated(
            request, leases, lambda rows: [lease_json(s) for s in selectors.lease_snapshots(rows)]
        )


class LeaseBreakApi(HandAPIView):
    """Break a lease (see the operation's description)."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        request=BreakIn,
        description="Free the resource now; its fence moves on (+1), so the old holder's every "
        "later write is stale. Breaking a slot's lease ends its attempt as lost.",
        responses={200: LeaseOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(BreakIn, request)
        lease = fleet.lease_break(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            actor=self.hand.name,
            reason=data["reason"],
        )
        return Response(lease_json(lease))


# --- Supervisor calls: the plan ------------------------------------------------------------------

PLAN_READ = (PLAN, SUPERVISE)
CREATED_OR_FOUND = "201 when created; 200 with the existing object when it already existed."


class LanesApi(HandAPIView):
    """Lanes: standing streams of work, with default heartbeat interval and grace."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    @extend_schema(
        tags=["plan"],
        parameters=PAGE_PARAMS,
        responses={200: LaneOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            selectors.lanes_list(workspace_id=self.workspace_id, lane_id=self.lane_id),
            lambda rows: [lane_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=LaneIn,
        parameters=IDEMPOTENCY_PARAMS,
        description=CREATED_OR_FOUND,
        responses={
            201: LaneOut,
            200: LaneOut,
            **error_responses("scope_denied", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(LaneIn, request)

        def create() -> Response:
            lane, created = fleet.lane_create(
                workspace=self.hand.workspace,
                slug=data["slug"],
                name=data.get("name") or "",
                heartbeat_interval_s=data.get("heartbeat_interval_s"),
                grace_s=data.get("grace_s"),
            )
            return Response(lane_json(lane), status=created_or_found(created))

        return idempotent(request, create)


class WorkPackagesApi(HandAPIView):
    """A lane's work packages (idempotent on their key)."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    def _lane(self, slug: str) -> Lane:
        return selectors.lane_get(workspace_id=self.workspace_id, slug=slug, lane_id=self.lane_id)

    @extend_schema(
        tags=["plan"],
        parameters=PAGE_PARAMS,
        responses={
            200: WorkPackageOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        return paginated(
            request,
            selectors.work_packages_list(lane=self._lane(slug)),
            lambda rows: [work_package_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=WorkPackageIn,
        parameters=IDEMPOTENCY_PARAMS,
        description="Idempotent on the package's key in the lane: " + CREATED_OR_FOUND,
        responses={
            201: WorkPackageOut,
            200: WorkPackageOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        data = valid(WorkPackageIn, request)
        lane = self._lane(slug)

        def create() -> Response:
            package, created = fleet.work_package_create(
                lane=lane,
                key=data["key"],
                title=data["title"],
                external_ref=data.get("external_ref") or "",
            )
            return Response(work_package_json(package), status=created_or_found(created))

        return idempotent(request, create)


class RunsApi(HandAPIView):
    """A work package's runs, each with its brief, required evidence and slots."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    def _package(self, work_package_id: int) -> WorkPackage:
        return selectors.work_package_get(
            workspace_id=self.workspace_id, work_package_id=work_package_id, lane_id=self.lane_id
        )

    @extend_schema(
        tags=["plan"],
        parameters=PAGE_PARAMS,
        responses={
            200: RunOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, work_package_id: int) -> Response:
        return paginated(
            request,
            selectors.runs_list(work_package=self._package(work_package_id)),
            lambda rows: [run_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=RunIn,
        parameters=IDEMPOTENCY_PARAMS,
        responses={
            201: RunOut,
            **error_responses(
                "scope_denied", "not_found", "run_closed", "idempotency_conflict", body=True
            ),
        },
    )
    def post(self, request: Request, work_package_id: int) -> Response:
        data = valid(RunIn, request)
        package = self._package(work_package_id)

        def create() -> Response:
            run = fleet.run_create(work_package=package, **data)
            return Response(run_json(run), status=201)

        return idempotent(request, create)


class RunApi(HandAPIView):
    """One run; PATCH its state to close or reopen it."""

    required_scope = {"GET": (PLAN, SUPERVISE, WORK), "PATCH": PLAN}

    @extend_schema(
        tags=["plan"], responses={200: RunOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id)
        return Response(run_json(run))

    @extend_schema(
        tags=["plan"],
        request=RunPatchIn,
        description="Close a run (it takes no more claims; its attempts go on) or reopen it.",
        responses={200: RunOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def patch(self, request: Request, run_id: int) -> Response:
        data = valid(RunPatchIn, request)
        # Looked up first so a lane-limited key cannot touch another lane's run.
        run = selectors.run_get(workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id)
        run = fleet.run_set_state(
            workspace_id=self.workspace_id, run_id=run.pk, state=data["state"], actor=self.hand.name
        )
        return Response(run_json(selectors.run_get(workspace_id=self.workspace_id, run_id=run.pk)))


# --- Supervisor calls: hands and keys -------------------------------------------------------------


class HandsApi(HandAPIView):
    """Hands: agent identities, each with its own keys."""

    required_scope = {"GET": (HANDS, SUPERVISE), "POST": HANDS}

    @extend_schema(
        tags=["hands"],
        parameters=PAGE_PARAMS,
        responses={200: HandOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            selectors.hands_list(workspace_id=self.workspace_id),
            lambda rows: [hand_json(x) for x in rows],
        )

    @extend_schema(
        tags=["hands"],
        request=HandIn,
        parameters=IDEMPOTENCY_PARAMS,
        description=CREATED_OR_FOUND,
        responses={
            201: HandOut,
            200: HandOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(HandIn, request)
        lane = (
            selectors.lane_get(workspace_id=self.workspace_id, slug=data["lane"])
            if data.get("lane")
            else None
        )

        def create() -> Response:
            hand, created = fleet.hand_create(
                workspace=self.hand.workspace, name=data["name"], lane=lane
            )
            return Response(hand_json(hand), status=created_or_found(created))

        return idempotent(request, create)


class HandKeysApi(HandAPIView):
    """A hand's keys (never their secrets); POST mints one."""

    required_scope = HANDS

    @extend_schema(
        tags=["hands"],
        parameters=PAGE_PARAMS,
        responses={
            200: KeyOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, name: str) -> Response:
        hand = selectors.hand_get(workspace_id=self.workspace_id, name=name)
        return paginated(
            request, selectors.keys_list(hand=hand), lambda rows: [key_json(x) for x in rows]
        )

    @extend_schema(
        tags=["hands"],
        request=KeyIn,
        parameters=IDEMPOTENCY_PARAMS,
        description="Mint a key for the hand. The key is in this answer only; the server keeps "
        "its prefix and a hash. A key can grant only scopes its issuer holds.",
        responses={
            201: IssuedKeyOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        data = valid(KeyIn, request)
        hand = selectors.hand_get(workspace_id=self.workspace_id, name=name)
        lane = (
            selectors.lane_get(workspace_id=self.workspace_id, slug=data["lane"])
            if data.get("lane")
            else None
        )

        def create() -> Response:
            issued = fleet.key_issue_by(
                issuer=self.key,
                hand=hand,
                scopes=data["scopes"],
                expires_in_s=data.get("expires_in_s"),
                lane=lane,
                revoke_when_done=data["revoke_when_done"],
            )
            return Response({"key": issued.plaintext, **key_json(issued.key)}, status=201)

        return idempotent(request, create, stored=lambda body: {**body, "key": None})


class KeyRevokeApi(HandAPIView):
    """Revoke a key by its prefix."""

    required_scope = HANDS

    @extend_schema(
        tags=["hands"],
        request=RevokeIn,
        description="Revoke now: the key's very next call is refused with key_revoked.",
        responses={200: KeyOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def post(self, request: Request, prefix: str) -> Response:
        data = valid(RevokeIn, request)
        key = fleet.key_revoke(
            workspace_id=self.workspace_id,
            prefix=prefix,
            actor=self.hand.name,
            reason=data.get("reason") or "",
            lane_id=self.lane_id,
        )
        return Response(key_json(key))


# --- Supervisor calls: watching and steering ------------------------------------------------------


class AttemptsApi(HandAPIView):
    """Every attempt of the workspace, newest first, by state, lane, hand and run."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("state", str, enum=selectors.ATTEMPT_STATES),
            OpenApiParameter("lane", str, description="A lane's slug."),
            OpenApiParameter("hand", str, description="A hand's name."),
            OpenApiParameter("run", int, description="A run's id."),
            *PAGE_PARAMS,
        ],
        responses={
            200: AttemptOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        attempts = selectors.attempts_list(
            workspace_id=self.workspace_id,
            state=_choice_param(request, "state", selectors.ATTEMPT_STATES),
            lane_slug=params.get("lane", ""),
            hand_name=params.get("hand", ""),
            run_id=_int_param(request, "run"),
            lane_id=self.lane_id,
        )
        return paginated(
            request, attempts, lambda rows: [attempt_json(v) for v in selectors.attempt_views(rows)]
        )


class DirectiveApi(HandAPIView):
    """Set an attempt's directive: continue, pause or stop."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        request=DirectiveIn,
        description="continue, pause or stop: the hand reads it in its next report's answer.",
        responses={
            200: AttemptOut,
            **error_responses("scope_denied", "not_found", "lease_lost", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(DirectiveIn, request)
        # Looked up first so a lane-limited key cannot steer another lane's attempt.
        selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        view = fleet.attempt_set_directive(
            workspace_id=self.workspace_id,
            attempt_id=attempt_id,
            directive=data["directive"],
            actor=self.hand.name,
        )
        return Response(attempt_json(view))


class RefusalsApi(HandAPIView):
    """Every refused call, newest first: time, hand, key prefix, method, path, code, request id."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("code", str, description="A code from the contract's table."),
            OpenApiParameter("hand", str, description="A hand's name."),
            *PAGE_PARAMS,
        ],
        responses={
            200: RefusalOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        refusals = selectors.refusals_list(
            workspace_id=self.workspace_id,
            code=request.query_params.get("code", ""),
            hand_name=request.query_params.get("hand", ""),
        )
        return paginated(request, refusals, lambda rows: [refusal_json(x) for x in rows])


class EventsApi(HandAPIView):
    """The append-only record of transitions, newest first."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("kind", str, enum=[kind.value for kind in EventKind]),
            OpenApiParameter(
                "since",
                str,
                description="An ISO 8601 time (events at or after it) or an event id (events "
                "after it).",
            ),
            OpenApiParameter("hand", str, description="A hand's name."),
            OpenApiParameter("attempt", int, description="An attempt's id."),
            *PAGE_PARAMS,
        ],
        responses={
            200: EventOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        since_at, since_id = _since_param(request)
        events = selectors.events_list(
            workspace_id=self.workspace_id,
            kind=_choice_param(request, "kind", [kind.value for kind in EventKind]),
            since=since_at,
            after_id=since_id,
            hand_name=request.query_params.get("hand", ""),
            attempt_id=_int_param(request, "attempt"),
        )
        return paginated(request, events, lambda rows: [event_json(x) for x in rows])


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not (0 <= value < 2**63):
        raise ValidationFailed(f"{name} must be an id", fields={name: ["A positive integer."]})
    return value


def _since_param(request: Request) -> tuple[datetime | None, int | None]:
    raw = request.query_params.get("since", "")
    if raw == "":
        return None, None
    if raw.isdigit():
        return None, _int_param(request, "since")
    try:
        at = parse_datetime(raw)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValidationFailed(
            "since must be an ISO 8601 time with a zone, or an event id",
            fields={"since": ["An ISO 8601 time with a zone (2030-01-01T12:00:00Z) or an id."]},
        )
    return at, None
