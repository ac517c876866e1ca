"""What happened, for supervisors: every refused call and every event, newest first."""

from __future__ import annotations

from datetime import datetime

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.api import paginated
from apikit.errors import ValidationFailed
from apikit.inputs import PAGE_PARAMS, choice_param, whole_number
from apikit.openapi import error_responses
from apikit.reads import REPLICA_HEADERS, replica_list
from fleet import records as fleet_records
from fleet.api.presenters import event_json, refusal_json
from fleet.api.schemas import EventOut, RefusalOut
from hands.views import SUPERVISE, HandAPIView
from leases.models import EventKind


class RefusalsApi(HandAPIView):
    """Every refused call, newest first: time, hand, key prefix, method, path, code, request id."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("code", str, description="A code from the contract's table."),
            OpenApiParameter("hand", str, description="A hand's name."),
            *PAGE_PARAMS,
            *REPLICA_HEADERS,
        ],
        responses={
            200: RefusalOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    @replica_list
    def get(self, request: Request) -> Response:
        refusals = fleet_records.refusals_list(
            workspace_id=self.workspace_id,
            code=request.query_params.get("code", ""),
            hand_name=request.query_params.get("hand", ""),
            lane_id=self.lane_id,
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
            *REPLICA_HEADERS,
        ],
        responses={
            200: EventOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    @replica_list
    def get(self, request: Request) -> Response:
        since_at, since_id = since_param(request)
        events = fleet_records.events_list(
            workspace_id=self.workspace_id,
            kind=choice_param(request, "kind", [kind.value for kind in EventKind]),
            since=since_at,
            after_id=since_id,
            hand_name=request.query_params.get("hand", ""),
            attempt_id=int_param(request, "attempt"),
            lane_id=self.lane_id,
        )
        if concealing.unnamed(request.query_params.get("hand", "")):  # another lane's hand
            events = events.none()
        return paginated(request, events, lambda rows: [event_json(x) for x in rows])


def int_param(request: Request, name: str) -> int | None:
    """An id in ASCII digits (`apikit.inputs.whole_number`), or None when absent."""
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    value = whole_number(raw)
    if value is None or value >= 2**63:
        raise ValidationFailed(
            f"{name} must be an id in ASCII digits", fields={name: ["A positive integer."]}
        )
    return value


def since_param(request: Request) -> tuple[datetime | None, int | None]:
    raw = request.query_params.get("since", "")
    if raw == "":
        return None, None
    if raw.isascii() and raw.isdigit():
        return None, int_param(request, "since")
    try:
        # ASCII only: Django's parse_datetime reads any script's digits (its pattern's \d).
        at = parse_datetime(raw) if raw.isascii() else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise ValidationFailed(
            "since must be an ISO 8601 time with a zone, or an event id",
            fields={"since": ["An ISO 8601 time with a zone (2030-01-01T12:00:00Z) or an id."]},
        )
    return at, None
