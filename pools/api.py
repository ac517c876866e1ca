"""Pools over REST: create and list them (`/pools`), read one (`/pools/{name}`), and take a free
member (`/pools/{name}/acquire`). A member's lease is then renewed, released and checked through
`/leases/renew`, `/leases/release` and `/leases/check` with its `resource`, like any lease."""

from __future__ import annotations

from functools import partial
from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import paginated
from apikit.inputs import PAGE_PARAMS, StrictFloatField, StrictIntegerField, created_or_found, valid
from apikit.openapi import error_responses
from fleet.api.inputs import ResourceField
from fleet.api.presenters import lease_json
from fleet.api.schemas import LeaseOut
from hands import services as hand_services
from hands.views import CREATED_OR_FOUND, LEASES, SUPERVISE, HandAPIView, name_field
from leases import services as lease_services
from leases.engine import LeaseSnapshot
from leases.models import LeaseState
from leases.waiting import MAX_WAIT_S
from leasing.waits import wait_permit
from pools import selectors
from pools import services as pool_services
from pools.models import Pool

# --- Bodies in ------------------------------------------------------------------------------------


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "maxLength": lease_services.MAX_NAME_LENGTH},
        "minItems": 1,
        "maxItems": pool_services.MAX_MEMBERS,
        "nullable": True,
    }
)
class MembersField(serializers.JSONField):
    """The members as sent: the service checks each (`members[i]`), in words that say how to fix
    it, as it does a resource's name."""


class PoolIn(serializers.Serializer):
    name = ResourceField(
        max_length=lease_services.MAX_NAME_LENGTH,
        trim_whitespace=False,
        help_text="One canonical segment of a resource name (no '/'): its members' leases are "
        "named pool/<name>/<member>.",
    )
    members = MembersField(
        required=False,
        allow_null=True,
        help_text=f"1 to {pool_services.MAX_MEMBERS} distinct single segments, in the order "
        "they are handed out (such as ports 8001 to 8010). Give members or capacity.",
    )
    capacity = StrictIntegerField(
        required=False,
        allow_null=True,
        help_text=f"N members named 1 to N (N from 1 to {pool_services.MAX_MEMBERS}).",
    )


class PoolAcquireIn(serializers.Serializer):
    process_id = name_field(help_text="The hand's process identity (host:pid, or any string).")
    ttl_s = StrictFloatField(min_value=1, max_value=lease_services.MAX_TTL_S)
    wait_s = StrictFloatField(required=False, default=0, min_value=0, max_value=MAX_WAIT_S)


# --- Answers out (documentation only) ------------------------------------------------------------


class PoolMemberOut(serializers.Serializer):
    member = serializers.CharField()
    resource = serializers.CharField(help_text="The member's lease: pool/<pool>/<member>.")
    state = serializers.CharField(help_text="live, late, stalled, lost or free.")
    holder = serializers.CharField(allow_null=True)
    process_id = serializers.CharField(allow_null=True)
    fence = serializers.IntegerField()
    expires_at = serializers.DateTimeField(allow_null=True)
    expires_in_s = serializers.FloatField(allow_null=True)


class PoolOut(serializers.Serializer):
    name = serializers.CharField()
    size = serializers.IntegerField()
    available = serializers.IntegerField(help_text="Members a take would grant now.")
    members = PoolMemberOut(many=True)
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(allow_null=True)
    server_time = serializers.DateTimeField()


class PoolLeaseOut(LeaseOut):
    pool = serializers.CharField()
    member = serializers.CharField()


def member_out(pool: Pool, lease: LeaseSnapshot) -> dict[str, Any]:
    held = lease.state != LeaseState.FREE
    return {
        **selectors.member_json(pool, lease),
        "process_id": (lease.process_id or None) if held else None,
        "expires_at": lease.deadline if held else None,
    }


def pool_json(view: selectors.PoolView) -> dict[str, Any]:
    pool = view.pool
    return {
        "name": pool.name,
        "size": len(pool.members),
        "available": view.available,
        "members": [member_out(pool, lease) for lease in view.leases],
        "created_at": pool.created_at,
        "created_by": pool.created_by or None,
        "server_time": view.now,
    }


def pool_lease_json(pool: Pool, lease: LeaseSnapshot) -> dict[str, Any]:
    return {
        **lease_json(lease),
        "pool": pool.name,
        "member": selectors.member_of(pool, lease.resource),
    }


# --- Endpoints ------------------------------------------------------------------------------------


class PoolsApi(HandAPIView):
    """Pools: named sets of members, each handed out as its own lease."""

    required_scope = {"GET": (LEASES, SUPERVISE), "POST": SUPERVISE}

    @extend_schema(
        tags=["leases"],
        parameters=PAGE_PARAMS,
        responses={200: PoolOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            selectors.pools_list(workspace_id=self.workspace_id),
            lambda rows: [pool_json(view) for view in selectors.pool_views(rows)],
        )

    @extend_schema(
        tags=["supervisor"],
        request=PoolIn,
        description=f"{CREATED_OR_FOUND} Each member's lease is made free at fence 0. The same "
        "name with other members answers pool_exists.",
        responses={
            201: PoolOut,
            200: PoolOut,
            **error_responses("scope_denied", "pool_exists", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(PoolIn, request)
        pool, created = pool_services.pool_create(
            workspace=self.hand.workspace,
            name=data["name"],
            members=data.get("members"),
            capacity=data.get("capacity"),
            actor=self.hand.name,
            caller_lane_id=self.lane_id,
        )
        return Response(
            pool_json(selectors.pool_views([pool])[0]), status=created_or_found(created)
        )


class PoolApi(HandAPIView):
    """One pool, each member with its lease's state, holder, fence and window."""

    required_scope = (LEASES, SUPERVISE)

    @extend_schema(
        tags=["leases"],
        responses={200: PoolOut, **error_responses("scope_denied", "not_found")},
    )
    def get(self, request: Request, name: str) -> Response:
        pool = pool_services.pool_get(workspace_id=self.workspace_id, name=name)
        return Response(pool_json(selectors.pool_views([pool])[0]))


class PoolAcquireApi(HandAPIView):
    """Take a free member of the pool (see the operation's description)."""

    required_scope = LEASES

    @extend_schema(
        tags=["leases"],
        request=PoolAcquireIn,
        description="Grant the first free member of the pool as a lease of its own "
        "(pool/<pool>/<member>, fence + 1); if this hand already holds one with this "
        "process_id, renew that one instead (the fence stays). A full pool answers lease_held "
        "with every member's holder and window (members). With wait_s the request is held until "
        "a member frees or the wait ends (429 rate_limited beyond the waits' caps). Renew, "
        "release and check the member through /leases/* with its resource.",
        responses={
            201: PoolLeaseOut,
            **error_responses("scope_denied", "not_found", "lease_held", "rate_limited", body=True),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        data = valid(PoolAcquireIn, request)
        pool, lease = pool_services.pool_acquire_waiting(
            workspace_id=self.workspace_id,
            name=name,
            holder=self.hand.name,
            process_id=data["process_id"],
            ttl_s=data["ttl_s"],
            wait_s=data["wait_s"],
            guard=hand_services.key_guard(self.key),
            permit=partial(wait_permit, key_id=self.key.pk, workspace_id=self.workspace_id),
        )
        return Response(pool_lease_json(pool, lease), status=201)
