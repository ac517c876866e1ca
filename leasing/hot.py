"""The hot calls (a resource renew or acquire, a renew-all, a report): one way through each.

A POST to a hot endpoint is answered by its view here (`HotCallView`), not by DRF's request
machinery: the view reads the key's token and the body as every API view does
(`hands.authentication`, `apikit.api.json_body`), validates the body with the endpoint's input
serializer (which also documents it), and runs the call's one statement, which checks the key and
makes the change together, prepared (`run_statement`). When the statement matches nothing, the
refusal is explained by one read of the key (its own refusal, if the key is the reason: revoked,
expired, another scope, another lane) and then by the service's reading of the lease or attempt
as it stands; the change is never tried again. A refusal before the statement (a body, a limit)
reads the key first too, so that a bad key is told so before a bad body is. A call without a
key (no Authorization header, one that cannot be a key, or a key no one has) is refused on its
headers, before a byte of its body is read, and counted against its address (`Caller.of`).

What a statement cannot decide is the service's, after the key is read: an acquire that was
denied (the caller may hold the name already, a lost tenure on its line may need its end
recorded, or it waits in line: `leases.services.lease_acquire`), a shared or take-over acquire,
a renew-all naming `held`, and a report with a cost (it judges the lane's budgets) or without
a process identity (it renews nothing).

Once the statement has matched, the call is done: what follows (stamping the key's last use,
the heartbeat's once-a-minute record, reading handoff requests) is bookkeeping whose failure is
logged and never answered as the call's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.http import HttpRequest, HttpResponse
from rest_framework import serializers

from apikit import reads
from apikit.api import json_answer, json_body, refusal_body, refusal_of
from apikit.concealing import conceal_answer
from apikit.context import call_context
from apikit.errors import GroundControlError, KeyInvalid
from apikit.inputs import valid_data
from apikit.ratelimit import rate_caller, rate_limit
from apikit.retries import retried
from fleet.api.inputs import AcquireIn, RenewAllIn, RenewIn, ReportIn
from fleet.api.presenters import (
    attempt_json,
    lease_json,
    not_renewed_json,
    pending_of_leases,
    renewed_json,
    report_row_json,
)
from fleet.attempts import reports as report_services
from hands import keys
from hands import services as hand_services
from hands.authentication import authenticate, require_scope
from hands.models import Hand, HandKey, Scope
from hands.selectors import concealer
from hands.views import HandAPIView
from leases import engine, handoffs, names, tree
from leases import services as lease_services
from leases.audit import event_insert_sql
from leases.clock import now_sql
from leases.models import EventKind, LeaseKind, LeaseMode
from leases.waiting import lease_acquire_waiting
from leasing.waits import wait_permit

logger = logging.getLogger(__name__)


# --- What the hot path remembers per process: facts that never change once true, so that its
# statements carry them as values instead of reading them again. Each statement checks what it
# is given (a wrong value matches nothing and writes nothing), and a call that matched nothing
# forgets what it used. ---------------------------------------------------------------------------

# attempt id -> its lease's id, as the reports' rows gave them: a report names its lease by this
# value instead of reading the attempt again for it (an attempt's lease never changes).
ATTEMPT_LEASES: dict[int, int] = {}
# (key prefix, its secret's hash) -> the workspace of the key's hand (a key never changes hand, a
# hand never changes workspace): every statement names the caller's workspace by it, so that it
# reaches one workspace's rows (docs/scale.md). Remembered by the secret too, so that a wrong
# secret never runs a statement (nor judges a body) before its key is refused. Whether the key
# may still be used is the statement's to say.
KEY_WORKSPACES: dict[tuple[str, str], int] = {}
# The same key -> its hand's name and the key's lane (neither ever changes), read with its
# workspace: who reads an answer that names other hands (`_concealed`).
KEY_READERS: dict[tuple[str, str], tuple[str, int | None]] = {}
MAX_REMEMBERED = 100_000

# The key's hand's workspace (and name, and the key's lane), by the key's prefix and its
# secret's hash.
KEY_WORKSPACE = (
    f"SELECT h.workspace_id, h.name, k.lane_id FROM {HandKey._meta.db_table} k "
    f"JOIN {Hand._meta.db_table} h ON h.id = k.hand_id "
    "WHERE k.prefix = %(key_prefix)s AND k.secret_hash = %(key_secret_hash)s"
)


def remember(memory: dict[Any, int], key: Any, value: int) -> None:
    if len(memory) >= MAX_REMEMBERED:
        memory.clear()
    memory[key] = value


def key_workspace(db: Any, prefix: str, secret_hash: str) -> int | None:
    """The workspace of the key `prefix` with the secret hashed as `secret_hash` (read once per
    process), or None if there is no such key."""
    known = KEY_WORKSPACES.get((prefix, secret_hash))
    if known is not None:
        return known
    with db.cursor() as cursor:
        cursor.execute(KEY_WORKSPACE, {"key_prefix": prefix, "key_secret_hash": secret_hash})
        row = cursor.fetchone()
    if row is None:
        return None
    remember(KEY_WORKSPACES, (prefix, secret_hash), row[0])
    if len(KEY_READERS) >= MAX_REMEMBERED:
        KEY_READERS.clear()
    KEY_READERS[prefix, secret_hash] = (row[1], row[2])
    return row[0]


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


def _renew_due_template() -> str:
    """A harness session's live leases, each renewed when it is due (`engine.RENEW_DUE`)."""
    return (
        f"WITH {_key_cte(Scope.LEASES)}, renewed AS ({engine.RENEW_DUE}), "
        f"kept AS ({engine.HELD_NOT_DUE}) "
        f"SELECT renewed.*, {_KEY_COLUMNS} FROM renewed, key "
        f"UNION ALL SELECT kept.*, {_KEY_COLUMNS} FROM kept, key"
    )


def renew_due(params: dict[str, Any], process_id: str) -> list[engine.LeaseSnapshot]:
    """The live leases of `process_id` held with the key `params` names (as `Caller.params`
    gives them, the key known to be good), those due renewed, in one prepared statement."""
    sql = statement("renew_due", now_sql())
    db = connections[DEFAULT_DB_ALIAS]
    rows = run_statement(db, sql, {**params, "process_id": process_id}, many=True) or []
    if rows:
        _stamp_key(rows[0], _LEASE_TIME)
    return [engine.snapshot(row[: _LEASE_TIME + 1]) for row in rows]


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
    if name == "renew_due":
        return engine.render(_renew_due_template(), **_KEY_CALLER)
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
    after the renewal was applied, so a failure shows none this time, never a refusal; the
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


# --- The caller ----------------------------------------------------------------------------------


@dataclass
class Caller:
    """Who calls: the key's token as sent (its prefix and its secret's hash, which the statement
    checks) and the scope the endpoint needs. `key()` reads the key when a refusal must be
    explained, once per call."""

    request: HttpRequest
    prefix: str
    secret_hash: str
    scope: Any
    _key: HandKey | None = field(default=None, repr=False)
    _refused: GroundControlError | None = field(default=None, repr=False)

    @classmethod
    def of(cls, request: HttpRequest, scope: Any) -> Caller:
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        token = keys.parse_token(raw.strip()) if scheme.lower() == "bearer" else None
        caller = cls(request, "", "", scope)
        if token is None:
            caller.key()  # no key, or a malformed one: refused (and counted) as everywhere
            raise KeyInvalid("the key is missing or malformed")
        caller.prefix, secret = token
        caller.secret_hash = keys.hash_secret(secret)
        if caller.params() is None:
            # A key no one has (an unknown prefix, a wrong secret) is refused on the headers,
            # before the body is read: a body that trickles in would hold this thread. The
            # key's workspace is read once per process, so a valid key pays nothing here.
            caller.key()  # refused, and counted against the address (unless minted meanwhile)
        return caller

    def key(self) -> HandKey:
        """The caller's key, usable and of the endpoint's scope: else its refusal is raised (read,
        and counted against the address when it is one, once per call)."""
        if self._refused is not None:
            raise self._refused
        if self._key is None:
            try:
                key = authenticate(self.request)
                require_scope(key, self.scope)
            except GroundControlError as refused:
                self._refused = refused
                raise
            self._key = key
        return self._key

    @property
    def hand(self) -> Hand:
        return self.key().hand

    def params(self) -> dict[str, Any] | None:
        """The statement's parameters naming the caller, or None when there is no such key (the
        caller's workspace is read once per process: `key_workspace`)."""
        workspace_id = key_workspace(connections[DEFAULT_DB_ALIAS], self.prefix, self.secret_hash)
        if workspace_id is None:
            return None
        return {
            "key_prefix": self.prefix,
            "key_secret_hash": self.secret_hash,
            "workspace_id": workspace_id,
        }

    def missed(self) -> None:
        """The statement matched nothing: the key is read again next time, whatever the reason."""
        KEY_WORKSPACES.pop((self.prefix, self.secret_hash), None)


def _run(name: str, caller: Caller, params: dict[str, Any], **options: Any) -> Any:
    """Statement `name` for `caller` with `params`: its row (rows, with `many`), or None when it
    matched nothing (or there is no such key).

    The statement names the caller's workspace as remembered (`KEY_WORKSPACES`), and checks it:
    a miss forgets it, and when the key's workspace read afresh is another (a memory gone wrong;
    a key never changes hand), the miss proved nothing and the statement runs in that one."""
    db = connections[DEFAULT_DB_ALIAS]
    named = caller.params()
    if named is None:
        return None
    sql = statement(name, now_sql())
    row = run_statement(db, sql, {**named, **params}, **options)
    if not row:
        caller.missed()
        fresh = caller.params()
        if fresh is None or fresh["workspace_id"] == named["workspace_id"]:
            return None
        row = run_statement(db, sql, {**fresh, **params}, **options)
        if not row:
            caller.missed()
            return None
    return row


# --- The calls ----------------------------------------------------------------------------------
# Each reads its validated body (`parse`, pure: a refusal there reads the key first) and runs
# (`run`): the statement, and what a miss needs to be explained, or what the service decides.

Answer = tuple[int, Any]


class HotCall:
    body: type[serializers.Serializer]  # the input serializer: it validates and documents

    def parse(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return data

    def run(self, caller: Caller, data: dict[str, Any]) -> Answer:
        raise NotImplementedError


class Renew(HotCall):
    body = RenewIn

    def parse(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        lease_services.validate_renewal(
            resource=data["resource"], fence=data["fence"], process_id=data["process_id"]
        )
        return data

    @retried
    def run(self, caller: Caller, data: dict[str, Any]) -> Answer:
        resource, fence, process_id = data["resource"], data["fence"], data["process_id"]
        row = _run(
            "renew",
            caller,
            {"node": names.node_of(resource), "fence": fence, "process_id": process_id},
        )
        if row is None:
            hand = caller.hand
            # Explained from the lease as it stands, never renewed again: a renewal that missed
            # never matches later (a tenure once lost, superseded or another process's stays so).
            raise lease_services.renewal_refusal(
                workspace_id=hand.workspace_id,
                resource=resource,
                holder=hand.name,
                fence=fence,
                process_id=process_id,
            )
        lease = engine.snapshot(_stamp_key(row, _LEASE_TIME))
        return 200, renewed_json([lease], _pending(lease_handoffs_of=[lease]))[0]


class Acquire(HotCall):
    body = AcquireIn

    def parse(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mode, ttl_s, take_over = lease_services.validate_acquire(
            resource=data["resource"],
            process_id=data["process_id"],
            mode=data["mode"],
            ttl_s=data["ttl_s"],
            take_over=data["take_over"],
        )
        return {**data, "mode": mode, "ttl_s": ttl_s, "take_over": take_over}

    # The grant's conflicting set is serialized as the service's is (`leases.tree.lock_tree`),
    # in the transaction the statement runs in.
    prelude = tree.lock_tree_sql("CAST(%(workspace_id)s AS text)")

    @retried
    def _granted(self, caller: Caller, data: dict[str, Any]) -> Any:
        resource, ttl_s, process_id = data["resource"], data["ttl_s"], data["process_id"]
        mode = LeaseMode.EXCLUSIVE.value
        return _run(
            "acquire",
            caller,
            {
                "resource": resource,
                "kind": LeaseKind.RESOURCE.value,
                "process_id": process_id,
                "interval_s": ttl_s,
                "grace_s": 0.0,
                "mode": mode,
                **tree.tree_params(resource),
                **tree.lineage_locks(resource),
                "event_data": orjson.dumps(
                    {"ttl_s": ttl_s, "process_id": process_id, "mode": mode}
                ).decode(),
            },
            prelude=self.prelude,
        )

    def run(self, caller: Caller, data: dict[str, Any]) -> Answer:
        return 201, lease_json(self.granted(caller, data))

    def granted(self, caller: Caller, data: dict[str, Any]) -> engine.LeaseSnapshot:
        """The tenure granted (or renewed: the caller's own), else the refusal raised."""
        # With a ticket the request has a place in line, which the statement does not know.
        missed = (
            data["mode"] == LeaseMode.EXCLUSIVE.value
            and not data["take_over"]
            and not data.get("ticket")
        )
        if missed:
            row = self._granted(caller, data)
            if row is not None:
                return engine.snapshot(_stamp_key(row, _LEASE_TIME))
        # Denied, shared or a take-over: the service decides, with the key as a condition of
        # any grant (`hands.services.key_guard`). A denied grant is explained from one read of
        # what stands in the way (`grant_missed`); the caller's own tenure of the name, a lost
        # tenure on its line or a way cleared meanwhile goes the service's way.
        key = caller.key()
        return lease_acquire_waiting(
            workspace_id=key.hand.workspace_id,
            resource=data["resource"],
            holder=key.hand.name,
            process_id=data["process_id"],
            ttl_s=data["ttl_s"],
            mode=data["mode"],
            wait_s=data["wait_s"],
            take_over=data["take_over"],
            grant_missed=missed,
            ticket=data.get("ticket"),
            guard=hand_services.key_guard(key),
            permit=functools.partial(
                wait_permit, key_id=key.pk, workspace_id=key.hand.workspace_id
            ),
        )


class RenewAll(HotCall):
    """A process's leases renewed, and those it has lost, in one statement; each tenure named in
    `held` that is in neither is explained by the service, from the leases as they stand."""

    body = RenewAllIn

    def parse(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        lease_services.validate_name(data["process_id"], field="process_id")
        held = data.get("held")
        if held is not None:
            data["held"] = lease_services.validate_held([dict(item) for item in held])
        return data

    @retried
    def _rows(self, caller: Caller, process_id: str) -> Any:
        return _run("renew_all", caller, {"process_id": process_id}, many=True)

    def renewed(
        self, caller: Caller, process_id: str
    ) -> tuple[list[engine.LeaseSnapshot], list[engine.LeaseSnapshot]]:
        """The process's live leases, renewed, and those it has lost, by one statement (nothing
        of either when the key may not renew: the caller's key says why)."""
        rows = self._rows(caller, process_id) or []
        if rows:
            _stamp_key(rows[0], _LEASE_TIME)
        renewed: list[engine.LeaseSnapshot] = []
        lost: list[engine.LeaseSnapshot] = []
        for row in rows:
            (renewed if row[_LEASE_TIME + 1] else lost).append(
                engine.snapshot(row[: _LEASE_TIME + 1])
            )
        return renewed, lost

    def run(self, caller: Caller, data: dict[str, Any]) -> Answer:
        process_id = data["process_id"]
        renewed, lost = self.renewed(caller, process_id)
        if renewed or lost:
            holder, workspace_id = (renewed or lost)[0].holder, (renewed or lost)[0].workspace_id
        else:
            hand = caller.hand  # none renewed and none lost: the key may be the reason
            holder, workspace_id = hand.name, hand.workspace_id
        done = lease_services.renewed_all(
            workspace_id=workspace_id,
            holder=holder,
            process_id=process_id,
            renewed=renewed,
            lost=lost,
            held=data.get("held") or [],
        )
        return 200, {
            "renewed": renewed_json(done.renewed, _pending(lease_handoffs_of=done.renewed)),
            "not_renewed": [not_renewed_json(item) for item in done.lost],
        }


class Report(HotCall):
    """A report that renews (the claim's process identity, no cost) is one statement; a costed
    one (it judges the lane's budgets) or one without a process identity is the service's."""

    body = ReportIn

    def parse(self, data: dict[str, Any], *, attempt_id: int, **kwargs: Any) -> dict[str, Any]:
        message = report_services.validate_report(
            kind=data["kind"],
            process_id=data.get("process_id"),
            message=data.get("message") or "",
            percent=data.get("percent"),
            details=data.get("details"),
            tokens_in=data.get("tokens_in"),
            tokens_out=data.get("tokens_out"),
            cost_usd=data.get("cost_usd"),
            checkpoint=data.get("checkpoint"),
        )
        return {**data, "message": message, "attempt_id": attempt_id}

    @retried
    def _renewed(self, caller: Caller, data: dict[str, Any]) -> Any:
        attempt_id, fence = data["attempt_id"], data["fence"]
        message, percent, details, checkpoint = (
            data.get("message") or "",
            data.get("percent"),
            data.get("details"),
            data.get("checkpoint"),
        )
        params = report_services.report_params(
            attempt_id=attempt_id,
            fence=fence,
            kind=data["kind"],
            process_id=data["process_id"],
            message=message,
            percent=percent,
            details=details,
            lease_id=ATTEMPT_LEASES.get(attempt_id),
            checkpoint=checkpoint,
        )
        if report_services.is_bare_heartbeat(data["kind"], message, percent, details, checkpoint):
            name = "heartbeat"
        else:
            name = "report_percent" if percent is not None else "report"
        row = _run(name, caller, params)
        if row is None:
            # Whatever the reason, the statement is tried without the remembered lease next time.
            ATTEMPT_LEASES.pop(attempt_id, None)
        return row, params

    def run(self, caller: Caller, data: dict[str, Any]) -> Answer:
        costed = any(data.get(name) for name in ("tokens_in", "tokens_out", "cost_usd"))
        # An attempt id out of range matches no attempt: the service says so.
        renewing = data.get("process_id") is not None and not costed
        renewing = renewing and 0 < data["attempt_id"] < 2**63
        missed_lease_id = None
        if renewing:
            row, params = self._renewed(caller, data)
            if row is not None:
                return 200, self._answer(row, params)
            missed_lease_id = params["lease_id"]
        key = caller.key()
        renewed, view = report_services.attempt_report(
            hand=key.hand,
            attempt_id=data["attempt_id"],
            fence=data["fence"],
            kind=data["kind"],
            process_id=data.get("process_id"),
            message=data.get("message") or "",
            percent=data.get("percent"),
            details=data.get("details"),
            lane_id=key.lane_id,
            tokens_in=data.get("tokens_in"),
            tokens_out=data.get("tokens_out"),
            cost_usd=data.get("cost_usd"),
            checkpoint=data.get("checkpoint"),
            # The statement ran (with the lease it remembered, if any) and matched nothing.
            statement_missed=renewing,
            missed_lease_id=missed_lease_id,
        )
        return 200, {
            "renewed": renewed,
            "attempt": attempt_json(view),
            "handoff_requests": handoffs.pending_of(
                workspace_id=view.lease.workspace_id,
                lease_id=view.lease.id,
                fence=view.attempt.fence,
                count=view.lease.handoff_open if view.lease.fence == view.attempt.fence else 0,
            ),
        }

    def _answer(self, row: tuple[Any, ...], params: dict[str, Any]) -> dict[str, Any]:
        attempt_id, fence = params["attempt_id"], params["fence"]
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
                process_id=params["process_id"],
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
            handoffs.pending_of,
            workspace_id=workspace_id,
            lease_id=lease_id,
            fence=fence,
            count=answer[_REPORT_HANDOFFS],
        )
        return {"renewed": True, "attempt": attempt, "handoff_requests": requests or []}


# --- The views ------------------------------------------------------------------------------------


class HotCallView(HandAPIView):
    """A hot endpoint: its POST is `call` (one way, above), answered without DRF's request
    machinery; any other method, and the OpenAPI schema, are the DRF view's. A subclass names its
    `call` and documents its `post`, which is `serve`."""

    call: HotCall

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.method != "POST":
            return super().dispatch(request, *args, **kwargs)
        with reads.primary():  # its statements are raw SQL on the primary already
            try:
                return self.post(request, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every error gets the API's one answer
                error, headers = refusal_of(exc, request)
                body = conceal_answer(refusal_body(error, request))
                response = json_answer(body, status=error.http_status)
                for name, value in headers.items():
                    response[name] = value
                response["Allow"] = ", ".join(self.allowed_methods)
                return response

    def serve(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        call = self.call
        caller = Caller.of(request, self.required_scope)
        try:
            rate_limit(rate_caller(caller.prefix, caller.secret_hash))
            data = call.parse(valid_data(call.body, json_body(request)), **kwargs)
        except Exception:
            caller.key()  # the key's own refusal comes first, and names the caller
            raise
        try:
            status, payload = call.run(caller, data)
        except Exception:
            caller.key()  # whatever failed, a refusal names the caller (or is the key's own)
            raise
        response = json_answer(_concealed(caller, payload), status=status)
        response["Allow"] = ", ".join(self.allowed_methods)
        return response


# The parts of a hot answer that may name another hand than the caller's (its renewal answers
# name only the caller's own tenures otherwise).
_OTHERS = ("handoff_requests", "not_renewed")


def _concealed(caller: Caller, payload: Any) -> Any:
    """The answer as its caller may read it (`apikit.concealing`): when it names other hands
    (who asks for a tenure, who holds a lost one now), by the key's lane as remembered with its
    workspace (`KEY_READERS`), else as the key read afresh says; if it cannot be, none is
    named."""
    if not _names_others(payload):
        return payload
    known = (caller.prefix, caller.secret_hash)
    reader, workspace_id = KEY_READERS.get(known), KEY_WORKSPACES.get(known)
    try:
        if reader is not None and workspace_id is not None:
            own, lane_id = reader
            conceal = concealer(workspace_id=workspace_id, lane_id=lane_id, own=own)
            with call_context(conceal=conceal):
                return conceal_answer(payload)
        caller.key()  # describes the call, its context's `conceal` with it
        return conceal_answer(payload)
    except Exception:  # noqa: BLE001 - the call is done: name nobody rather than fail it
        logger.exception("telling whose names an answer may carry")
        return conceal_answer(payload, everyone=True)


def _names_others(payload: Any) -> bool:
    if isinstance(payload, dict):
        return any(
            (field in _OTHERS and bool(value)) or _names_others(value)
            for field, value in payload.items()
        )
    if isinstance(payload, list):
        return any(_names_others(item) for item in payload)
    return False


renew, acquire, report, renew_all = Renew(), Acquire(), Report(), RenewAll()
