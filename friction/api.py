"""Friction over REST: file a report (`POST /friction`), list them (`GET /friction`), export
them as Markdown or JSON (`GET /friction/export?format=markdown|json`)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import FormatChoice, paginated
from apikit.concealing import CONCEALED, concealed
from apikit.inputs import PAGE_PARAMS, StrictCharField, StrictIntegerField, text_param, valid
from apikit.openapi import error_responses
from fleet.api.records import since_param
from friction import selectors
from friction import services as friction_services
from friction.models import FrictionRefusal, FrictionReport
from hands.views import MAX_NAME, SUPERVISE, WORK, HandAPIView


def refusal_link_json(link: FrictionRefusal) -> dict[str, Any]:
    return {
        "request_id": link.request_id,
        "refusal": link.refusal_id,
        "code": link.code,
        "at": link.at,
        "hand": link.hand or None,
        "method": link.method,
        "path": link.path,
        "message": link.message,
    }


def friction_json(report: FrictionReport) -> dict[str, Any]:
    return {
        "id": report.pk,
        "at": report.at,
        "lane": report.lane.slug if report.lane else None,
        "run": report.run_id,
        "attempt": report.attempt_id,
        "hand": report.hand,
        "key_prefix": report.key_prefix or None,
        "what": report.what,
        "instead": report.instead,
        "minutes": report.minutes,
        "refusals": [refusal_link_json(link) for link in report.refusals.all()],
    }


class FrictionIn(serializers.Serializer):
    what = StrictCharField(
        max_length=friction_services.MAX_TEXT_LENGTH,
        trim_whitespace=False,
        help_text="What got in the way.",
    )
    instead = StrictCharField(
        max_length=friction_services.MAX_TEXT_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        trim_whitespace=False,
        help_text="What the filer did instead.",
    )
    minutes = StrictIntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=friction_services.MAX_MINUTES,
        help_text="Minutes lost.",
    )
    lane = StrictCharField(
        max_length=MAX_NAME,
        required=False,
        allow_null=True,
        help_text="A lane's slug (default: the run's, else the key's or the hand's lane).",
    )
    run = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    attempt = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)
    refusals = serializers.ListField(
        child=StrictCharField(max_length=128, trim_whitespace=False),
        required=False,
        default=list,
        max_length=friction_services.MAX_REFUSALS,
        help_text="Request ids (X-Request-ID) of refused calls the report is about, each one "
        "of this workspace's refusals.",
    )


class FrictionRefusalOut(serializers.Serializer):
    request_id = serializers.CharField()
    refusal = serializers.IntegerField(help_text="The refusal's id (refusals are pruned later).")
    code = serializers.CharField()
    at = serializers.DateTimeField()
    hand = serializers.CharField(allow_null=True)
    method = serializers.CharField()
    path = serializers.CharField()
    message = serializers.CharField()


class FrictionOut(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    lane = serializers.CharField(allow_null=True)
    run = serializers.IntegerField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    hand = serializers.CharField(allow_null=True, help_text=f"Who filed it. {CONCEALED}")
    key_prefix = serializers.CharField(allow_null=True)
    what = serializers.CharField()
    instead = serializers.CharField()
    minutes = serializers.IntegerField()
    refusals = FrictionRefusalOut(many=True)


FILTER_PARAMS = [
    OpenApiParameter("lane", str, description="A lane's slug."),
    OpenApiParameter("since", str, description="An ISO 8601 time: reports filed at or after it."),
]


def _reports(view: HandAPIView, request: Request) -> Any:
    since, after_id = since_param(request)
    reports = selectors.friction_list(
        workspace_id=view.workspace_id,
        lane_id=view.lane_id,
        lane_slug=text_param(request, "lane", max_length=MAX_NAME),
        since=since,
    )
    return reports if after_id is None else reports.filter(pk__gt=after_id)


class FrictionApi(HandAPIView):
    """Friction reports: POST files one (a hand for its own lane and attempts, a supervisor
    for any lane); GET lists them, newest first, each with its linked refusals."""

    required_scope = {"GET": SUPERVISE, "POST": (WORK, SUPERVISE)}

    @extend_schema(
        tags=["supervisor"],
        parameters=[*FILTER_PARAMS, *PAGE_PARAMS],
        responses={
            200: FrictionOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        return paginated(
            request, _reports(self, request), lambda rows: [friction_json(x) for x in rows]
        )

    @extend_schema(
        tags=["hand"],
        request=FrictionIn,
        description="Recorded with the event friction (a webhook kind) in the same transaction. "
        "Each request id in `refusals` links that refused call (its code, time and call) to "
        "the report.",
        responses={
            201: FrictionOut,
            **error_responses("scope_denied", "not_found", "not_holder", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(FrictionIn, request)
        report = friction_services.friction_file(
            hand=self.hand,
            key=self.key,
            what=data["what"],
            instead=data["instead"],
            minutes=data["minutes"],
            lane=data.get("lane"),
            run_id=data.get("run"),
            attempt_id=data.get("attempt"),
            refusals=data["refusals"],
        )
        report = selectors.friction_list(workspace_id=self.workspace_id).get(pk=report.pk)
        return Response(friction_json(report), status=201)


class MarkdownRenderer(BaseRenderer):
    media_type = "text/markdown"
    format = "markdown"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        return data.encode("utf-8") if isinstance(data, str) else data


class FrictionExportApi(FormatChoice, HandAPIView):
    """Every report that matches (the newest `EXPORT_LIMIT`), as Markdown to paste into an
    issue tracker (`?format=markdown`) or as JSON (`?format=json`, the default), for download."""

    required_scope = SUPERVISE
    formats_said = "markdown or json"
    renderer_classes = [JSONRenderer, MarkdownRenderer]

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("format", str, enum=["json", "markdown"]),
            *FILTER_PARAMS,
        ],
        responses={
            (200, "application/json"): FrictionOut(many=True),
            (200, "text/markdown"): OpenApiResponse(
                response=str, description="A Markdown table of the reports and their total."
            ),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        rows = list(_reports(self, request).order_by("-id")[: selectors.EXPORT_LIMIT])
        markdown = request.accepted_renderer.format == MarkdownRenderer.format
        if markdown:
            # Text the concealing filter cannot read: a hand of another lane (to a lane-limited
            # key) files unnamed here, as in the JSON (these rows are never saved).
            hidden = concealed(report.hand for report in rows)
            for report in rows:
                if report.hand in hidden:
                    report.hand = report.key_prefix = ""
            body: Any = selectors.friction_markdown(rows, title="Friction reports")
        else:
            body = [friction_json(report) for report in rows]
        response = Response(body)
        extension = "md" if markdown else "json"
        response["Content-Disposition"] = f'attachment; filename="friction.{extension}"'
        return response
