"""The hot calls (a resource renew or acquire, a renewing report): ordinary Django views behind
Django's own middleware, URL routing and security headers, each answered on PostgreSQL by one
prepared statement that checks the key and makes the change together.

`serving(ApiView, call)` is the view routed at the endpoint: it runs `call` and, when `call`
answers None, the endpoint's DRF view, which is the same service the rest of the API uses, and
which explains and records the refusal. `call` answers None only when nothing was applied: when
the request is not plain (a query string, an Accept or Content-Type to negotiate, an
Idempotency-Key, a body the serializer would coerce or refuse), when the statement matched
nothing (a statement that matches nothing writes nothing), or when the database refused the
statement itself; a database out of reach answers 503, never the DRF view's second try. A renew,
renew-all or report whose statement matched nothing is refused without running it again: the
DRF view authenticates the key (whose refusal it explains) and its service says why from what it
reads (`STATEMENT_MISSED`); only a denied acquire is tried again by the service.
Once the statement has matched, the call is done: what follows (stamping the key's last use,
the heartbeat's once-a-minute record) is bookkeeping that never sends the call to Django again.
The rate limit's count taken here travels with the request (`RATE_COUNTED`), so no call is
counted twice.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    connections,
)
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from apikit import reads
from apikit.api import (
    RATE_COUNTED,
    STATEMENT_MISSED,
    MissedStatement,
    json_shape_refusal,
    max_body_bytes,
    may_repeat_a_key,
)
from apikit.errors import GroundControlError, RateLimited
from apikit.outages import is_database_outage
from apikit.ratelimit import rate_caller, rate_limit
from apikit.retries import is_conflict
from fleet.api.presenters import (
    lease_json,
    not_renewed_json,
    pending_of_leases,
    renewed_json,
    report_row_json,
)
from fleet.attempts import reports as report_services
from fleet.models import ReportKind
from hands import keys
from hands import services as hand_services
from hands.models import Hand, HandKey, Scope
from hands.views import MAX_NAME, MAX_REASON
from leases import engine, names, tree
from leases import handoffs as lease_handoffs
from leases import services as lease_services
from leases.audit import event_insert_sql
from leases.clock import now_sql
from leases.fences import as_fence
from leases.models import EventKind, LeaseKind, LeaseMode
from leases.waiting import MAX_WAIT_S

logger = logging.getLogger(__name__)


# --- Plain values: a request's value its DRF serializer would keep unchanged, so the one
# statement may take it as sent; anything else goes to the serializer ----------------------------


def plain_text(value: object, *, max_length: int, trimmed: bool = True) -> str | None:
    """`value` if a DRF CharField would keep it exactly (printable, within its length, and, for a
    trimming field, without surrounding spaces); None if the serializer must decide."""
    if type(value) is not str or not 0 < len(value) <= max_length or not value.isprintable():
        return None
    if trimmed and value != value.strip():
        return None
    return value


def plain_float(value: object, *, minimum: float, maximum: float) -> float | None:
    """As a DRF FloatField would return it (a float), if it is a plain in-range number."""
    if type(value) not in (int, float) or not math.isfinite(value):
        return None
    return float(value) if minimum <= value <= maximum else None


# --- What the hot path remembers per process: facts that never change once true, so that its
# statements carry them as values instead of reading them again. Each statement checks what it
# is given (a wrong value matches nothing, and the DRF view answers), and a call that matched
# nothing forgets what it used. -----------------------------------------------------------------

# attempt id -> its lease's id, as the reports' rows gave them: a report names its lease by this
# value instead of reading the attempt again for it (an attempt's lease never changes).
ATTEMPT_LEASES: dict[int, int] = {}
# key prefix -> the workspace of the key's hand (a key never changes hand, a hand never changes
# workspace): a report names the attempt's workspace by it, so that the statement reaches one
# workspace's rows (docs/scale.md). Whether the key may still be used is the statement's to say.
KEY_WORKSPACES: dict[str, int] = {}
MAX_REMEMBERED = 100_000

# The key's hand's workspace, by the key's prefix and its secret's hash.
KEY_WORKSPACE = (
    f"SELECT h.workspace_id FROM {HandKey._meta.db_table} k "
    f"JOIN {Hand._meta.db_table} h ON h.id = k.hand_id "
    "WHERE k.prefix = %(key_prefix)s AND k.secret_hash = %(key_secret_hash)s"
)


def remember(memory: dict[Any, int], key: Any, value: int) -> None:
    if len(memory) >= MAX_REMEMBERED:
        memory.clear()
    memory[key] = value


def key_workspace(db: Any, prefix: str, secret_hash: str) -> int | None:
    """The workspace of the key `prefix` (read once per process, by its secret's hash too, so
    that no call with a wrong secret fills the memory), or None if there is no such key."""
    known = KEY_WORKSPACES.get(prefix)
    if known is not None:
        return known
    with db.cursor() as cursor:
        cursor.execute(KEY_WORKSPACE, {"key_prefix": prefix, "key_secret_hash": secret_hash})
        row = cursor.fetchone()
    if row is None:
        return None
    remember(KEY_WORKSPACES, prefix, row[0])
    return row[0]


JSON = "application/json"
# What DRF's negotiation settles on JSON for without parameters (an indent would change it).
_PLAIN_ACCEPT = frozenset({None, "*/*", JSON, "application/*"})
_PLAIN_CONTENT_TYPES = frozenset({JSON, "application/json; charset=utf-8"})
_REPORT_KINDS = frozenset(ReportKind.values)
_HEARTBEAT = ReportKind.HEARTBEAT.value
_COST_FIELDS = frozenset({"tokens_in", "tokens_out", "cost_usd"})
_UTC_Z = orjson.OPT_UTC_Z
# 2**63 has 19 digits: a run this long may be an integer orjson would read as a float.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
# Tests turn the statements off to compare an answer with the DRF view's own.
ENABLED = True


# --- The key check, as SQL in front of each statement ------------------------------------------


def _key_conditions(scope: Scope) -> str:
    """The key check on the key `k`: valid for `scope` now (`hands.keys`). The secret is
    compared as its SHA-256 hash (the stored form), so the comparison's timing says nothing
    about the secret.

    Every statement returns the key's id and `last_used_at`, which a statement of its own stamps
    when it is a minute old (`hands.services.key_mark_used`); a data-modifying CTE would cost
    its table's index locks on every call even when it writes nothing (docs/performance.md)."""
    return "k.prefix = %(key_prefix)s AND k.secret_hash = %(key_secret_hash)s AND " + (
        keys.usable_sql("k", "{now}", scope.value)
    )


def _key_cte(scope: Scope, *, grants: bool = False) -> str:
    """`key`: the caller's key if it is valid for `scope` now and its hand is in the workspace
    the call names (one row or none), with the hand's name (a lease's holder).

    `grants`: the statement grants a tenure taken with this key, so the key's row is read FOR
    SHARE, as every granting statement reads it (`hands.services.key_guard`): a revocation in
    flight is waited for and then seen, and one that comes later waits for this grant's commit
    and ends its tenure (`hands.services.keys_tenures_end`). The CTE is read by several parts of
    the statement, so PostgreSQL evaluates it once, before any lease row is written."""
    key, hand = HandKey._meta.db_table, Hand._meta.db_table
    lock = " FOR SHARE OF k" if grants else ""
    return (
        "key AS (SELECT k.id AS key_id, h.name AS key_holder, "
        f"k.last_used_at AS key_used_at FROM {key} k JOIN {hand} h ON h.id = k.hand_id "
        f"WHERE {_key_conditions(scope)} AND h.workspace_id = %(workspace_id)s{lock})"
    )


# A report's caller: the key, joined in the report's own UPDATE (a report needs only the hand's
# id, which the key row holds); a lane-limited key reaches only its lane's attempts. `+ 0` keeps
# the key's hand index out of the join: with one key per hand in the statistics, a generic plan
# reached the key from the attempt's hand through it, and a hand with many keys (one per attempt
# for revoke_when_done) would read them all per heartbeat; the key is found by its prefix.
_KEY_REPORTER = report_services.ReportCaller(
    hand="(k.hand_id + 0)",
    joined=f"{HandKey._meta.db_table} k, ",
    where=(
        f"AND {_key_conditions(Scope.WORK)} AND mine.lane_id = COALESCE(k.lane_id, mine.lane_id) "
    ),
    columns=(
        ("mine.workspace_id", "caller_workspace_id"),
        ("mine.lease_id", "lease_id"),
        ("k.id", "key_id"),
        ("k.last_used_at", "key_used_at"),
    ),
)
# The caller's workspace as a value (the key's, remembered: `KEY_WORKSPACES`, and checked by the key
# check) and its name as a value of the key check (a scalar sub-select), so that the lease is
# found by (workspace_id, resource) in its unique index; FROM key stays, so that no key means no
# row (docs/performance.md).
_KEY_CALLER = {
    "caller_workspace": "%(workspace_id)s",
    "caller_holder": "(SELECT key_holder FROM key)",
    "caller_key": "(SELECT key_id FROM key)",
    "caller_from": " FROM key",
    "caller_guard": "",  # the key check is the statement's source: no key, no row
}
_KEY_COLUMNS = "key.key_id, key.key_used_at"


def _renew_template() -> str:
    return (
        f"WITH {_key_cte(Scope.LEASES)}, renewed AS ({engine.RENEW}) "
        f"SELECT renewed.*, {_KEY_COLUMNS} FROM renewed, key"
    )


def _renew_all_template() -> str:
    """Every live lease of the process renewed, and those it has lost, in one statement: both
    read one snapshot, in which a renewed lease is alive and a lost one is not."""
    return (
        f"WITH {_key_cte(Scope.LEASES)}, renewed AS ({engine.RENEW_ALL}), "
        f"lost AS ({engine.HELD_LOST}) "
        f"SELECT renewed.*, true AS renewed_now, {_KEY_COLUMNS} FROM renewed, key "
        f"UNION ALL SELECT lost.*, false, {_KEY_COLUMNS} FROM lost, key"
    )


def _acquire_template() -> str:
    """A new resource (INSERT) or a free one (UPDATE), whichever matches, and its event. Both run
    on one snapshot: a row that exists makes the INSERT do nothing, a row that does not is
    invisible to the UPDATE, so at most one of them grants."""
    # The columns of `leases.audit.EVENT_COLUMNS`, as `lease_services.lease_acquire` fills them.
    written = event_insert_sql(
        f"SELECT workspace_id, '{EventKind.LEASE_ACQUIRED.value}', server_time, holder, holder, "
        "resource, fence, CAST(%(event_data)s AS jsonb), %(key_prefix)s FROM granted"
    )
    return (
        f"WITH {_key_cte(Scope.LEASES, grants=True)}, inserted AS ({engine.INSERT}), "
        f"taken AS ({engine.TAKE}), "
        "granted AS (SELECT * FROM inserted UNION ALL SELECT * FROM taken), "
        f"event AS ({written}) "
        f"SELECT granted.*, {_KEY_COLUMNS} FROM granted, key"
    )


_NEVER_BY_COUNT = 2**31


@functools.lru_cache(maxsize=32)
def statement(name: str, clock: str) -> str:
    """The rendered statement, built once per clock expression (`now_sql()`: constant in
    production; tests that freeze the clock render their instant into it)."""
    if name == "renew":
        return engine.render(_renew_template(), **_KEY_CALLER)
    if name == "acquire":
        return engine.render(_acquire_template(), **_KEY_CALLER)
    if name == "renew_all":
        return engine.render(_renew_all_template(), **_KEY_CALLER)
    return report_services.report_statement(
        with_percent=name == "report_percent",
        bare=name == "heartbeat",
        answer_only=True,
        caller=_KEY_REPORTER,
    )


def run_statement(
    db: Any, sql: str, params: dict[str, Any], *, prelude: str | None = None, many: bool = False
) -> Any:
    """One statement with server-side parameters, prepared: PostgreSQL plans it once per
    connection instead of on every call (Django binds on the client and never prepares; for
    these CTEs planning cost more than running them). Behind a transaction pooler that does not
    keep prepared statements (`GC_DB_PREPARE=0`, the default with `GC_DB_POOLER=transaction`)
    it is sent unnamed and planned on every call: a named one would be looked up on whichever
    server connection the pooler picks. Binary results: timestamps arrive without text to
    parse. With a `prelude`, both run in one transaction (psycopg's pipeline mode, measured,
    cost more than its round trips saved on loopback)."""
    db.ensure_connection()
    raw = db.connection
    prepare = bool(settings.GC_DB_PREPARE)
    if prepare and raw.prepare_threshold is None:
        # Django turns preparation off (None); a threshold no statement reaches turns it back on
        # for the statements that ask for it, and for those only.
        raw.prepare_threshold = _NEVER_BY_COUNT
    with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
        if prelude is None:
            cursor.execute(sql, params, prepare=prepare, binary=True)
            return (cursor.fetchall() or None) if many else cursor.fetchone()
        with psycopg.Cursor(raw) as first, raw.transaction():
            first.execute(prelude, params, prepare=prepare)
            cursor.execute(sql, params, prepare=prepare, binary=True)
            return cursor.fetchone()


def _bookkeeping(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """After the statement has matched, the call is applied: a failure here is logged, never a
    reason to send the call to Django again (it would apply it twice)."""
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        logger.warning("%s failed after the call was applied", what, exc_info=True)
        return None


def _pending(*, lease_handoffs_of: list[engine.LeaseSnapshot]) -> dict[int, list[Any]]:
    """The open handoff requests on renewed leases (a query only when a row counts some): read
    after the renewal was applied, so a failure shows none this time, never the DRF view; the
    count stays, and the next renewal shows them."""
    found = _bookkeeping("reading the handoff requests", pending_of_leases, lease_handoffs_of)
    return found or {}


def _stamp_key(row: tuple[Any, ...], server_time_at: int) -> tuple[Any, ...]:
    """Every statement's row ends with the key's id and last use: stamp the key's last_used_at
    if it is a minute old, and leave them out."""
    key_id, used_at = row[-2:]
    _bookkeeping(
        "stamping the key", hand_services.key_mark_used, key_id, used_at, row[server_time_at]
    )
    return row[:-2]


_REPORT_TIME = report_services.REPORT_ANSWER_LEASE.index("server_time")
_REPORT_HANDOFFS = report_services.REPORT_ANSWER_LEASE.index("handoff_open")
_LEASE_TIME = len(engine.COLUMNS)
_COLUMN = {name: i for i, name in enumerate(engine.COLUMNS)}

# --- The three calls ------------------------------------------------------------------------------
# Each parses the body into its statement and parameters (None: not plain, for the DRF view) and
# turns the statement's row into the answer. Parsing runs before anything is applied, so any
# failure in it hands the call to the DRF view; answering runs after, so nothing in it does.

Answer = tuple[int, Any]


@dataclass(frozen=True)
class Prepared:
    name: str  # the statement (`statement`)
    params: dict[str, Any]


class HotCall:
    def parse(self, data: dict[str, Any], **kwargs: Any) -> Prepared | None:
        raise NotImplementedError

    def answer(self, row: tuple[Any, ...], prepared: Prepared) -> Answer:
        raise NotImplementedError

    def missed(self, prepared: Prepared) -> None:
        """The statement matched nothing."""

    # A miss is the call's answer: the DRF view's service explains it without running the
    # statement again (`apikit.api.STATEMENT_MISSED`), for a call that cannot match later what
    # it missed now.
    miss_is_final = True

    # A statement to run first, in one transaction with the call's (the locks it needs).
    prelude: str | None = None
    # Its statement answers many rows (`answer` gets the list; none at all: the DRF view).
    many = False


class Renew(HotCall):
    def parse(self, data: dict[str, Any], **kwargs: Any) -> Prepared | None:
        resource = resource_of(data.get("resource"))
        fence = as_fence(data.get("fence"))
        process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
        if resource is None or fence is None or process_id is None:
            return None
        return Prepared(
            "renew", {"node": names.node_of(resource), "fence": fence, "process_id": process_id}
        )

    def answer(self, row: tuple[Any, ...], prepared: Prepared) -> Answer:
        lease = engine.snapshot(_stamp_key(row, _LEASE_TIME))
        return 200, renewed_json([lease], _pending(lease_handoffs_of=[lease]))[0]


def is_slot(resource: str) -> bool:
    """A slot's lease is renewed by its attempt's report, never as a resource: the DRF view
    refuses it (`leases.services.refuse_slot_resource`)."""
    try:
        lease_services.refuse_slot_resource(resource)
    except GroundControlError:
        return True
    return False


def resource_of(value: object) -> str | None:
    """`value` if it is a resource the DRF view would take as it is: a plain string, a canonical
    name (`leases.names`, the service's own rule) and no slot's; else None, and the DRF view
    refuses it, with the message that says how to fix it."""
    resource = plain_text(value, max_length=lease_services.MAX_RESOURCE_LENGTH, trimmed=False)
    if resource is None or not names.is_canonical(resource) or is_slot(resource):
        return None
    return resource


class Acquire(HotCall):
    def parse(self, data: dict[str, Any], **kwargs: Any) -> Prepared | None:
        resource = resource_of(data.get("resource"))
        ttl_s = plain_float(data.get("ttl_s"), minimum=1, maximum=lease_services.MAX_TTL_S)
        process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
        wait_s = plain_float(data.get("wait_s", 0), minimum=0, maximum=MAX_WAIT_S)
        exclusive = data.get("mode", LeaseMode.EXCLUSIVE.value) == LeaseMode.EXCLUSIVE.value
        if resource is None or ttl_s is None or process_id is None or wait_s is None:
            return None
        if data.get("take_over", False) is not False:
            return None  # a take-over (or a body the serializer refuses): the DRF view
        if not exclusive or _reserved(resource):
            return None
        return Prepared(
            "acquire",
            {
                "resource": resource,
                "kind": LeaseKind.RESOURCE.value,
                "process_id": process_id,
                "interval_s": ttl_s,
                "grace_s": 0.0,
                "mode": LeaseMode.EXCLUSIVE.value,
                **tree.tree_params(resource),
                **tree.lineage_locks(resource),
                "event_data": orjson.dumps(
                    {"ttl_s": ttl_s, "process_id": process_id, "mode": LeaseMode.EXCLUSIVE.value}
                ).decode(),
            },
        )

    # The grant's conflicting set is serialized as the service's is (`leases.tree.lock_tree`),
    # in the transaction the statement runs in.
    prelude = tree.lock_tree_sql("CAST(%(workspace_id)s AS text)")
    # A denied acquire may be granted a moment later (its holder let go), and one with wait_s
    # waits in line: the DRF view's service tries again, and its denial names the holder it met.
    miss_is_final = False

    def answer(self, row: tuple[Any, ...], prepared: Prepared) -> Answer:
        return 201, lease_json(engine.snapshot(_stamp_key(row, _LEASE_TIME)))


def _reserved(resource: str) -> bool:
    try:
        lease_services.refuse_reserved_for_acquire(resource)
    except GroundControlError:
        return True
    return False


class RenewAll(HotCall):
    """A process's leases renewed in one call. None renewed and none lost answers nothing here:
    the DRF view says so (or refuses the key); so does a body naming `held`, which the service
    explains tenure by tenure."""

    many = True

    def parse(self, data: dict[str, Any], **kwargs: Any) -> Prepared | None:
        process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
        if process_id is None or set(data) != {"process_id"}:
            return None
        return Prepared("renew_all", {"process_id": process_id})

    def answer(self, rows: Any, prepared: Prepared) -> Answer:
        first = rows[0]
        _stamp_key(first, _LEASE_TIME)
        renewed: list[engine.LeaseSnapshot] = []
        lost: list[engine.LeaseSnapshot] = []
        for row in sorted(rows, key=lambda row: row[_COLUMN["resource"]]):
            lease = engine.snapshot(row[: _LEASE_TIME + 1])
            (renewed if row[_LEASE_TIME + 1] else lost).append(lease)
        return 200, {
            "renewed": renewed_json(renewed, _pending(lease_handoffs_of=renewed)),
            # Explained as a renewal of it would be (the DRF view's `lease_renew_all` words).
            "not_renewed": [
                not_renewed_json(lease_services.lost_of(lease, lease.holder)) for lease in lost
            ],
        }


class Report(HotCall):
    def parse(self, data: dict[str, Any], *, attempt_id: int, **kwargs: Any) -> Prepared | None:
        fence, kind = as_fence(data.get("fence")), data.get("kind")
        # Without a process identity a report renews nothing: the DRF view records it.
        process_id = plain_text(data.get("process_id"), max_length=MAX_NAME)
        if fence is None or type(kind) is not str or kind not in _REPORT_KINDS:
            return None
        if process_id is None or not 0 < attempt_id < 2**63:
            return None
        lease_id = ATTEMPT_LEASES.get(attempt_id)
        params = {
            "attempt_id": attempt_id,
            "lease_id": lease_id,
            "fence": fence,
            "process_id": process_id,
        }
        if kind == _HEARTBEAT and len(data) == 3:  # the fleet's most frequent call: nothing else
            return Prepared("heartbeat", params)
        if not _COST_FIELDS.isdisjoint(data):
            # A costed report judges the lane's budgets (fleet/costs/budgets.py): the DRF view.
            return None
        message, percent, details = data.get("message"), data.get("percent"), data.get("details")
        if (
            (message is not None and plain_text(message, max_length=MAX_REASON) is None)
            or (percent is not None and plain_float(percent, minimum=0, maximum=100) is None)
            or (details is not None and type(details) is not dict)
            or report_services.details_refusal(details) is not None
        ):
            return None
        params |= report_services.report_params(
            attempt_id=attempt_id,
            fence=fence,
            kind=kind,
            process_id=process_id,
            message=message or "",
            percent=None if percent is None else float(percent),
            details=details,
            lease_id=lease_id,
        )
        if report_services.is_bare_heartbeat(kind, message or "", percent, details):
            return Prepared("heartbeat", params)
        return Prepared("report_percent" if percent is not None else "report", params)

    def missed(self, prepared: Prepared) -> None:
        # Whatever the reason, the statement is tried without the remembered lease next time.
        ATTEMPT_LEASES.pop(prepared.params["attempt_id"], None)

    def answer(self, row: tuple[Any, ...], prepared: Prepared) -> Answer:
        attempt_id, fence = prepared.params["attempt_id"], prepared.params["fence"]
        *answer, record_due, workspace_id, lease_id = _stamp_key(row, _REPORT_TIME)
        remember(ATTEMPT_LEASES, attempt_id, lease_id)
        recorded_at = None
        if record_due:
            at = answer[_REPORT_TIME]
            written = _bookkeeping(
                "the heartbeat's record",
                report_services.heartbeat_record,
                workspace_id=workspace_id,
                attempt_id=attempt_id,
                fence=fence,
                at=at,
                process_id=prepared.params["process_id"],
            )
            recorded_at = at if written else None
        attempt = report_row_json(
            answer,
            workspace_id=workspace_id,
            attempt_id=attempt_id,
            fence=fence,
            recorded_at=recorded_at,
        )
        requests = _bookkeeping(
            "reading the handoff requests",
            lease_handoffs.pending_of,
            workspace_id=workspace_id,
            lease_id=lease_id,
            fence=fence,
            count=answer[_REPORT_HANDOFFS],
        )
        return 200, {"renewed": True, "attempt": attempt, "handoff_requests": requests or []}


# --- The views ------------------------------------------------------------------------------------


def _plain(request: HttpRequest) -> bool:
    """A request the DRF view would read and answer as JSON without negotiating anything."""
    meta = request.META
    return (
        not meta.get("QUERY_STRING")
        and meta.get("HTTP_ACCEPT") in _PLAIN_ACCEPT
        and meta.get("CONTENT_TYPE") in _PLAIN_CONTENT_TYPES
        and "HTTP_IDEMPOTENCY_KEY" not in meta
    )


def _bearer(request: HttpRequest) -> tuple[str, str] | None:
    scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return keys.parse_token(raw.strip()) if scheme.lower() == "bearer" else None


def _json_body(request: HttpRequest) -> dict[str, Any] | None:
    """The body as a JSON object, or None (the DRF view reads it again from the same request)."""
    length = request.META.get("CONTENT_LENGTH") or ""
    if not length.isdigit() or int(length) > max_body_bytes():
        return None
    raw = request.body
    try:
        # orjson reads strict JSON in UTF-8 (no NaN, no lone surrogates) to the values the
        # standard parser reads, at a fraction of the cost; what it refuses goes to the DRF view.
        # It reads an integer beyond 64 bits as a float, though, so a body with such a long run
        # of digits (a report's details keep whatever they are given) is read by the standard one.
        data = json.loads(raw.decode()) if _LONG_DIGITS.search(raw) else orjson.loads(raw)
    except (ValueError, RecursionError):  # orjson's, json's own, a UnicodeDecodeError too
        return None
    # What the strict parser would refuse (too deep, a key twice) is the DRF view's to refuse.
    if type(data) is not dict or json_shape_refusal(data) or may_repeat_a_key(raw, data):
        return None
    return data


def _answer(request: HttpRequest, call: HotCall, kwargs: Any) -> HttpResponse | None:
    db = connections[DEFAULT_DB_ALIAS]
    if not ENABLED or not _plain(request):
        return None
    # A malformed key is refused before the body is read (the DRF view refuses it unread).
    token = _bearer(request)
    if token is None:
        return None
    data = _json_body(request)
    if data is None:
        return None
    try:
        prepared = call.parse(data, **kwargs)
    except Exception:  # noqa: BLE001 - nothing applied yet: the DRF view decides
        logger.warning("a hot call could not parse its body", exc_info=True)
        return None
    if prepared is None:
        return None
    prefix, secret = token
    secret_hash = keys.hash_secret(secret)
    try:
        rate_limit(rate_caller(prefix, secret_hash))
    except RateLimited as refused:
        request.META[RATE_COUNTED] = refused
        return None
    request.META[RATE_COUNTED] = True
    params = {"key_prefix": prefix, "key_secret_hash": secret_hash, **prepared.params}
    try:
        # Every statement names the caller's workspace as a value (docs/scale.md).
        params["workspace_id"] = key_workspace(db, prefix, secret_hash)
        if params["workspace_id"] is None:
            return None  # no such key: the DRF view refuses it
        row = run_statement(
            db, statement(prepared.name, now_sql()), params, prelude=call.prelude, many=call.many
        )
    except DatabaseError as error:
        if is_conflict(error):
            # Aborted for a deadlock or a serialization failure: rolled back, nothing applied.
            # The DRF view runs the call again through its service, which retries a conflict a
            # few times and then answers 503 busy (`apikit.retries`), never a 500.
            logger.info("a hot statement met a conflict; the DRF view runs the call", exc_info=True)
            return None
        if is_database_outage(error):
            # The database is out of reach (perhaps after applying the statement) or read-only:
            # answered 503 by the middleware (apikit.api), never tried again by the DRF view.
            raise
        # The statement itself was refused, so nothing was applied: the DRF view explains.
        logger.warning("a hot statement failed; the DRF view answers", exc_info=True)
        return None
    if row is None:
        KEY_WORKSPACES.pop(prefix, None)  # read again next time, whatever the reason
        call.missed(prepared)
        if call.miss_is_final:
            request.META[STATEMENT_MISSED] = MissedStatement(
                workspace_id=params["workspace_id"], lease_id=prepared.params.get("lease_id")
            )
        return None
    status, payload = call.answer(row, prepared)
    # orjson writes what DRF's JSONRenderer writes for these answers (compact, UTF-8, a UTC time
    # with Z), at a tenth of the cost; the tests compare the two.
    response = HttpResponse(orjson.dumps(payload, option=_UTC_Z), status=status, content_type=JSON)
    response["Allow"] = "POST, OPTIONS"
    return response


def serving(api_view: Any, call: HotCall) -> Callable[..., HttpResponse]:
    """The view for one hot endpoint: `call`'s statement, else `api_view` (a DRF APIView), which
    also stays the endpoint's view for everything else (other methods, the OpenAPI schema)."""
    full = api_view.as_view()

    @functools.wraps(full)  # keeps `cls` and `initkwargs`: the schema reads the DRF view
    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            with reads.primary():  # its statements are raw SQL on the primary already
                answered = _answer(request, call, kwargs)
            if answered is not None:
                return answered
        return full(request, *args, **kwargs)

    return csrf_exempt(view)


renew, acquire, report, renew_all = Renew(), Acquire(), Report(), RenewAll()
