"""Who the key is (`/me`), and the supervisor calls on lanes, hands and keys (CONTRACT.md).

One class per endpoint, thin: validate the input, call a service or selector, shape the answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import paginated
from apikit.errors import NotFound
from apikit.inputs import (
    PAGE_PARAMS,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSlugField,
    created_or_found,
    valid,
)
from apikit.openapi import error_responses
from apikit.reads import REPLICA_HEADERS, replica_list
from hands import capabilities as hand_capabilities
from hands import selectors as hand_selectors
from hands import services as hand_services
from hands.idempotency import idempotent
from hands.models import Hand, HandKey, Lane
from hands.views import (
    CREATED_OR_FOUND,
    HANDS,
    IDEMPOTENCY_PARAMS,
    MAX_INTERVAL,
    PLAN,
    PLAN_READ,
    SUPERVISE,
    HandAPIView,
    name_field,
    reason_field,
)


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


def hand_json(hand: Hand) -> dict[str, Any]:
    return {
        "id": hand.pk,
        "name": hand.name,
        "lane": hand.lane.slug if hand.lane_id else None,
        "is_supervisor": hand.is_supervisor,
        "capabilities": hand.capabilities,
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
        "issued_by": key.issued_by.prefix if key.issued_by_id else None,
        "revoke_when_done": key.revoke_when_done,
        "bound_to": hand_services.bound_json(key),
    }


class MeOut(serializers.Serializer):
    hand = serializers.CharField()
    workspace = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    key_prefix = serializers.CharField()
    lane = serializers.CharField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    capabilities = serializers.ListField(
        child=serializers.CharField(), help_text="The hand's capabilities (its claims need them)."
    )


class LaneOut(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()
    heartbeat_interval_s = serializers.IntegerField(allow_null=True)
    grace_s = serializers.IntegerField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class HandOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    lane = serializers.CharField(allow_null=True)
    is_supervisor = serializers.BooleanField()
    capabilities = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the hand can do: a run that needs a tag it lacks refuses its claim "
        "(capability_missing).",
    )
    created_at = serializers.DateTimeField()


def capabilities_field(**kwargs: Any) -> serializers.ListField:
    """Tags as sent; `hands.capabilities.normalise` says what a tag may be (and trims, lowers
    and dedupes them), in one place for the API, the dashboard and the services."""
    kwargs.setdefault("help_text", hand_capabilities.TAG_HELP)
    return serializers.ListField(child=StrictCharField(trim_whitespace=False), **kwargs)


class BoundToOut(serializers.Serializer):
    resource = serializers.CharField()
    fence = serializers.IntegerField()


class BoundToIn(serializers.Serializer):
    resource = StrictCharField(max_length=512, help_text="A lease the hand holds now.")
    fence = StrictIntegerField(
        required=False, min_value=1, max_value=2**63 - 1, help_text="Its tenure (default: now)."
    )


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
    issued_by = serializers.CharField(
        allow_null=True, help_text="The prefix of the key that minted this one, if a key did."
    )
    revoke_when_done = serializers.BooleanField()
    bound_to = BoundToOut(
        allow_null=True, help_text="The tenure the key lives by, if it is bound to one."
    )


class IssuedKeyOut(KeyOut):
    key = serializers.CharField(
        allow_null=True,
        help_text="gc_<prefix>_<secret>, shown once. Null in an Idempotency-Key replay: the "
        "secret is never stored.",
    )


class LaneIn(serializers.Serializer):
    slug = StrictSlugField(max_length=100)
    name = name_field(required=False, allow_blank=True)
    heartbeat_interval_s = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_INTERVAL
    )
    grace_s = StrictIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_INTERVAL
    )


class HandIn(serializers.Serializer):
    name = name_field()
    lane = StrictSlugField(required=False, allow_null=True, help_text="A lane's slug.")
    capabilities = capabilities_field(required=False, default=list)


class HandPatchIn(serializers.Serializer):
    capabilities = capabilities_field()


class KeyIn(serializers.Serializer):
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=hand_services.ALL_SCOPES), allow_empty=False
    )
    expires_in_s = StrictFloatField(
        required=False, allow_null=True, min_value=1, max_value=366 * 86_400
    )
    lane = StrictSlugField(
        required=False, allow_null=True, help_text="Limit the key to this lane's runs."
    )
    revoke_when_done = StrictBooleanField(required=False, default=False)
    bound_to = BoundToIn(
        required=False,
        help_text="Bind the key to a tenure the hand holds now (a resource lease, or an "
        "attempt's slot lease: its `lease.resource` and `fence`): it answers key_revoked from "
        "the first call after that tenure ends. Only an exclusive tenure: a shared one is a "
        "validation_error.",
    )


class RevokeIn(serializers.Serializer):
    reason = reason_field(required=False, allow_blank=True, default="")


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
                "capabilities": self.hand.capabilities,
            }
        )


class LanesApi(HandAPIView):
    """Lanes: standing streams of work, with default heartbeat interval and grace."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    @extend_schema(
        tags=["plan"],
        parameters=[*PAGE_PARAMS, *REPLICA_HEADERS],
        responses={200: LaneOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    @replica_list
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            hand_selectors.lanes_list(workspace_id=self.workspace_id, lane_id=self.lane_id),
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
            lane, created = hand_services.lane_create(
                workspace=self.hand.workspace,
                slug=data["slug"],
                name=data.get("name") or "",
                heartbeat_interval_s=data.get("heartbeat_interval_s"),
                grace_s=data.get("grace_s"),
                caller_lane_id=self.lane_id,
            )
            return Response(lane_json(lane), status=created_or_found(created))

        return idempotent(request, create)


class HandsApi(HandAPIView):
    """Hands: agent identities, each with its own keys."""

    required_scope = {"GET": (HANDS, SUPERVISE), "POST": HANDS}

    @extend_schema(
        tags=["hands"],
        parameters=[*PAGE_PARAMS, *REPLICA_HEADERS],
        responses={200: HandOut(many=True), **error_responses("scope_denied", "validation_error")},
    )
    @replica_list
    def get(self, request: Request) -> Response:
        return paginated(
            request,
            hand_selectors.hands_list(workspace_id=self.workspace_id, lane_id=self.lane_id),
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
            hand_selectors.lane_get(
                workspace_id=self.workspace_id, slug=data["lane"], lane_id=self.lane_id
            )
            if data.get("lane")
            else None
        )

        def create() -> Response:
            hand, created = hand_services.hand_create(
                workspace=self.hand.workspace,
                name=data["name"],
                lane=lane,
                caller_lane_id=self.lane_id,
                capabilities=data["capabilities"],
            )
            return Response(hand_json(hand), status=created_or_found(created))

        return idempotent(request, create)


class HandApi(HandAPIView):
    """One hand; PATCH sets its capabilities (a supervisor's change: the hand's next claim is
    judged by them)."""

    required_scope = {"GET": (HANDS, SUPERVISE), "PATCH": HANDS}

    @extend_schema(
        tags=["hands"], responses={200: HandOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, name: str) -> Response:
        hands = hand_selectors.hands_list(workspace_id=self.workspace_id, lane_id=self.lane_id)
        hand = hands.filter(name=name).first()
        if hand is None:
            raise NotFound(f"no hand {name!r}")
        return Response(hand_json(hand))

    @extend_schema(
        tags=["hands"],
        request=HandPatchIn,
        description="Replace the hand's capabilities (tags are trimmed, lowercased and kept "
        "once each).",
        responses={200: HandOut, **error_responses("scope_denied", "not_found", body=True)},
    )
    def patch(self, request: Request, name: str) -> Response:
        data = valid(HandPatchIn, request)
        hand = hand_services.hand_set_capabilities(
            workspace_id=self.workspace_id,
            name=name,
            capabilities=data["capabilities"],
            caller_lane_id=self.lane_id,
        )
        return Response(hand_json(hand))


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
        hand = hand_selectors.hand_get(
            workspace_id=self.workspace_id, name=name, lane_id=self.lane_id
        )
        return paginated(
            request,
            hand_selectors.keys_list(hand=hand, lane_id=self.lane_id),
            lambda rows: [key_json(x) for x in rows],
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
        # Another lane's hand, or lane, is not found by a lane-limited key, as everywhere.
        hand = hand_selectors.hand_get(
            workspace_id=self.workspace_id, name=name, lane_id=self.lane_id
        )
        lane = (
            hand_selectors.lane_get(
                workspace_id=self.workspace_id, slug=data["lane"], lane_id=self.lane_id
            )
            if data.get("lane")
            else None
        )

        def create() -> Response:
            issued = hand_services.key_issue_by(
                issuer=self.key,
                hand=hand,
                scopes=data["scopes"],
                expires_in_s=data.get("expires_in_s"),
                lane=lane,
                revoke_when_done=data["revoke_when_done"],
                bound_to=(
                    (data["bound_to"]["resource"], data["bound_to"].get("fence"))
                    if data.get("bound_to")
                    else None
                ),
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
        key = hand_services.key_revoke(
            workspace_id=self.workspace_id,
            prefix=prefix,
            actor=self.hand.name,
            reason=data.get("reason") or "",
            lane_id=self.lane_id,
            by=self.key,
        )
        return Response(key_json(key))
