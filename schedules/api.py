"""Schedules and GitHub integrations over REST, under their lane; and the endpoint GitHub
delivers to, trusted by its signature rather than a key."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apikit.api import LimitedJSONParser, check_body_size, decode_json, max_body_bytes, paginated
from apikit.clients import client_address
from apikit.errors import PayloadTooLarge, ValidationFailed
from apikit.inputs import StrictBooleanField, StrictCharField, valid
from apikit.openapi import error_responses
from apikit.ratelimit import unauthenticated_refusal
from fleet.api.inputs import RunIn
from hands import selectors as hand_selectors
from hands.idempotency import idempotent
from hands.models import Lane
from hands.views import ATTEST, IDEMPOTENCY_PARAMS, MAX_NAME, PLAN, PLAN_READ, HandAPIView
from schedules import github, periods
from schedules import services as schedule_services
from schedules.errors import SignatureInvalid
from schedules.models import GitHubIntegration, Schedule, ScheduleTry
from schedules.presenters import (
    DeliveryOut,
    IntegrationOut,
    IssuedIntegrationOut,
    ScheduleOut,
    TryOut,
    delivery_json,
    integration_json,
    schedule_json,
    try_json,
)


@extend_schema_field(RunIn(many=True))
class RunBodiesField(serializers.ListField):
    """Run bodies, read as objects here and validated by the service with the run-create API's
    own serializer (`schedules.services.validate_run_templates`): one rule, named per item."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.DictField(),
            required=False,
            max_length=schedule_services.MAX_TEMPLATE_RUNS,
            **kwargs,
        )


class ScheduleIn(serializers.Serializer):
    cron = StrictCharField(
        max_length=periods.MAX_CRON_LENGTH,
        help_text="Five fields (minute hour day-of-month month day-of-week), in UTC; two periods "
        f"at least {periods.MIN_PERIOD_S // 60} minutes apart.",
    )
    key_pattern = StrictCharField(
        max_length=MAX_NAME,
        help_text="The package's key: {date} (2030-01-02) and, for a schedule that fires more "
        "than once a day, {time} (0600) are substituted.",
    )
    title_pattern = StrictCharField(max_length=MAX_NAME)
    runs = RunBodiesField(
        help_text="Each run as POST /work-packages/{id}/runs takes it, validated so, with at "
        f"most {schedule_services.MAX_TEMPLATE_SLOTS} slots."
    )
    active = StrictBooleanField(required=False, default=True)


class SchedulePatchIn(serializers.Serializer):
    cron = StrictCharField(max_length=periods.MAX_CRON_LENGTH, required=False)
    key_pattern = StrictCharField(max_length=MAX_NAME, required=False)
    title_pattern = StrictCharField(max_length=MAX_NAME, required=False)
    runs = RunBodiesField()
    active = StrictBooleanField(required=False)


class IntegrationIn(serializers.Serializer):
    repository = StrictCharField(
        max_length=github.MAX_REPOSITORY_LENGTH,
        help_text="The GitHub repository, owner/name: only its issues and pull requests count.",
    )
    label = StrictCharField(
        max_length=github.MAX_LABEL_LENGTH,
        required=False,
        allow_blank=True,
        allow_null=True,
        help_text="Only issues with this label become packages (also when labelled later).",
    )


class _LaneView(HandAPIView):
    def lane(self, slug: str) -> Lane:
        return hand_selectors.lane_get(
            workspace_id=self.workspace_id, slug=slug, lane_id=self.lane_id
        )


class SchedulesApi(_LaneView):
    """A lane's schedules: each period of its cron expression (UTC) makes a work package and
    its runs from the template."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    @extend_schema(
        tags=["plan"],
        responses={
            200: ScheduleOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        lane = self.lane(slug)
        return paginated(
            request,
            Schedule.objects.filter(lane=lane).select_related("lane"),
            lambda rows: [schedule_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=ScheduleIn,
        parameters=IDEMPOTENCY_PARAMS,
        description="The first period is the first after now. Runs are validated as the "
        "run-create API validates them (`runs[<i>].<field>` in the error's fields). A lane has "
        f"at most {schedule_services.MAX_SCHEDULES_PER_LANE} schedules and a workspace "
        f"{schedule_services.MAX_SCHEDULES_PER_WORKSPACE} (more: 400 validation_error naming "
        "`lane`).",
        responses={
            201: ScheduleOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        data = valid(ScheduleIn, request)
        lane = self.lane(slug)

        def create() -> Response:
            schedule = schedule_services.schedule_create(lane=lane, actor=self.hand.name, **data)
            return Response(schedule_json(schedule), status=201)

        return idempotent(request, create)


class ScheduleApi(_LaneView):
    """One schedule: PATCH what changes (a new cron expression, or switching it on again,
    starts from now), DELETE it (the packages it made stay)."""

    required_scope = {"GET": PLAN_READ, "PATCH": PLAN, "DELETE": PLAN}

    @extend_schema(
        tags=["plan"], responses={200: ScheduleOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, slug: str, schedule_id: int) -> Response:
        lane = self.lane(slug)
        return Response(
            schedule_json(schedule_services.schedule_get(lane=lane, schedule_id=schedule_id))
        )

    @extend_schema(
        tags=["plan"],
        request=SchedulePatchIn,
        responses={200: ScheduleOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def patch(self, request: Request, slug: str, schedule_id: int) -> Response:
        data = valid(SchedulePatchIn, request)
        schedule = schedule_services.schedule_update(
            lane=self.lane(slug), schedule_id=schedule_id, changes=data
        )
        return Response(schedule_json(schedule))

    @extend_schema(
        tags=["plan"], responses={204: None, **error_responses("scope_denied", "not_found")}
    )
    def delete(self, request: Request, slug: str, schedule_id: int) -> Response:
        schedule_services.schedule_delete(lane=self.lane(slug), schedule_id=schedule_id)
        return Response(status=204)


class ScheduleTriesApi(_LaneView):
    """What the beat job did for each period of a schedule, newest first."""

    required_scope = PLAN_READ

    @extend_schema(
        tags=["plan"],
        responses={
            200: TryOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, slug: str, schedule_id: int) -> Response:
        schedule = schedule_services.schedule_get(lane=self.lane(slug), schedule_id=schedule_id)
        return paginated(
            request,
            ScheduleTry.objects.filter(schedule=schedule),
            lambda rows: [try_json(x) for x in rows],
        )


class GitHubIntegrationsApi(_LaneView):
    """A lane's GitHub integrations: a webhook secret and the path GitHub delivers to. Its
    deliveries attest, so creating one needs `attest` (listing them, without secrets, `plan`,
    `supervise` or `attest`)."""

    required_scope = {"GET": (*PLAN_READ, ATTEST), "POST": ATTEST}

    @extend_schema(
        tags=["plan"],
        responses={
            200: IntegrationOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        lane = self.lane(slug)
        return paginated(
            request,
            GitHubIntegration.objects.filter(lane=lane).select_related("lane"),
            lambda rows: [integration_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=IntegrationIn,
        parameters=IDEMPOTENCY_PARAMS,
        description="Needs `attest`: whoever holds the secret can attest the repository's "
        "merged pull requests for the lane's evidence (never for the evidence of the hand "
        "whose key creates it). The secret is in this answer only: set it as the GitHub "
        "webhook's secret, with content type application/json and the events Issues and Pull "
        "requests.",
        responses={
            201: IssuedIntegrationOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        data = valid(IntegrationIn, request)
        lane = self.lane(slug)

        def create() -> Response:
            issued = github.integration_create(
                lane=lane,
                repository=data["repository"],
                label=data.get("label") or "",
                actor=self.hand.name,
                actor_hand=self.hand,
                key_lane_id=self.lane_id,
            )
            return Response(
                {**integration_json(issued.integration), "secret": issued.secret}, status=201
            )

        # The secret is in the first answer only: a replay carries none.
        return idempotent(request, create, stored=lambda body: {**body, "secret": None})


class GitHubIntegrationApi(_LaneView):
    required_scope = ATTEST

    @extend_schema(
        tags=["plan"], responses={204: None, **error_responses("scope_denied", "not_found")}
    )
    def delete(self, request: Request, slug: str, integration_id: int) -> Response:
        github.integration_delete(
            lane=self.lane(slug), integration_id=integration_id, key_lane_id=self.lane_id
        )
        return Response(status=204)


class GitHubDeliveryApi(APIView):
    """GitHub's webhook deliveries for one integration, trusted by X-Hub-Signature-256 (the
    HMAC-SHA256 of the raw body with the integration's secret), not by a key."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    parser_classes = [LimitedJSONParser]

    @extend_schema(
        tags=["integrations"],
        auth=[],
        request={"application/json": {"type": "object"}},
        parameters=[
            OpenApiParameter(github.SIGNATURE_HEADER, str, OpenApiParameter.HEADER, required=True),
            OpenApiParameter(github.EVENT_HEADER, str, OpenApiParameter.HEADER, required=True),
            OpenApiParameter(github.DELIVERY_HEADER, str, OpenApiParameter.HEADER, required=True),
        ],
        description="Only deliveries of the integration's repository act. issues "
        "opened/reopened (or labeled with the integration's label) make a work package; "
        "pull_request closed with merged true attests its html_url (which must be "
        "https://github.com/<repository>/pull/<number>) as observed at its merged_at, for the "
        "lane's evidence; the same merge under another delivery id answers `existing` and "
        "changes nothing; ping answers 200; any other event, action or repository answers 202 "
        "(ignored). A redelivery answers as the first did.",
        responses={
            200: DeliveryOut,
            202: DeliveryOut,
            **error_responses("signature_invalid", "not_found", body=True),
        },
    )
    def post(self, request: Request, integration_id: int) -> Response:
        signature = request.headers.get(github.SIGNATURE_HEADER, "")
        if not github.signature_shaped(signature):
            # No signature: refused on the headers, before a byte of the body is read.
            raise _unsigned(request, github.signature_refusal())
        check_body_size(request)
        raw = request._request.read(max_body_bytes() + 1)
        if len(raw) > max_body_bytes():
            raise PayloadTooLarge(
                f"the body is over the limit of {max_body_bytes()} bytes",
                limit_bytes=max_body_bytes(),
            )
        try:
            integration = github.integration_verified(
                integration_id=integration_id, body=raw, signature=signature
            )
        except SignatureInvalid as refusal:
            raise _unsigned(request, refusal) from None
        try:
            payload = decode_json(raw)
        except ValueError as exc:
            raise ValidationFailed(
                f"the body is not valid JSON: {exc}", fields={"body": [str(exc)]}
            ) from None
        answer = github.delivery_receive(
            integration=integration,
            delivery_id=request.headers.get(github.DELIVERY_HEADER, ""),
            event=request.headers.get(github.EVENT_HEADER, ""),
            payload=payload,
        )
        status = 202 if answer.outcome == github.Outcome.IGNORED else 200
        return Response(delivery_json(answer), status=status)


def _unsigned(request: Request, refusal: SignatureInvalid) -> Exception:
    """A delivery not signed by the integration: counted against the caller's address, as any
    unauthenticated call is, and answered 429 instead once the address is over its limit."""
    return unauthenticated_refusal(client_address(request)) or refusal
