"""Handoffs over REST: a refused hand asks the holder for a resource or a slot; the holder
declines (or releases, through the release it already has); the asker reads the answer or
withdraws; a supervisor grants by breaking the lease."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.api import paginated
from apikit.errors import ValidationFailed
from apikit.inputs import PAGE_PARAMS, StrictIntegerField, choice_param, valid
from apikit.openapi import error_responses
from fleet.api.inputs import resource_field
from fleet.api.presenters import lease_json
from fleet.api.schemas import LeaseOut
from fleet.attempts import handoffs as handoff_services
from hands import services as hand_services
from hands.views import LEASES, SUPERVISE, WORK, HandAPIView, reason_field
from leases import handoffs
from leases.handoffs import HandoffView
from leases.models import HandoffStatus, LeaseMode

STATUSES = [*HandoffStatus.values, handoffs.LAPSED]
ROLES = ["asked", "received", "workspace"]


class HandoffAskIn(serializers.Serializer):
    resource = resource_field(required=False)
    mode = serializers.ChoiceField(
        choices=LeaseMode.choices,
        default=LeaseMode.EXCLUSIVE,
        help_text="The mode you were refused (with resource).",
    )
    run = StrictIntegerField(required=False, min_value=1, help_text="A slot's run (with slot).")
    slot = StrictIntegerField(required=False, min_value=0, help_text="The slot's index.")
    reason = reason_field(help_text="Why you need it; the holder reads it.")


class ReasonIn(serializers.Serializer):
    reason = reason_field()


class HandoffOut(serializers.Serializer):
    id = serializers.IntegerField()
    resource = serializers.CharField(help_text="The tenure's name (what the holder releases).")
    kind = serializers.CharField(help_text="resource or slot.")
    fence = serializers.IntegerField(help_text="The tenure asked for.")
    holder = serializers.CharField(allow_null=True, help_text=concealing.CONCEALED)
    from_ = serializers.CharField(
        allow_null=True, help_text=f"The asking hand. {concealing.CONCEALED}"
    )
    wanted = serializers.CharField(help_text="What the asker was refused.")
    reason = serializers.CharField()
    status = serializers.ChoiceField(choices=STATUSES)
    ended_by = serializers.CharField(
        allow_null=True, help_text="With released or granted: released, finished or broken."
    )
    answer = serializers.CharField(
        allow_null=True, help_text="The holder's reason (declined) or the supervisor's (granted)."
    )
    answered_by = serializers.CharField(allow_null=True, help_text=concealing.CONCEALED)
    asked_at = serializers.DateTimeField()
    answered_at = serializers.DateTimeField(allow_null=True)
    message = serializers.CharField(help_text="The request and its answer in a sentence.")


HandoffOut._declared_fields["from"] = HandoffOut._declared_fields.pop("from_")


class GrantedOut(serializers.Serializer):
    handoff = HandoffOut()
    lease = LeaseOut(help_text="The lease as the break left it (its fence moved on).")


def answer_sentence(view: HandoffView) -> str:
    """The request and where it stands, in words for either side."""
    request, status = view.request, view.status
    asked = handoffs.sentence(request)
    if status == HandoffStatus.OPEN:
        return asked
    # A hand the reader may not read (another lane's) is named by nobody (`apikit.concealing`).
    hidden = concealing.concealed([request.asker, request.holder, request.answered_by])

    def named(name: str, *, hand: bool = False) -> str:
        if name in hidden:
            return concealing.ANOTHER_LANE
        return f"hand {name}" if hand else name

    asker, holder = named(request.asker), named(request.holder)
    said = {
        HandoffStatus.RELEASED: f"{holder}'s tenure ended ({request.ended_by}): acquire "
        f"`{request.wanted}` now",
        HandoffStatus.DECLINED: f"{named(request.holder, hand=True)} declined: {request.answer}",
        HandoffStatus.GRANTED: f"a supervisor ({named(request.answered_by)}) broke the lease "
        f"for it: acquire `{request.wanted}` now",
        HandoffStatus.WITHDRAWN: f"{named(request.asker, hand=True)} withdrew it",
        handoffs.LAPSED: f"{holder}'s tenure ended without an answer: acquire "
        f"`{request.wanted}` now",
    }[status]
    return f"{asker} asked {holder} for `{request.resource}`: {status}; {said}"


def handoff_json(view: HandoffView) -> dict[str, Any]:
    request = view.request
    return {
        "id": request.pk,
        "resource": request.resource,
        "kind": request.kind,
        "fence": request.fence,
        "holder": request.holder,
        "from": request.asker,
        "wanted": request.wanted,
        "reason": request.reason,
        "status": view.status,
        "ended_by": request.ended_by or None,
        "answer": request.answer or None,
        "answered_by": request.answered_by or None,
        "asked_at": request.asked_at,
        "answered_at": request.answered_at,
        "message": answer_sentence(view),
    }


ASK_ERRORS = (
    "scope_denied",
    "not_found",
    "handoff_not_needed",
    "handoff_own_lease",
    "handoff_limit",
    "run_closed",
)


class HandoffAskApi(HandAPIView):
    """Ask the holder of what refused you to let it go (see the operation's description)."""

    required_scope = (LEASES, WORK)

    @extend_schema(
        tags=["leases"],
        request=HandoffAskIn,
        description="A hand refused a resource (`resource`, scope leases) or a slot (`run` and "
        "`slot`, scope work) asks the holder of the tenure in its way, with a reason. The "
        "holder sees it in its next renewal or heartbeat answer (`handoff_requests`) and may "
        "release, decline, or ignore it. 201 when asked; 200 with the open request when this "
        "hand had already asked for that tenure. 409 handoff_not_needed when nothing held is "
        "in the way, handoff_own_lease when it is your own, handoff_limit past "
        f"{handoffs.MAX_OPEN_PER_TENURE} open requests on one tenure.",
        responses={200: HandoffOut, 201: HandoffOut, **error_responses(*ASK_ERRORS, body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(HandoffAskIn, request)
        has_resource, has_slot = "resource" in data, "run" in data or "slot" in data
        if has_resource == has_slot or (has_slot and not ("run" in data and "slot" in data)):
            raise ValidationFailed(
                "name a resource, or a run and its slot",
                fields={"resource": ["A resource, or run and slot, not both."]},
            )
        if has_resource:
            hand_services.key_require_scope(self.key, LEASES)
            view, created = handoffs.handoff_ask_resource(
                workspace_id=self.workspace_id,
                holder=self.hand.name,
                resource=data["resource"],
                mode=data["mode"],
                reason=data["reason"],
            )
        else:
            hand_services.key_require_scope(self.key, WORK)
            view, created = handoff_services.handoff_ask_slot(
                hand=self.hand,
                run_id=data["run"],
                slot=data["slot"],
                reason=data["reason"],
                lane_id=self.lane_id,
            )
        return Response(handoff_json(view), status=201 if created else 200)


class HandoffApi(HandAPIView):
    """One request: for its asker, its holder, or a supervisor of the workspace."""

    required_scope = (LEASES, WORK, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        responses={200: HandoffOut, **error_responses("scope_denied", "not_found")},
    )
    def get(self, request: Request, handoff_id: int) -> Response:
        supervisor = SUPERVISE in self.key.scopes and self.lane_id is None
        view = handoffs.handoff_get(
            workspace_id=self.workspace_id,
            handoff_id=handoff_id,
            reader=None if supervisor else self.hand.name,
        )
        return Response(handoff_json(view))


class HandoffsApi(HandAPIView):
    """A hand's own requests, newest first: those it asked and those it received."""

    required_scope = (LEASES, WORK, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        parameters=[
            OpenApiParameter(
                "role",
                str,
                enum=ROLES,
                description="asked or received (default: both); workspace (scope supervise, "
                "no lane limit): every request of the workspace.",
            ),
            OpenApiParameter(
                "status",
                str,
                enum=HandoffStatus.values,
                description="As stored: an open request whose tenure has ended reads lapsed.",
            ),
            *PAGE_PARAMS,
        ],
        responses={
            200: HandoffOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        role = choice_param(request, "role", ROLES) or ""
        status = choice_param(request, "status", HandoffStatus.values) or ""
        if role == "workspace":
            hand_services.key_require_scope(self.key, SUPERVISE)
            if self.lane_id is not None:
                raise ValidationFailed(
                    "role=workspace needs a key without a lane limit",
                    fields={"role": ["Not with a lane-limited key."]},
                )
        rows = handoffs.handoffs_of(
            workspace_id=self.workspace_id, hand=self.hand.name, role=role, status=status
        )
        return paginated(
            request, rows, lambda page: [handoff_json(v) for v in handoffs.handoff_views(page)]
        )


class HandoffDeclineApi(HandAPIView):
    """The holder keeps the tenure and says why; the asker reads the answer."""

    required_scope = (LEASES, WORK)

    @extend_schema(
        tags=["leases"],
        request=ReasonIn,
        description="Only the current holder of the tenure asked for, at that fence, while it is "
        "not lost. 409 handoff_answered when the request already has its answer (released, "
        "granted, withdrawn, declined) or has lapsed: exactly one answer wins.",
        responses={
            200: HandoffOut,
            **error_responses(
                "scope_denied", "not_found", "not_holder", "handoff_answered", body=True
            ),
        },
    )
    def post(self, request: Request, handoff_id: int) -> Response:
        data = valid(ReasonIn, request)
        view = handoffs.handoff_decline(
            workspace_id=self.workspace_id,
            holder=self.hand.name,
            handoff_id=handoff_id,
            reason=data["reason"],
        )
        return Response(handoff_json(view))


class HandoffWithdrawApi(HandAPIView):
    """The asker takes its request back."""

    required_scope = (LEASES, WORK)

    @extend_schema(
        tags=["leases"],
        request=None,
        responses={
            200: HandoffOut,
            **error_responses("scope_denied", "not_found", "handoff_answered", body=True),
        },
    )
    def post(self, request: Request, handoff_id: int) -> Response:
        view = handoffs.handoff_withdraw(
            workspace_id=self.workspace_id, holder=self.hand.name, handoff_id=handoff_id
        )
        return Response(handoff_json(view))


class HandoffGrantApi(HandAPIView):
    """A supervisor grants an open request by breaking the lease."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        request=ReasonIn,
        description="Breaks the lease as POST /leases/break does (every tenure of its node; a "
        "slot's attempt ends as lost) and marks the request granted, in one transaction; the "
        "tenure's other open requests are answered released (ended_by broken). 409 "
        "handoff_answered, breaking nothing, when the request is no longer open.",
        responses={
            200: GrantedOut,
            **error_responses("scope_denied", "not_found", "handoff_answered", body=True),
        },
    )
    def post(self, request: Request, handoff_id: int) -> Response:
        data = valid(ReasonIn, request)
        view, lease = handoff_services.handoff_grant(
            workspace_id=self.workspace_id,
            handoff_id=handoff_id,
            actor=self.hand.name,
            reason=data["reason"],
            lane_id=self.lane_id,
        )
        return Response({"handoff": handoff_json(view), "lease": lease_json(lease)})
