"""The hot path: the calls every hand makes every few seconds (a resource renew or acquire, a
heartbeat report), answered in front of Django on PostgreSQL in one statement each.

Profiled under gunicorn (docs/performance.md), a renewal through Django spent about 1.1 ms of CPU
in Python: the handler and ten middlewares, URL resolving, DRF, building the key's four model
instances, and two round trips to the database (the key, then the renewal). `HotPath` wraps the
WSGI application and, for a plain POST to one of the three endpoints, does the same checks in
one statement: the key check (prefix, secret's hash, not revoked, not expired, the scope) is a
CTE in front of the engine's own statement, rendered with the key as its caller
(`leases.engine.PARAMETER_CALLER`), or, for a report, the key joined in the fleet's renewing
report (`fleet.services.ReportCaller`). The row carries the key's `last_used_at`, which a statement
of its own stamps when it is a minute old (`fleet.services.key_mark_used`, as
`fleet.services.key_authenticate` does).

It answers only a success. Anything else goes to Django untouched, which answers exactly as
before and records the refusal: a request that is not plain (a query string, an Accept or
Content-Type to negotiate, an Idempotency-Key, a host Django would refuse, a plain-http request
that must be redirected, a body the serializer would coerce, trim or refuse), a key, scope,
fence or tenure the statement did not match, and any database error. A statement that matches
nothing writes nothing, so Django doing the call again is safe. The rate-limit count taken here
travels with the request (`RATE_COUNTED` in the WSGI environ), so no call is counted twice.

SQLite (the embedded default) always goes to Django: data-modifying CTEs are PostgreSQL's.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http.request import split_domain_port, validate_host

from fleet import services as fleet
from fleet.api import MAX_NAME, MAX_REASON, lease_json, report_row_json
from fleet.models import Hand, HandKey, ReportKind, Scope
from groundcontrol.api import (
    RATE_COUNTED,
    REQUEST_ID_HEADER,
    max_body_bytes,
    request_id_for_header,
)
from groundcontrol.ratelimit import rate_caller, rate_limit
from leases import engine
from leases import services as lease_services
from leases.clock import now_sql
from leases.errors import GroundControlError, RateLimited
from leases.models import Event, EventKind, LeaseKind
from leases.waiting import MAX_WAIT_S

logger = logging.getLogger(__name__)

JSON = "application/json"
# What DRF's negotiation settles on JSON for without parameters (an indent would change it).
_PLAIN_ACCEPT = frozenset({None, "*/*", JSON, "application/*"})
_PLAIN_CONTENT_TYPES = frozenset({JSON, "application/json; charset=utf-8"})
_REPORTS = re.compile(r"^/api/v1/attempts/([1-9][0-9]{0,17})/reports$")
_REPORT_KINDS = frozenset(ReportKind.values)
_HEARTBEAT = ReportKind.HEARTBEAT.value
_UTC_Z = orjson.OPT_UTC_Z
# 2**63 has 19 digits: a run this long may be an integer orjson would read as a float.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")

StartResponse = Callable[..., Any]
# Set in the environ of a request the hot path has tried (and left to Django).
HOT_PATH_TRIED = "gc.hot_path_tried"


# --- Plain values: what the serializers would keep unchanged --------------------------------------


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


# --- The key check, as SQL in front of each statement ------------------------------------------


def _key_conditions(scope: Scope) -> str:
    """The key check on the key `k`: valid for `scope` now. The secret is compared as its
    SHA-256 hash (the stored form), so the comparison's timing says nothing about the secret.
    The scope is the statement's own, a constant in its text: PostgreSQL reads it as jsonb once
    per plan, not once per call.

    Every statement returns the key's id and `last_used_at`, which a statement of its own
    stamps when it is a minute old (`fleet.services.key_mark_used`), not a CTE here: a
    data-modifying CTE costs its table's index locks on every call even when it writes nothing
    (about a tenth of a renewal's statement, measured)."""
    return (
        "k.prefix = %(key_prefix)s AND k.secret_hash = %(key_secret_hash)s "
        "AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > {now}) "
        f"AND k.scopes @> CAST('[\"{scope.value}\"]' AS jsonb)"
    )


def _key_cte(scope: Scope) -> str:
    """`key`: the caller's key if it is valid for `scope` now (one row or none), with its hand's
    name (a lease's holder) and workspace, for the lease statements."""
    key, hand = HandKey._meta.db_table, Hand._meta.db_table
    return (
        "key AS (SELECT k.id AS key_id, h.id AS key_hand_id, h.name AS key_holder, "
        "h.workspace_id AS key_workspace_id, k.lane_id AS key_lane_id, "
        f"k.last_used_at AS key_used_at FROM {key} k JOIN {hand} h ON h.id = k.hand_id "
        f"WHERE {_key_conditions(scope)})"
    )


# A report's caller: the key, joined in the report's own UPDATE; a report needs only the hand's
# id, which the key row holds. (As a CTE it cost about a tenth of a heartbeat's statement:
# PostgreSQL keeps a CTE that reads the clock apart, measured.)
_KEY_REPORTER = fleet.ReportCaller(
    hand="k.hand_id",
    joined=f"{HandKey._meta.db_table} k, ",
    # A lane-limited key reaches only its lane's attempts.
    where=(
        f"AND {_key_conditions(Scope.WORK)} AND mine.lane_id = COALESCE(k.lane_id, mine.lane_id) "
    ),
    # The attempt's lease (remembered: `_ATTEMPT_LEASES`), then the key's id and last use.
    columns=(("mine.lease_id", "lease_id"), ("k.id", "key_id"), ("k.last_used_at", "key_used_at")),
)
# attempt id -> its lease's id, as the reports' rows gave them: a report names its lease by this
# value instead of reading the attempt a second time for it (`fleet.services._report_template`;
# measured under load, that read was about 7 % of a heartbeat's database CPU). An attempt's lease
# never changes, and the statement checks the pair anyway: a wrong one matches nothing.
_ATTEMPT_LEASES: dict[int, int] = {}
_ATTEMPT_LEASES_MAX = 100_000


# The caller's workspace and name as values of the key check (scalar sub-selects), not columns
# of a join with it: a lease's conditions then compare columns with values, so PostgreSQL finds
# the lease by (workspace_id, resource) in the unique index. As a join, a plan made while the
# table was small scanned a whole index for the resource and joined the key after it. FROM key
# stays, so that no key means no row.
_KEY_CALLER = {
    "caller_workspace": "(SELECT key_workspace_id FROM key)",
    "caller_holder": "(SELECT key_holder FROM key)",
    "caller_from": " FROM key",
}


# Every statement's row ends with the key's id and last use (`_row` stamps and drops them).
_KEY_COLUMNS = "key.key_id, key.key_used_at"


def _renew_template() -> str:
    return (
        f"WITH {_key_cte(Scope.LEASES)}, renewed AS ({engine.RENEW}) "
        f"SELECT renewed.*, {_KEY_COLUMNS} FROM renewed, key"
    )


def _acquire_template() -> str:
    """A new resource (INSERT) or a free one (UPDATE), whichever matches, and its event. Both run
    on one snapshot: a row that exists makes the INSERT do nothing, a row that does not is
    invisible to the UPDATE, so at most one of them grants."""
    event = Event._meta.db_table
    return (
        f"WITH {_key_cte(Scope.LEASES)}, inserted AS ({engine.INSERT}), taken AS ({engine.TAKE}), "
        "granted AS (SELECT * FROM inserted UNION ALL SELECT * FROM taken), "
        f"event AS (INSERT INTO {event} "
        "(workspace_id, kind, at, actor, hand, resource, fence, data) "
        f"SELECT workspace_id, '{EventKind.LEASE_ACQUIRED.value}', server_time, holder, holder, "
        "resource, fence, CAST(%(event_data)s AS jsonb) FROM granted) "
        f"SELECT granted.*, {_KEY_COLUMNS} FROM granted, key"
    )


_NEVER_BY_COUNT = 2**31


@functools.lru_cache(maxsize=32)
def _statement(name: str, clock: str) -> str:
    """The rendered statement, built once per clock expression (`now_sql()`: constant in
    production; tests that freeze the clock render their instant into it)."""
    if name == "renew":
        return engine.render(_renew_template(), **_KEY_CALLER)
    if name == "acquire":
        return engine.render(_acquire_template(), **_KEY_CALLER)
    return fleet.report_statement(
        with_percent=name == "report_percent",
        bare=name == "heartbeat",
        answer_only=True,
        caller=_KEY_REPORTER,
    )


def _row(
    db: Any, statement: str, params: dict[str, Any], server_time_at: int = len(engine.COLUMNS)
) -> tuple[Any, ...] | None:
    """One prepared statement with server-side parameters: PostgreSQL plans it once per
    connection instead of on every call (Django binds on the client and never prepares; for
    these CTEs planning cost more than running them). `db`: the request's database wrapper
    (looked up once a request: each lookup is a thread-local's). `server_time_at`: where the row
    holds the statement's time (after the lease's columns, unless told)."""
    db.ensure_connection()
    raw = db.connection
    if raw.prepare_threshold is None:
        # Django turns preparation off (None); a threshold no statement reaches turns it back on
        # for the statements that ask for it, and for those only.
        raw.prepare_threshold = _NEVER_BY_COUNT
    with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        # Binary results: PostgreSQL's timestamps arrive without text to parse.
        cursor.execute(statement, params, prepare=True, binary=True)
        row = cursor.fetchone()
    if row is None:
        return None
    # Every statement's row ends with the key's id and last use: stamp the key's last_used_at
    # if it is a minute old, and leave them out.
    key_id, used_at = row[-2:]
    fleet.key_mark_used(key_id, used_at, row[server_time_at])
    return row[:-2]


_REPORT_TIME = fleet.REPORT_ANSWER_LEASE.index("server_time")


# --- The three calls: parse the body, run the statement, or None for Django ---------------------

Answer = tuple[int, Any]


def _renew(db: Any, data: dict[str, Any], key: dict[str, str], match: Any) -> Answer | None:
    resource = plain_text(
        data.get("resource"), max_length=lease_services.MAX_RESOURCE_LENGTH, trimmed=False
    )
    fence = plain_int(data.get("fence"))
    process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
    if resource is None or fence is None or process_id is None:
        return None
    params = {**key, "resource": resource, "fence": fence, "process_id": process_id}
    row = _row(db, _statement("renew", now_sql()), params)
    return (200, lease_json(engine.snapshot(row))) if row else None


def _acquire(db: Any, data: dict[str, Any], key: dict[str, str], match: Any) -> Answer | None:
    resource = plain_text(
        data.get("resource"), max_length=lease_services.MAX_RESOURCE_LENGTH, trimmed=False
    )
    ttl_s = plain_float(data.get("ttl_s"), minimum=1, maximum=lease_services.MAX_TTL_S)
    process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
    wait_s = plain_float(data.get("wait_s", 0), minimum=0, maximum=MAX_WAIT_S)
    if resource is None or ttl_s is None or process_id is None or wait_s is None:
        return None
    try:  # the service's own checks of the name (a slot's resource is not for acquiring)
        lease_services.validate_resource(resource)
        lease_services.refuse_slot_resource(resource)
    except GroundControlError:
        return None
    params = {
        **key,
        "resource": resource,
        "kind": LeaseKind.RESOURCE.value,
        "process_id": process_id,
        "interval_s": ttl_s,
        "grace_s": 0.0,
        "event_data": orjson.dumps({"ttl_s": ttl_s, "process_id": process_id}).decode(),
    }
    row = _row(db, _statement("acquire", now_sql()), params)
    return (201, lease_json(engine.snapshot(row))) if row else None


def _report(db: Any, data: dict[str, Any], key: dict[str, str], match: Any) -> Answer | None:
    fence, kind = plain_int(data.get("fence")), data.get("kind")
    # Without a process identity a report renews nothing: Django records it.
    process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
    if fence is None or kind not in _REPORT_KINDS or process_id is None:
        return None
    attempt_id = int(match.group(1))
    lease_id = _ATTEMPT_LEASES.get(attempt_id)
    params = {
        **key,
        "attempt_id": attempt_id,
        "lease_id": lease_id,
        "fence": fence,
        "process_id": process_id,
    }
    if kind == _HEARTBEAT and len(data) == 3:  # the fleet's most frequent call: nothing else
        name = "heartbeat"
    else:
        message, percent, details = data.get("message"), data.get("percent"), data.get("details")
        if (
            (message is not None and plain_text(message, max_length=MAX_REASON) is None)
            or (percent is not None and plain_float(percent, minimum=0, maximum=100) is None)
            or (details is not None and type(details) is not dict)
        ):
            return None
        params |= fleet.report_params(
            attempt_id=attempt_id,
            fence=fence,
            kind=kind,
            process_id=process_id,
            message=message or "",
            percent=None if percent is None else float(percent),
            details=details,
            lease_id=lease_id,
        )
        if fleet.is_bare_heartbeat(kind, message or "", percent, details):
            name = "heartbeat"
        else:
            name = "report_percent" if percent is not None else "report"
    statement = _statement(name, now_sql())
    row = _row(db, statement, params, _REPORT_TIME)
    if row is None:
        # Whatever the reason, the statement is tried without the remembered lease next time.
        _ATTEMPT_LEASES.pop(attempt_id, None)
        return None
    *answer, record_due, lease_id = row
    if len(_ATTEMPT_LEASES) >= _ATTEMPT_LEASES_MAX:
        _ATTEMPT_LEASES.clear()
    _ATTEMPT_LEASES[attempt_id] = lease_id
    recorded_at = None
    if record_due:
        at = answer[_REPORT_TIME]
        if fleet.heartbeat_record(attempt_id=attempt_id, fence=fence, at=at, process_id=process_id):
            recorded_at = at
    attempt = report_row_json(answer, attempt_id=attempt_id, fence=fence, recorded_at=recorded_at)
    return 200, {"renewed": True, "attempt": attempt}


# path -> call (each checks its own scope); the reports path is matched by _REPORTS.
_CALLS: dict[str, Callable[..., Answer | None]] = {
    "/api/v1/leases/renew": _renew,
    "/api/v1/leases/acquire": _acquire,
}


# --- The WSGI wrapper ---------------------------------------------------------------------------


class HotPath:
    """Wraps the WSGI application; see the module's doc."""

    def __init__(self, app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self._headers: list[tuple[str, str]] | None = None

    # What a request takes along when the hot path has tried it and Django is to answer it.
    carried = (RATE_COUNTED, HOT_PATH_TRIED)

    def serves(self, path: str) -> bool:
        """Whether a POST to `path` may be one of the hot path's calls."""
        return path in _CALLS or _REPORTS.match(path) is not None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get(HOT_PATH_TRIED):
            return self.app(environ, start_response)
        answered = self.respond(environ)
        if answered is None:
            return self.app(environ, start_response)
        status, headers, body = answered
        start_response(status, headers)
        return [body]

    def respond(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes] | None:
        """The answer (status line, headers, body) if the hot path serves the call, else None."""
        db = connections[DEFAULT_DB_ALIAS]
        if environ.get("REQUEST_METHOD") != "POST" or db.vendor != "postgresql":
            return None
        answer = self._answer(environ, db)
        if answer is None:
            return None
        status, body = answer
        return status, self._response_headers(environ, body), body

    def _answer(self, environ: dict[str, Any], db: Any) -> tuple[str, bytes] | None:
        path = environ.get("PATH_INFO", "")
        call = _CALLS.get(path)
        match = None
        if call is None:
            match = _REPORTS.match(path)
            if match is None:
                return None
            call = _report
        environ[HOT_PATH_TRIED] = True
        if not _plain_request(environ):
            return None
        token = _bearer(environ)
        data = _json_body(environ)  # read even when not used: Django reads it from the copy
        if token is None or data is None:
            return None
        prefix, secret = token
        secret_hash = hashlib.sha256(secret.encode()).hexdigest()
        try:
            rate_limit(rate_caller(prefix, secret_hash))
        except RateLimited as refused:
            environ[RATE_COUNTED] = refused
            return None
        environ[RATE_COUNTED] = True
        key = {"key_prefix": prefix, "key_secret_hash": secret_hash}
        if not db.in_atomic_block:
            db.close_if_unusable_or_obsolete()  # what Django does as a request starts
        try:
            answer = call(db, data, key, match)
        except Exception:  # noqa: BLE001 - Django does the call again and answers it
            logger.warning("hot path failed; handing %s to Django", path, exc_info=True)
            return None
        if answer is None:
            return None
        status, payload = answer
        # orjson writes what DRF's JSONRenderer writes for these answers (compact, UTF-8, a UTC
        # time with Z), at a tenth of the cost; the tests compare the two.
        body = orjson.dumps(payload, option=_UTC_Z)
        return f"{status} {'OK' if status == 200 else 'Created'}", body

    def _response_headers(self, environ: dict[str, Any], body: bytes) -> list[tuple[str, str]]:
        if self._headers is None:
            self._headers = _static_headers()
        headers = [
            *self._headers,
            ("Content-Length", str(len(body))),
            (REQUEST_ID_HEADER, request_id_for_header(environ.get("HTTP_X_REQUEST_ID", ""))),
        ]
        if settings.SECURE_HSTS_SECONDS and _is_secure(environ):
            headers.append(("Strict-Transport-Security", _hsts()))
        return headers


def _static_headers() -> list[tuple[str, str]]:
    """What Django's middleware and DRF add to a JSON answer of these views (the tests compare
    them with Django's own answer)."""
    headers = [("Content-Type", JSON), ("Allow", "POST, OPTIONS")]
    if settings.X_FRAME_OPTIONS:
        headers.append(("X-Frame-Options", settings.X_FRAME_OPTIONS))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("X-Content-Type-Options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        value = policy if isinstance(policy, str) else ",".join(policy)
        headers.append(("Referrer-Policy", value))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    return headers


def _is_secure(environ: dict[str, Any]) -> bool:
    """`HttpRequest.is_secure()`, from the environ."""
    if settings.SECURE_PROXY_SSL_HEADER:
        header, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = environ.get(header)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return environ.get("wsgi.url_scheme") == "https"


def _hsts() -> str:
    """SecurityMiddleware's Strict-Transport-Security value."""
    value = f"max-age={settings.SECURE_HSTS_SECONDS}"
    if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
        value += "; includeSubDomains"
    if settings.SECURE_HSTS_PRELOAD:
        value += "; preload"
    return value


def _plain_request(environ: dict[str, Any]) -> bool:
    """A request Django would pass through its middleware unchanged to a JSON answer."""
    if environ.get("QUERY_STRING") or environ.get("HTTP_ACCEPT") not in _PLAIN_ACCEPT:
        return False
    if environ.get("CONTENT_TYPE") not in _PLAIN_CONTENT_TYPES:
        return False
    if "HTTP_IDEMPOTENCY_KEY" in environ or "HTTP_X_FORWARDED_HOST" in environ:
        return False
    if settings.SECURE_SSL_REDIRECT and not _is_secure(environ):
        return False  # Django redirects it to https
    # `HttpRequest.get_host()`'s check (X-Forwarded-Host was sent to Django above).
    host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
    return _allowed_host(host, tuple(settings.ALLOWED_HOSTS))


@functools.lru_cache(maxsize=256)
def _allowed_host(host: str, allowed: tuple[str, ...]) -> bool:
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


def _bearer(environ: dict[str, Any]) -> tuple[str, str] | None:
    scheme, _, raw = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    parts = raw.strip().split("_", 2)
    if scheme.lower() != "bearer" or len(parts) != 3 or parts[0] != "gc":
        return None
    prefix, secret = parts[1], parts[2]
    return (prefix, secret) if prefix and secret else None


def _json_body(environ: dict[str, Any]) -> dict[str, Any] | None:
    """The body as a JSON object, or None. What was read is put back for Django."""
    length = environ.get("CONTENT_LENGTH") or ""
    if not length.isdigit() or int(length) > max_body_bytes():
        return None
    raw = environ["wsgi.input"].read(int(length))
    environ["wsgi.input"] = io.BytesIO(raw)
    try:
        # orjson reads strict JSON in UTF-8 (no NaN, no lone surrogates) to the values Django's
        # parser reads, at a fraction of the cost; what it refuses goes to Django. It reads an
        # integer beyond 64 bits as a float, though, so a body with such a long run of digits
        # (a report's details keep whatever they are given) is read by the standard parser.
        data = json.loads(raw.decode()) if _LONG_DIGITS.search(raw) else orjson.loads(raw)
    except ValueError:  # orjson.JSONDecodeError and json's own, a UnicodeDecodeError too
        return None
    return data if type(data) is dict else None
