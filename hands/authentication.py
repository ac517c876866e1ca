"""The one way into the API: a hand's key, `Authorization: Bearer gc_<prefix>_<secret>`.

`HandKeyAuthentication` returns `(hand, key)`; revocation and expiry are checked by
`hands.services.key_authenticate` on every call (one query, nothing cached, so a revoked key is
refused on its very next call); scopes are checked by `ScopeRequired`, and lanes by the services
and selectors the views pass `key.lane_id` to. Each check lives in exactly one place.

A call that turns out unauthenticated (no key, a malformed one, an unknown prefix, a wrong
secret, a revoked or expired key) is counted against its address's limit
(`apikit.ratelimit.unauthenticated_refusal`) and answered 429 rate_limited instead of 401 once
the address is over it. Only such calls are
counted: a valid key pays no count here, and is never refused for its address's sake. The count
of a call without a usable header is taken before any query; a well-formed key is unauthenticated
only once its lookup has found it so, the one indexed read a valid key pays too.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from apikit.clients import client_address
from apikit.context import call_context
from apikit.errors import KeyInvalid
from apikit.ratelimit import unauthenticated_refusal
from hands.errors import KeyExpired, KeyRevoked
from hands.models import Hand, HandKey
from hands.selectors import concealer
from hands.services import key_authenticate, key_require_scope

BEARER = "bearer"


def prefix_of(raw: str) -> str:
    parts = raw.split("_", 2)
    return parts[1][:32] if len(parts) == 3 and parts[0] == "gc" else ""


def describe_call(request: HttpRequest, **fields: Any) -> None:
    """Add who is calling to the call context the request-id middleware opened."""
    stack = getattr(request, "gc_context", None)
    if stack is not None:
        stack.enter_context(call_context(**fields))


def authenticate(request: HttpRequest) -> HandKey:
    """The usable key behind the request's bearer token (`hands.services.key_authenticate`),
    with the call described by it; a call that turns out unauthenticated is counted against its
    address's limit, and answered 429 once that is spent. The DRF views' authentication and the
    hot views' explanation of a refusal (leasing/hot.py) both ask here."""
    try:
        return _authenticate(request)
    except KeyInvalid:
        over = unauthenticated_refusal(client_address(request))
        if over is not None:
            raise over from None
        raise


def bearer_token(request: HttpRequest) -> str:
    """The raw token of the Authorization header, or KeyInvalid saying how to send one."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, raw = header.partition(" ")
    if not header:
        raise KeyInvalid("send a key: Authorization: Bearer gc_<prefix>_<secret>")
    if scheme.lower() != BEARER or not raw.strip():
        raise KeyInvalid("the Authorization header must be 'Bearer gc_<prefix>_<secret>'")
    return raw.strip()


def _authenticate(request: HttpRequest) -> HandKey:
    raw = bearer_token(request)
    prefix = prefix_of(raw)
    describe_call(request, key_prefix=prefix)
    try:
        key = key_authenticate(raw)
    except (KeyRevoked, KeyExpired):
        # A key that no longer authenticates counts against its address's limit like an
        # unknown one: else a leaked, revoked key could be sent without end, each call
        # writing a refusal row. Past the limit the 429 names no workspace, so it is counted.
        over = unauthenticated_refusal(client_address(request))
        if over is not None:
            raise over from None
        # The secret matched, so the refusal may name the key's hand and workspace (a
        # supervisor then sees its revoked hand still calling). Only the refusal path pays
        # this second query.
        owner = (
            HandKey.objects.filter(prefix=prefix)
            .values_list("hand__workspace_id", "hand__name")
            .first()
        )
        if owner is not None:
            describe_call(request, workspace_id=owner[0], hand=owner[1])
        raise
    describe_call(
        request,
        workspace_id=key.hand.workspace_id,
        hand=key.hand.name,
        conceal=concealer(
            workspace_id=key.hand.workspace_id, lane_id=key.lane_id, own=key.hand.name
        ),
    )
    return key


def require_scope(key: HandKey, required: str | tuple[str, ...] | None) -> None:
    """`required`: one scope, or a tuple of which any one will do (None: any valid key)."""
    if required is None:
        return
    options = (required,) if isinstance(required, str) else tuple(required)
    if not any(scope in key.scopes for scope in options):
        key_require_scope(key, options[0])


class HandKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Hand, HandKey]:
        key = authenticate(request._request)
        return key.hand, key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="groundcontrol"'


class ScopeRequired(BasePermission):
    """The view's `required_scope`: one scope, a tuple of which any one will do, or a dict of
    either by method.

    Scope checks live here and nowhere else; a view without `required_scope` needs only a valid
    key (`/me`).
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, HandKey):
            raise KeyInvalid("send a key: Authorization: Bearer gc_<prefix>_<secret>")
        required = getattr(view, "required_scope", None)
        if isinstance(required, dict):  # by method
            required = required.get(request.method or "GET")
        require_scope(key, required)
        return True


def lane_id_of(request: Request) -> int | None:
    """The lane a lane-limited key is confined to (None: every lane of the workspace)."""
    key = request.auth
    return key.lane_id if isinstance(key, HandKey) else None


class HandKeyScheme(OpenApiAuthenticationExtension):
    """The key scheme in the OpenAPI schema (and the docs' Authorize button)."""

    target_class = HandKeyAuthentication
    name = "handKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "gc_<prefix>_<secret>",
            "description": "A hand's key, minted by POST /api/v1/hands/{name}/keys.",
        }
