"""The base of every endpoint a hand's key calls: the key's authentication, its scope, the body
limit and the key's rate limit; the scopes by name; the input fields names and reasons share."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from apikit import reads
from apikit.api import LimitedJSONParser, check_body_size
from apikit.concealing import conceal_answer
from apikit.inputs import StrictCharField
from apikit.ratelimit import rate_caller, rate_limit
from hands.authentication import HandKeyAuthentication, ScopeRequired, lane_id_of
from hands.models import Hand, HandKey, Scope
from leases import services as lease_services

MAX_NAME = lease_services.MAX_NAME_LENGTH


MAX_REASON = lease_services.MAX_REASON_LENGTH


MAX_INTERVAL = lease_services.MAX_INTERVAL_S


def name_field(**kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=MAX_NAME, **kwargs)


def reason_field(**kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=MAX_REASON, **kwargs)


class HandAPIView(APIView):
    """Every endpoint: a hand's key, its scope, the body limit and the key's rate limit.

    `required_scope` is a scope, a tuple of scopes any of which will do, or a dict by method.
    """

    authentication_classes = [HandKeyAuthentication]
    permission_classes = [ScopeRequired]
    parser_classes = [LimitedJSONParser]
    renderer_classes = [JSONRenderer]
    required_scope: str | tuple[str, ...] | dict[str, str | tuple[str, ...]] | None = None

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        # The key check and every decision read the primary; a list handler that may read the
        # replica says so itself (`apikit.reads.replica_list`).
        with reads.primary():
            return super().dispatch(request, *args, **kwargs)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # Whatever the endpoint answers (a refusal too), a lane-limited key reads no hand of
        # another lane in it (`apikit.concealing`).
        data = getattr(response, "data", None)
        if data is not None:
            response.data = conceal_answer(data)
        return super().finalize_response(request, response, *args, **kwargs)

    def perform_authentication(self, request: Request) -> None:
        super().perform_authentication(request)
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


VERIFY = Scope.VERIFY.value


ATTEST = Scope.ATTEST.value


READ_ATTEMPT = (WORK, SUPERVISE)


PLAN_READ = (PLAN, SUPERVISE)


CREATED_OR_FOUND = "201 when created; 200 with the existing object when it already existed."


IDEMPOTENCY_PARAMS = [
    OpenApiParameter(
        "Idempotency-Key",
        str,
        OpenApiParameter.HEADER,
        description="A repeat with the same key and body returns the first answer and creates "
        "nothing; the same key with another body answers idempotency_conflict.",
    )
]
