"""Resource leases over REST: acquire (with `wait_s`), renew, release, check, list, break.

They live here, not in `leases/`, because a lease is taken with a hand's key, which `leases/`
knows nothing of."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.api import paginated
from apikit.errors import ValidationFailed
from apikit.inputs import PAGE_PARAMS, choice_param, valid
from apikit.openapi import error_responses
from apikit.reads import REPLICA_HEADERS, replica_list
from fleet.api import attempts as attempts_api
from fleet.api.inputs import (
    AcquireIn,
    BreakIn,
    FencedResourceIn,
    LeaseReleaseIn,
    RenewAllIn,
    RenewIn,
    ReportIn,
)
from fleet.api.presenters import lease_json
from fleet.api.schemas import (
    CheckOut,
    LeaseOut,
    ReleasedOut,
    RenewedAllOut,
    RenewedLeaseOut,
    ReportOut,
    WaiterOut,
)
from fleet.attempts import services as attempt_services
from hands.views import LEASES, SUPERVISE, WORK, HandAPIView
from leases import names, queue
from leases import selectors as lease_selectors
from leases import services as lease_services
from leasing import hot
from leasing.hot import HotCallView

MAX_COVERING = 100


def covering_param(request: Request) -> list[str]:
    """The `covering` names: canonical, at most `MAX_COVERING`."""
    covering = request.query_params.getlist("covering")
    if len(covering) > MAX_COVERING:
        raise ValidationFailed(
            f"covering is repeated {len(covering)} times; at most {MAX_COVERING}",
            fields={"covering": [f"At most {MAX_COVERING} names."]},
        )
    return [names.validate_resource(name, field="covering") for name in covering]


class LeaseAcquireApi(HotCallView):
    """Take a resource lease (see the operation's description)."""

    required_scope = LEASES
    call = hot.acquire

    @extend_schema(
        tags=["leases"],
        request=AcquireIn,
        description="Take the resource if free (fence + 1), or renew it if the caller (this "
        "hand, from this process_id) holds it in the mode asked; held in the other mode, the "
        "call is refused (409 held_in_other_mode) and the tenure stays as it was. The same hand "
        "from another process is denied like another hand (own_hand, process_id), unless "
        "take_over. With wait_s the request is held until the resource frees or the wait ends; a "
        "key, a workspace and a web process (a workspace at most half of its) may each have only "
        "so many waits at once (429 rate_limited with retry_after_s, at once, beyond that).",
        responses={
            201: LeaseOut,
            **error_responses(
                "scope_denied", "lease_held", "held_in_other_mode", "rate_limited", body=True
            ),
        },
    )
    def post(self, request: HttpRequest) -> HttpResponse:
        return self.serve(request)


FENCED_LEASE_ERRORS = ("scope_denied", "not_found", "not_holder", "lease_lost", "stale_fence")


class LeaseRenewApi(HotCallView):
    """Push the lease's deadline to now + ttl_s, for the current fence and process."""

    required_scope = LEASES
    call = hot.renew

    @extend_schema(
        tags=["leases"],
        request=RenewIn,
        responses={
            200: RenewedLeaseOut,
            **error_responses(*FENCED_LEASE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: HttpRequest) -> HttpResponse:
        return self.serve(request)


class LeaseRenewAllApi(HotCallView):
    """Renew every live resource lease this hand holds with one process identity, at once."""

    required_scope = LEASES
    call = hot.renew_all

    @extend_schema(
        tags=["leases"],
        request=RenewAllIn,
        description="One statement renews every live resource lease the key's hand holds with "
        "process_id (each to now + its ttl_s). not_renewed lists those the process holds on "
        "paper but has lost (code lease_lost), and each tenure named in held that was not "
        "renewed, with its reason (lease_lost when another process of the hand took it over); "
        "a lease released, broken or taken over and not named in held is in neither list.",
        responses={200: RenewedAllOut, **error_responses("scope_denied", body=True)},
    )
    def post(self, request: HttpRequest) -> HttpResponse:
        return self.serve(request)


class LeaseReleaseApi(HandAPIView):
    """End the tenure now; the resource is free at once and the fence stays."""

    required_scope = LEASES

    @extend_schema(
        tags=["leases"],
        request=LeaseReleaseIn,
        responses={
            200: ReleasedOut,
            **error_responses(*FENCED_LEASE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(LeaseReleaseIn, request)
        lease = lease_services.lease_release(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            holder=self.hand.name,
            fence=data["fence"],
            process_id=data.get("process_id"),
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
            OpenApiParameter("state", str, enum=lease_selectors.LEASE_STATES),
            OpenApiParameter(
                "covering",
                str,
                many=True,
                description="Only leases that cover this name: on its node or a directory "
                f"above it (repeatable, at most {MAX_COVERING}; a canonical name each).",
            ),
            *PAGE_PARAMS,
            *REPLICA_HEADERS,
        ],
        responses={200: LeaseOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    @replica_list
    def get(self, request: Request) -> Response:
        params = request.query_params
        leases = lease_selectors.leases_list(
            workspace_id=self.workspace_id,
            prefix=names.validate_prefix(params.get("prefix", "")),
            holder=params.get("holder", ""),
            state=choice_param(request, "state", lease_selectors.LEASE_STATES),
            covering=covering_param(request),
        )
        if concealing.unnamed(params.get("holder", "")):
            leases = leases.none()
        return paginated(
            request,
            leases,
            lambda rows: [lease_json(s) for s in lease_selectors.lease_snapshots(rows)],
        )


class LeaseQueueApi(HandAPIView):
    """The waiters in line for resources (`wait_s` acquires), oldest first."""

    required_scope = (LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        parameters=[
            OpenApiParameter(
                "resource", str, description="Only waiters on this resource's line of the tree."
            )
        ],
        responses={
            200: WaiterOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        resource = request.query_params.get("resource")
        if resource is not None:
            names.validate_resource(resource)
        return Response(queue.line(workspace_id=self.workspace_id, resource=resource))


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
        lease = attempt_services.lease_break(
            workspace_id=self.workspace_id,
            resource=data["resource"],
            actor=self.hand.name,
            reason=data["reason"],
            lane_id=self.lane_id,
        )
        return Response(lease_json(lease))


class ReportApi(HotCallView):
    """Heartbeat, progress, blocker or note. With the claim's process_id it renews the lease
    (renewed: true); without, it is recorded only; another process_id is refused.
    """

    required_scope = WORK
    call = hot.report

    @extend_schema(
        tags=["hand"],
        request=ReportIn,
        responses={
            200: ReportOut,
            **error_responses(*attempts_api.TENURE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: HttpRequest, attempt_id: int) -> HttpResponse:
        return self.serve(request, attempt_id=attempt_id)
