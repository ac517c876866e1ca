"""A run's timeline (`GET /runs/{id}/timeline`): every entry of the run oldest first, a page at a
time, or all of them as JSON Lines (`?format=jsonl`), streamed a page at a time."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, FormatChoice
from apikit.concealing import CONCEALED, conceal_answer
from apikit.context import call_context, current_call
from apikit.errors import ValidationFailed
from apikit.inputs import PAGE_PARAMS, whole_number
from apikit.openapi import error_responses
from fleet import timeline
from fleet.plan import selectors as plan_selectors
from hands.views import PLAN, SUPERVISE, HandAPIView

JSONL = "application/jsonl"


class TimelineEntryOut(serializers.Serializer):
    id = serializers.CharField(
        help_text="Stable and unique within the run: the source and its row (event-12, "
        "report-40, verification-3, refusal-7)."
    )
    at = serializers.DateTimeField()
    kind = serializers.CharField(
        help_text="An event's kind as recorded (claimed, late, stalled, lost, finished, "
        "released, directive_set, lease_acquired, lease_released, lease_expired, lease_broken, "
        "attested, friction, handoff_*, ...), or report, fence_verified, refusal."
    )
    hand = serializers.CharField(allow_null=True, help_text=CONCEALED)
    process_id = serializers.CharField(allow_null=True, help_text=CONCEALED)
    attempt = serializers.IntegerField(allow_null=True)
    slot = serializers.IntegerField(allow_null=True)
    resource = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField(allow_null=True)
    text = serializers.CharField(help_text="What happened, as a sentence.")
    data = serializers.DictField(help_text="The record's own fields (an event's data, ...).")


class JsonLinesRenderer(BaseRenderer):
    """`?format=jsonl`: the view answers a stream itself; this only lets DRF accept the format."""

    media_type = JSONL
    format = "jsonl"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        return json.dumps(data).encode()


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    size = whole_number(raw) or 0
    if not (1 <= size <= MAX_PAGE_SIZE):
        raise ValidationFailed(
            f"limit must be an integer from 1 to {MAX_PAGE_SIZE}",
            fields={"limit": [f"An integer from 1 to {MAX_PAGE_SIZE}."]},
        )
    return size


def _lines(
    scope: timeline.TimelineScope,
    conceal: Callable[[frozenset[str]], frozenset[str]] | None,
) -> Iterator[bytes]:
    """Every entry, one JSON object a line, read a page at a time. The stream is read after the
    view has returned, so the caller's concealing rule is set again around each page."""
    for page in timeline.timeline_all(scope):
        with call_context(conceal=conceal):
            rows = conceal_answer([entry.json() for entry in page])
        yield b"".join(json.dumps(row, separators=(",", ":")).encode() + b"\n" for row in rows)


class RunTimelineApi(FormatChoice, HandAPIView):
    """Everything that happened under a run, oldest first."""

    required_scope = (PLAN, SUPERVISE)
    formats_said = "json or jsonl"
    renderer_classes = [JSONRenderer, JsonLinesRenderer]

    @extend_schema(
        tags=["supervisor"],
        description="The run's timeline, oldest first: every claim, report, directive, "
        "late/stalled/lost, finish and release of its attempts; the resource leases each "
        "attempt's hand took with the attempt's process identity during its tenure, and their "
        "ends; the fences of those tenures someone verified; attestations backing its "
        "attempts; its hands' friction reports and refused calls during their tenures, and "
        "refused calls on the run's paths; handoffs of its slots. Each entry has a sentence. "
        "Paginated by `cursor` (X-Next-Cursor), in a total order (time, then events, reports, "
        "fence verifications, refusals, then each one's id). `format=jsonl` answers every "
        "entry as JSON Lines (application/jsonl), unpaginated.",
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=["json", "jsonl"],
                description="jsonl: every entry, one JSON object a line (application/jsonl).",
            ),
            *PAGE_PARAMS,
        ],
        responses={
            (200, "application/json"): TimelineEntryOut(many=True),
            (200, JSONL): OpenApiResponse(
                response=str, description="Every entry, one JSON object (as in the list) a line."
            ),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, run_id: int) -> Any:
        run = plan_selectors.run_get(
            workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id
        )
        conceal = current_call().conceal
        scope = timeline.timeline_scope(run, conceal=conceal, lane_id=self.lane_id)
        if request.accepted_renderer.format == JsonLinesRenderer.format:
            response = StreamingHttpResponse(_lines(scope, conceal), content_type=JSONL)
            response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-timeline.jsonl"'
            return response
        raw = request.query_params.get("cursor", "")
        after = timeline.position_from_cursor(raw) if raw else None
        entries, next_position = timeline.timeline_page(scope, after=after, limit=_limit(request))
        answer = Response([entry.json() for entry in entries])
        if next_position is not None:
            cursor = next_position.cursor()
            query = request.query_params.copy()
            query["cursor"] = cursor
            answer["Link"] = (
                f'<{request.build_absolute_uri(request.path)}?{query.urlencode()}>; rel="next"'
            )
            answer["X-Next-Cursor"] = cursor
        return answer
