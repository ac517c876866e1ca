"""The hot path: the calls every hand makes every few seconds (a resource renew or acquire, a
heartbeat report), answered without DRF's per-request machinery when the request is plain.

Profiled under gunicorn (docs/performance.md), a renewal spent most of its CPU outside the lease
statement: wrapping the request, negotiating, authenticating through the class hierarchy,
validating through serializers and rendering through the response pipeline. `FastPost` replaces
that machinery for these endpoints with the same checks in the same places:

1. The key: `fleet.services.key_authenticate` (the one place revocation and expiry are checked),
   then the call is described for refusals exactly as `HandKeyAuthentication` does.
2. The rate limit (`groundcontrol.api.rate_limit`) and the body limit, in the view's order.
3. The scope: the view's `fast_scope` must be in the key's scopes.
4. The body: JSON that the view's serializer would accept unchanged (`fast_input` refuses
   anything it would have to coerce, trim or reject).
5. The same service the view's handler calls (`fast_call`), the same presenter for the answer.

Anything else -- a header that needs negotiating, a key or scope that is refused, a body that is
not plain -- goes to the full DRF view untouched, which answers exactly as before and records the
refusal; the rate-limit count taken here travels with the request, so no call is counted twice.
A domain error raised by the service is answered by the view's own exception handling.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.http import HttpRequest, HttpResponse
from rest_framework.renderers import JSONRenderer

from fleet.authentication import BEARER, describe_call, prefix_of
from fleet.models import HandKey
from fleet.services import key_authenticate
from groundcontrol.api import max_body_bytes, rate_limit
from leases.errors import GroundControlError, RateLimited

JSON = "application/json"
# What DRF's negotiation would settle on JSON for without parameters (an indent would change it).
_PLAIN_ACCEPT = frozenset({None, "*/*", JSON, "application/*"})
_PLAIN_CONTENT_TYPES = frozenset({JSON, "application/json; charset=utf-8"})
_renderer = JSONRenderer()

# The markers the fast path leaves on a request it hands over to the full view.
RATE_COUNTED = "gc_rate_counted"


def plain_text(value: object, *, max_length: int, trimmed: bool = True) -> str | None:
    """`value` if a DRF CharField would keep it exactly (printable, within its length, and, for a
    trimming field, without surrounding spaces); None if the serializer must decide."""
    if type(value) is not str or not 0 < len(value) <= max_length or not value.isprintable():
        return None
    if trimmed and value != value.strip():
        return None
    return value


def plain_int(value: object, *, minimum: int = 0, maximum: int = 2**63 - 1) -> int | None:
    return value if type(value) is int and minimum <= value <= maximum else None


def plain_float(value: object, *, minimum: float, maximum: float) -> float | None:
    """As a DRF FloatField would return it (a float), if it is a plain in-range number."""
    if type(value) not in (int, float) or not math.isfinite(value):
        return None
    return float(value) if minimum <= value <= maximum else None


class FastPost:
    """A `HandAPIView` mixin: a POST is tried on the fast path first (see the module's doc).

    Subclasses set `fast_scope` and implement `fast_input` (the body as the serializer would
    validate it, or None) and `fast_call` (the service call; returns status and data).
    """

    fast_scope: str = ""
    _allow: str | None = None

    def fast_input(self, data: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        raise NotImplementedError

    def fast_call(self, key: HandKey, inputs: dict[str, Any]) -> tuple[int, Any]:
        raise NotImplementedError

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            response = self._fast(request, args, kwargs)
            if response is not None:
                return response
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]

    def _fast(
        self, request: HttpRequest, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        key = _authenticated(request)
        if key is None or self.fast_scope not in key.scopes:
            return None
        data = _json_body(request)
        if data is None:
            return None
        inputs = self.fast_input(data, kwargs)
        if inputs is None:
            return None
        try:
            status, answer = self.fast_call(key, inputs)
        except Exception as exc:  # noqa: BLE001 - answered as the view answers any error
            return self._error(request, args, kwargs, exc)
        response = HttpResponse(_renderer.render(answer), status=status, content_type=JSON)
        response["Allow"] = self._allow_header()
        return response

    def _allow_header(self) -> str:
        # DRF adds the view's Allow header to every answer; it is fixed per class.
        cls = type(self)
        if cls._allow is None:
            cls._allow = self.default_response_headers["Allow"]  # type: ignore[attr-defined]
        return cls._allow

    def _error(
        self, request: HttpRequest, args: tuple[Any, ...], kwargs: dict[str, Any], exc: Exception
    ) -> HttpResponse:
        """What `APIView.dispatch` answers when its handler raises `exc`."""
        view: Any = self
        view.args, view.kwargs = args, kwargs
        drf_request = view.initialize_request(request, *args, **kwargs)
        view.request = drf_request
        view.headers = view.default_response_headers
        response = view.handle_exception(exc)
        return view.finalize_response(drf_request, response, *args, **kwargs)


def _authenticated(request: HttpRequest) -> HandKey | None:
    """The key, counted against its rate limit, if the call gets that far without a refusal."""
    meta = request.META
    # A query string may carry DRF's ?format= override: let the view negotiate it.
    if meta.get("QUERY_STRING") or meta.get("HTTP_ACCEPT") not in _PLAIN_ACCEPT:
        return None
    if meta.get("CONTENT_TYPE") not in _PLAIN_CONTENT_TYPES:
        return None
    scheme, _, raw = meta.get("HTTP_AUTHORIZATION", "").partition(" ")
    raw = raw.strip()
    if scheme.lower() != BEARER or not raw:
        return None
    prefix = prefix_of(raw)
    describe_call(request, key_prefix=prefix)
    try:
        key = key_authenticate(raw)
    except GroundControlError:
        return None  # the view authenticates again and gives (and records) the refusal
    describe_call(request, workspace_id=key.hand.workspace_id, hand=key.hand.name)
    request.user = key.hand  # type: ignore[assignment]  # as DRF leaves it
    try:
        rate_limit(key.prefix)
    except RateLimited as refused:
        setattr(request, RATE_COUNTED, refused)
        return None
    setattr(request, RATE_COUNTED, True)
    return key


def _json_body(request: HttpRequest) -> dict[str, Any] | None:
    length = request.META.get("CONTENT_LENGTH") or ""
    if not length.isdigit() or int(length) > max_body_bytes():
        return None
    try:
        data = json.loads(request.body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return data if type(data) is dict else None
