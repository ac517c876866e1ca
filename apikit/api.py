"""Shared REST API machinery: request ids, the uniform error body, body-size and rate limits,
database outages, and cursor pagination.

Every non-2xx answer under /api/v1/ has one body, `{"error": {"code", "message", "request_id",
...fields}}`, built here from the apps' errors (subclasses of `apikit.errors.GroundControlError`)
and DRF's own exceptions, mapped onto the contract's codes. Every refusal is recorded exactly
once: services record the errors they raise; the handler here sends `apikit.context.refused` for
the rest (authentication, scopes, serializer validation, lookups, limits), which the audit log
records.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.handlers.wsgi import LimitedStream
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import encoders
from rest_framework.utils.mediatypes import media_type_matches
from rest_framework.views import APIView

from apikit.clients import client_address
from apikit.context import CallContext, call_context, current_call, refused
from apikit.errors import (
    Busy,
    DependencyUnavailable,
    GroundControlError,
    KeyInvalid,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ScopeDenied,
    ValidationFailed,
)
from apikit.inputs import whole_number
from apikit.outages import drop_read_only_connections, is_database_outage
from apikit.ratelimit import unauthenticated_refusal
from apikit.retries import RETRY_AFTER_S, busy, is_conflict

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
REQUEST_ID_HEADER = "X-Request-ID"
_REQUEST_ID_META = "HTTP_" + REQUEST_ID_HEADER.upper().replace("-", "_")
# A caller's request id is kept when it is short and printable; otherwise we mint one.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


# --- Request ids and the call context -----------------------------------------------------------


def request_id_for(request: HttpRequest) -> str:
    # From META: `request.headers` would parse every header of the request to read this one.
    return request_id_for_header(request.META.get(_REQUEST_ID_META, ""))


def request_id_for_header(given: str) -> str:
    """The caller's request id when usable, else a new one."""
    return given if _REQUEST_ID.match(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Give every request an id (the caller's `X-Request-ID` when usable), echo it on the
    response, and describe the call for the refusals it may cause.

    The call context is a context variable; the authentication class adds the key, hand and
    workspace to it through `request.gc_context`, which this middleware unwinds when the response
    is done, so nothing leaks into the next request served by the same thread.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_for(request)
        request.request_id = request_id  # type: ignore[attr-defined]
        with ExitStack() as stack:
            stack.enter_context(
                call_context(
                    method=request.method or "",
                    path=request.path,
                    request_id=request_id,
                    address=client_address(request),
                    workspace_id=None,
                    hand="",
                    key_prefix="",
                )
            )
            request.gc_context = stack  # type: ignore[attr-defined]
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # Outside DRF views (which answer through `exception_handler`), an unreachable database
        # still answers 503 with the uniform body, never a 500 page.
        if request.path.startswith(API_PREFIX) and is_conflict(exception):
            error = busy()
            response = JsonResponse({"error": _body(error, request)}, status=error.http_status)
            response["Retry-After"] = str(max(1, math.ceil(RETRY_AFTER_S)))
            return response
        if request.path.startswith(API_PREFIX) and is_database_outage(exception):
            drop_read_only_connections(exception)
            error = _outage()
            return JsonResponse({"error": _body(error, request)}, status=error.http_status)
        return None


def _outage() -> DependencyUnavailable:
    return DependencyUnavailable("the database is unreachable; nothing was written; retry later")


def _body(error: GroundControlError, request: HttpRequest | None) -> dict[str, Any]:
    call = current_call()
    body = error.body()
    body["request_id"] = getattr(request, "request_id", "") or call.request_id
    caller = caller_of(call)
    if caller is not None:
        body["caller"] = caller
    return body


def caller_of(call: CallContext) -> dict[str, str] | None:
    """Who was refused, as every refusal's body names it: the calling key's hand and the key's
    prefix, once the key's secret matched (None for no key, or an unknown one). A hand may hold
    several keys; the prefix says which of them acted."""
    if not call.hand or not call.key_prefix:
        return None
    return {"hand": call.hand, "key_prefix": call.key_prefix}


# --- The uniform error body ---------------------------------------------------------------------


def _validation_fields(detail: Any) -> Any:
    """DRF's error detail as plain JSON: {field: [messages]} (nested for nested input)."""
    if isinstance(detail, dict):
        return {str(key): _validation_fields(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_validation_fields(item) for item in detail]
    return str(detail)


def _summarise(fields: Any) -> str:
    if isinstance(fields, dict) and fields:
        names = ", ".join(sorted(fields))
        return f"invalid input: {names}"
    if isinstance(fields, list) and fields:
        return f"invalid input: {fields[0]}"
    return "invalid input"


def as_domain_error(exc: Exception) -> GroundControlError | None:
    """The contract's error for `exc`, or None for a bug (answered as internal_error)."""
    if isinstance(exc, GroundControlError):
        return exc
    if is_conflict(exc):
        # A deadlock or serialization failure that no service retried (`apikit.retries`): the
        # transaction was rolled back, so the call may be sent again. Before the outage test:
        # psycopg's conflict errors are OperationalErrors too.
        return busy()
    if is_database_outage(exc):
        drop_read_only_connections(exc)
        return _outage()
    if isinstance(exc, Http404 | drf.NotFound):
        return NotFound("no such object in this workspace")
    if isinstance(exc, drf.ValidationError):
        fields = _validation_fields(exc.detail)
        if not isinstance(fields, dict):
            fields = {"non_field_errors": fields if isinstance(fields, list) else [fields]}
        return ValidationFailed(_summarise(fields), fields=fields)
    if isinstance(exc, drf.ParseError):
        return ValidationFailed(
            f"the body is not valid JSON: {exc.detail}", fields={"body": [str(exc.detail)]}
        )
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        return KeyInvalid("send a key: Authorization: Bearer gc_<prefix>_<secret>")
    if isinstance(exc, drf.PermissionDenied | DjangoPermissionDenied):
        return ScopeDenied(str(getattr(exc, "detail", "")) or "permission denied")
    if isinstance(exc, drf.Throttled):
        wait = float(exc.wait or 1)
        return RateLimited("too many calls for this key", retry_after_s=wait)
    if isinstance(exc, drf.APIException):
        # 405, 406, 415 and the like: DRF's own status, our body, a stable snake_case code.
        error = GroundControlError(str(exc.detail))
        error.code = exc.default_code
        error.http_status = exc.status_code
        return error
    return None


def refusal_of(exc: Exception, request: Any) -> tuple[GroundControlError, dict[str, str]]:
    """The contract's error for `exc` (internal_error for a bug, logged) and the headers its
    answer carries, recorded unless a service recorded it: every API view's one way to refuse,
    DRF's (`exception_handler`) and the hot views' (leasing/hot.py)."""
    error = as_domain_error(exc)
    if error is None:
        logger.exception("unhandled error in %s", getattr(request, "path", "?"), exc_info=exc)
        error = GroundControlError("internal error; the request id identifies it in the logs")
        error.code = "internal_error"
        error.http_status = 500
        error.recorded = True
    refused.send(sender=type(error), error=error)
    headers = {}
    if isinstance(error, Busy | RateLimited):
        headers["Retry-After"] = str(max(1, math.ceil(float(error.fields["retry_after_s"]))))
    if error.http_status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="groundcontrol"'
    return error, headers


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """REST_FRAMEWORK["EXCEPTION_HANDLER"]: every error becomes the uniform body; every refusal
    that no service recorded is recorded here, with the request's context."""
    request = context.get("request")
    error, headers = refusal_of(exc, request)
    response = Response({"error": _body(error, request)}, status=error.http_status)
    for name, value in headers.items():
        response[name] = value
    if isinstance(exc, drf.MethodNotAllowed) and context.get("view") is not None:
        response["Allow"] = ", ".join(context["view"].allowed_methods)
    return response


def refusal_body(error: GroundControlError, request: Any) -> dict[str, Any]:
    """The uniform error body of `error`, as every API answer writes it."""
    return {"error": _body(error, request)}


class NotFoundView(APIView):
    """Any unknown path under /api/v1/: not_found with the uniform body (not Django's page).

    No key is looked at here, so the call counts against its address's limit on unauthenticated
    calls (`apikit.ratelimit.unauthenticated_refusal`), which answers 429 once it is spent."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    schema = None  # not an endpoint: left out of the OpenAPI schema

    def http_method_not_allowed(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise _not_found(request)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise _not_found(request)

    post = put = patch = delete = head = options = get


def _not_found(request: Request) -> GroundControlError:
    over = unauthenticated_refusal(client_address(request))
    return over if over is not None else NotFound(f"no endpoint {request.path}")


# --- Limits -------------------------------------------------------------------------------------


def max_body_bytes() -> int:
    return int(settings.GC_MAX_BODY_BYTES)


def check_body_size(request: Request) -> None:
    """Refuse a declared body over the limit before reading a byte of it."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(declared)
    except ValueError:
        raise ValidationFailed(
            "Content-Length is not a number", fields={"Content-Length": ["An integer."]}
        ) from None
    if length > max_body_bytes():
        raise _too_large()


def _too_large() -> PayloadTooLarge:
    limit = max_body_bytes()
    return PayloadTooLarge(f"the body is over the limit of {limit} bytes", limit_bytes=limit)


# A body nested deeper than this is refused (400): no call of the contract needs more, and the
# parsers' own limits are far above it (the standard one's is the interpreter's recursion).
MAX_JSON_DEPTH = 32
# Every object key as written in a body (`"..."` then `:`): a body with more of these than its
# parsed objects have keys may repeat a key (or hold `":` in a string) and is read strictly.
_KEY_TOKEN = re.compile(rb'"\s*:')


def json_shape_refusal(data: Any) -> str | None:
    """Why a parsed body is refused (nested deeper than MAX_JSON_DEPTH), or None."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"the body is nested deeper than {MAX_JSON_DEPTH} levels"
            children = value.values() if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)
    return None


def key_count(data: Any) -> int:
    """How many keys the parsed body's objects hold, all levels."""
    total, pending = 0, [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            total += len(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return total


def may_repeat_a_key(raw: bytes, data: Any) -> bool:
    """True when the body may hold a key twice in one object (every duplicate is caught; a `":`
    inside a string only sends the body to the strict parser, which tells them apart)."""
    return len(_KEY_TOKEN.findall(raw)) > key_count(data)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


# 2**63 has 19 digits: a run this long may be an integer orjson would read as a float.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a double's range")
    return value


def decode_json(raw: bytes) -> Any:
    """The body as JSON, strictly: UTF-8, no repeated key, no NaN, Infinity or number beyond a
    double's range (none of which PostgreSQL's jsonb holds), at most MAX_JSON_DEPTH deep;
    ValueError (with the reason) otherwise.

    orjson reads strict JSON in UTF-8 to the values the standard parser reads, at a fraction of
    the cost; a body it refuses (NaN, a lone surrogate, bad UTF-8), one that may repeat a key,
    or one with a run of digits it would read as a float is read by the standard parser, which
    decides and says why."""
    if not _LONG_DIGITS.search(raw):
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if not may_repeat_a_key(raw, data):
                refusal = json_shape_refusal(data)
                if refusal is not None:
                    raise ValueError(refusal)
                return data
    try:
        data = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_unique_keys,
            parse_constant=_not_a_number,
            parse_float=_finite,
        )
    except RecursionError:
        raise ValueError(f"the body is nested deeper than {MAX_JSON_DEPTH} levels") from None
    refusal = json_shape_refusal(data)
    if refusal is not None:
        raise ValueError(refusal)
    return data


def _read_limited(stream: Any) -> bytes:
    """At most one byte past the limit (a body without Content-Length included)."""
    limit = max_body_bytes()
    raw = stream.read(limit + 1) if stream is not None else b""
    if len(raw) > limit:
        raise _too_large()
    return raw


class LimitedJSONParser(JSONParser):
    """JSON, read at most one byte past the limit, and strictly (`decode_json`)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        raw = _read_limited(stream)
        if not raw:
            return {}
        try:
            return decode_json(raw)
        except ValueError as exc:  # UnicodeDecodeError too
            raise drf.ParseError(f"JSON parse error - {exc}") from None


JSON = "application/json"
# What nearly every client sends, all of which accept JSON (no header at all included): spared
# Django's parse of the header (`request.accepts`), which decides the rest.
_ACCEPTING_JSON = frozenset({None, "*/*", JSON, "application/*"})


def json_body(request: HttpRequest) -> Any:
    """A plain Django view's JSON body, read as a DRF view of the API reads it (`HandAPIView`:
    `LimitedJSONParser`, DRF's negotiation of Accept and Content-Type), with the same refusals:
    over the limit 413, Accept without JSON 406, a body not sent as JSON (no Content-Type
    included) 415, one that does not parse 400; no body is `{}`."""
    check_body_size(request)
    if request.META.get("HTTP_ACCEPT") not in _ACCEPTING_JSON and not request.accepts(JSON):
        raise drf.NotAcceptable()
    if not int(request.META.get("CONTENT_LENGTH") or 0):
        return {}
    content_type = request.META.get("CONTENT_TYPE", "")
    if not media_type_matches(JSON, content_type):
        raise drf.UnsupportedMediaType(content_type)
    return LimitedJSONParser().parse(request)


def json_answer(payload: Any, *, status: int = 200) -> HttpResponse:
    """A plain Django view's JSON answer, byte for byte what DRF's JSONRenderer writes (compact,
    UTF-8, a UTC time with Z, a Decimal as a number), at a tenth of the cost."""
    return HttpResponse(
        orjson.dumps(payload, default=_DRF_ENCODER.default, option=orjson.OPT_UTC_Z),
        status=status,
        content_type=JSON,
    )


_DRF_ENCODER = encoders.JSONEncoder()


def body_left_unread(request: HttpRequest) -> bool:
    """True when the request came with a body that was not read to its end: a refusal made
    before reading it (a declared length over the limit, a key refused before the body was
    parsed, a NUL in the path), or a body the parser stopped reading one byte past the limit."""
    meta = request.META
    if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
        # Django reads a body only up to its declared length: a chunked one is never read.
        return True
    declared = meta.get("CONTENT_LENGTH") or ""
    if not declared.isdigit() or int(declared) == 0:
        return False
    # Django reads the body through a LimitedStream over wsgi.input, which counts what was
    # read; once `request.body` has read it whole the stream is a BytesIO.
    stream = getattr(request, "_stream", None)
    return isinstance(stream, LimitedStream) and stream._pos < stream.limit


class CloseUnreadBodyMiddleware:
    """`Connection: close` on every answer that leaves part of its request's body unread.

    The next request on a connection starts where this one's body ends, so a server that did
    not read the body must either read the rest and throw it away or close the connection after
    the answer. granian throws away what it already holds and closes when more is to come (a
    few tens of KiB), saying so only sometimes: a client that then sent its next call on that
    connection found it closed. Said on every such answer, the server closes the connection
    every time and the client knows to open a new one; an answer whose body was read stays
    keep-alive.

    Under wsgiref (`runserver`, the tests' live server) nothing is added: it reads the rest of
    the body itself, and refuses hop-by-hop headers from the application (PEP 3333).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if body_left_unread(request) and not request.META.get("SERVER_SOFTWARE", "").startswith(
            "WSGIServer/"
        ):
            response["Connection"] = "close"
        return response


class RefuseNulMiddleware:
    """A NUL in the path or a query parameter is refused before anything looks it up (PostgreSQL
    cannot compare text holding one): 400, the uniform body under the API, a plain page
    elsewhere.

    A cookie holding one is dropped instead, as if never sent: a quoted cookie value may spell a
    NUL as `\\000`, which Django's cookie parser unquotes, and the session middleware would look
    that session id up (a 500 on every page). No cookie this server sets holds one, and a browser
    that keeps sending it must still reach the login page to be given a new one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "HTTP_COOKIE" in request.META:
            cookies = request.COOKIES
            for name in [n for n, v in cookies.items() if "\x00" in n or "\x00" in v]:
                del cookies[name]
        if "\x00" in request.path or any(
            "\x00" in name or any("\x00" in value for value in values)
            for name, values in request.GET.lists()
        ):
            error = ValidationFailed(
                "the path or a query parameter holds a NUL character",
                fields={"path": ["No NUL characters."]},
            )
            refused.send(sender=type(error), error=error)
            if request.path.startswith(API_PREFIX):
                return JsonResponse({"error": _body(error, request)}, status=400)
            return HttpResponse(error.message, status=400, content_type="text/plain")
        return self.get_response(request)


# --- Pagination ----------------------------------------------------------------------------------


class NewestFirst(CursorPagination):
    """DRF's cursor pagination on the primary key, newest first: a page costs one indexed query
    however deep it is, and rows inserted meanwhile never shift a page. The answer is the page's
    JSON array; the next page is in `X-Next-Cursor` and `Link: <url>; rel="next"` (neither on
    the last page)."""

    ordering = "-pk"
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "limit"
    max_page_size = MAX_PAGE_SIZE

    def get_page_size(self, request: Request) -> int:
        raw = request.query_params.get("limit")
        if raw is None or raw == "":
            return DEFAULT_PAGE_SIZE
        size = whole_number(raw) or 0  # ASCII digits only (`apikit.inputs`)
        if not (1 <= size <= MAX_PAGE_SIZE):
            raise ValidationFailed(
                f"limit must be an integer from 1 to {MAX_PAGE_SIZE}",
                fields={"limit": [f"An integer from 1 to {MAX_PAGE_SIZE}."]},
            )
        return size

    def decode_cursor(self, request: Request) -> Any:
        try:
            cursor = super().decode_cursor(request)
        except drf.NotFound:
            cursor = None
            invalid = True
        else:
            # Only what `get_next_link` gives out: forward, at a primary key (in ASCII digits:
            # str.isdigit() also passes "²", which int() then refuses).
            position = None if cursor is None else whole_number(str(cursor.position or ""))
            invalid = cursor is not None and (
                cursor.reverse or cursor.offset or position is None or position >= 2**63
            )
        if invalid:
            raise ValidationFailed(
                "cursor is not one this server gave out", fields={"cursor": ["An opaque cursor."]}
            )
        return cursor


def paginated(
    request: Request, queryset: QuerySet[Any], render: Callable[[list[Any]], list[Any]]
) -> Response:
    """One page of `queryset`, rendered (see `NewestFirst`)."""
    pages = NewestFirst()
    rows = pages.paginate_queryset(queryset, request)
    response = Response(render(list(rows or [])))
    next_url = pages.get_next_link()
    if next_url:
        response["Link"] = f'<{next_url}>; rel="next"'
        response["X-Next-Cursor"] = parse_qs(urlsplit(next_url).query)["cursor"][0]
    return response


class FormatChoice:
    """For a view whose renderers are its `format`s (JSON and an export's): an unknown `format`
    is a 400 naming the parameter (DRF would answer a missing page, 404), and an error answers
    the uniform JSON body whatever format was asked for. `formats_said`: "json or jsonl"."""

    formats_said = ""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        try:
            return super().perform_content_negotiation(request, force)  # type: ignore[misc]
        except Http404:
            raise ValidationFailed(
                f"format must be {self.formats_said}", fields={"format": [f"{self.formats_said}."]}
            ) from None

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
        if isinstance(response, Response) and response.status_code >= 400:
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = JSONRenderer.media_type
            response.renderer_context = self.get_renderer_context()  # type: ignore[attr-defined]
        return response
