"""The append-only record: events (every transition) and refusals (every refused call).

Events are written by the service that made the transition, inside its transaction. Refusals are
written by `refusals_recorded` around each service, after the service's own transaction has rolled
back, so a refused call leaves exactly one row behind and nothing else; the API's refusals (keys,
scopes, limits, input) arrive by `apikit.context.refused`. The API sets the call context (key
prefix, method, path, request id, client address) once per request; services outside HTTP (the
dashboard, commands) leave it empty.

A refusal answered for a call that reached no workspace (no key, a malformed, unknown or wrong
one, an unknown path, a NUL in the path, and the 429s of the limit on such calls) names nobody a
supervisor could be shown, and anyone can send such calls as fast as they like: it is counted
instead (`record_address_refusal`, one `AddressRefusal` row per client address, code and minute),
so a flood grows a number, not the table. A refusal of a call with a key and a workspace keeps
its own row while the key has made fewer than `KEPT_PER_KEY_MINUTE` refusals that minute; past
that it is counted (`key_tally`, one `KeyTally` row per key, kind and minute), and so are the
fences a key asks about (`leases.verification.fences_verify`): no key can write more than that
many rows of either a minute, however fast it calls.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, connection, transaction

from apikit.context import CallContext, current_call, refused
from apikit.errors import DependencyUnavailable, GroundControlError
from leases.clock import now_sql
from leases.models import AddressRefusal, Event, KeyRecord, KeyTally, Refusal

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


# Events, written once: every transition's event is made by `event` (and saved by `record_event`
# or, many at once, `record_events`) in the transaction of its transition; a statement that
# writes its own event (the hot acquire) inserts exactly these columns (`EVENT_COLUMNS`), and
# `tests/hot_calls/test_hot_calls.py` compares the two rows.
EVENT_COLUMNS = (
    "workspace_id",
    "kind",
    "at",
    "actor",
    "hand",
    "resource",
    "fence",
    "data",
    "actor_key",
)
# And the attempt an event belongs to, which a statement recording attempts' transitions (the
# sweep's `late`, `stalled` and `lost`) writes too; `event_select_sql` fills these in this order.
ATTEMPT_EVENT_COLUMNS = (*EVENT_COLUMNS, "attempt_id")
# What `event` writes for a field it is not given, as SQL.
_EVENT_DEFAULTS_SQL = {
    "actor": "''",
    "hand": "''",
    "resource": "''",
    "fence": "NULL",
    "data": "CAST('{}' AS jsonb)",
    "actor_key": "''",
    "attempt_id": "NULL",
}


def event(
    *,
    workspace_id: int,
    kind: str,
    at: datetime,
    actor: str = "",
    hand: str = "",
    attempt_id: int | None = None,
    resource: str = "",
    fence: int | None = None,
    data: dict[str, Any] | None = None,
    actor_key: str | None = None,
) -> Event:
    """An event, not yet saved. `actor_key`: the prefix of the key that acted, by default the
    call's (`apikit.context`: '' for a person in the dashboard or admin, or a job)."""
    return Event(
        workspace_id=workspace_id,
        kind=kind,
        at=at,
        actor=actor,
        actor_key=(current_call().key_prefix if actor_key is None else actor_key)[:32],
        hand=hand,
        attempt_id=attempt_id,
        resource=resource,
        fence=fence,
        data=data or {},
    )


def record_event(**fields: Any) -> Event:
    made = event(**fields)
    made.save(force_insert=True)
    return made


def record_events(events: list[Event]) -> None:
    Event.objects.bulk_create(events)


def event_payload(event: Event) -> dict[str, Any]:
    """The event as the API lists it; fields that do not apply are null."""
    return {
        "id": event.pk,
        "kind": event.kind,
        "at": event.at.isoformat(),
        "workspace": event.workspace_id,
        "actor": event.actor or None,
        "actor_key": event.actor_key or None,
        "hand": event.hand or None,
        "attempt": event.attempt_id,
        "resource": event.resource or None,
        "fence": event.fence,
        "data": event.data,
    }


def event_insert_sql(select_sql: str, columns: tuple[str, ...] = EVENT_COLUMNS) -> str:
    """`INSERT INTO event (EVENT_COLUMNS) <select_sql>`, for a statement that writes its own
    (`ATTEMPT_EVENT_COLUMNS` for one whose rows come from `event_select_sql`)."""
    if columns not in (EVENT_COLUMNS, ATTEMPT_EVENT_COLUMNS):
        raise ValueError(columns)
    return f"INSERT INTO {Event._meta.db_table} ({', '.join(columns)}) {select_sql}"


def event_select_sql(*, workspace_id: str, kind: str, at: str, **fields: str) -> str:
    """`event`'s fields as SQL expressions, in the order of `ATTEMPT_EVENT_COLUMNS`: a select
    list for `event_insert_sql(..., ATTEMPT_EVENT_COLUMNS)`. A field not given is `event`'s
    default (an empty string, NULL, an empty object)."""
    unknown = set(fields) - set(_EVENT_DEFAULTS_SQL)
    if unknown:
        raise TypeError(f"not an event column: {', '.join(sorted(unknown))}")
    given = {"workspace_id": workspace_id, "kind": kind, "at": at, **fields}
    return ", ".join(
        given.get(column, _EVENT_DEFAULTS_SQL.get(column, "")) for column in ATTEMPT_EVENT_COLUMNS
    )


def record_refusal(
    error: GroundControlError, *, workspace_id: int | None = None, hand: str = ""
) -> None:
    """Record `error` once: a row of its own, or, past its key's kept ones this minute, a count
    in the key's tally; never let the record itself fail the call."""
    if error.recorded or isinstance(error, DependencyUnavailable):
        return
    call = current_call()
    workspace_id = workspace_id if workspace_id is not None else call.workspace_id
    # The calling key's hand when there is one: the hand a service acted on (a key minted for
    # another hand, say) is not who was refused.
    hand = (call.hand or hand)[:200]
    try:
        with transaction.atomic():
            # A key's refusals are tallied, and those past the minute's kept ones only counted.
            if (
                workspace_id is None
                or not call.key_prefix
                or key_tally(
                    workspace_id=workspace_id,
                    key_prefix=call.key_prefix,
                    hand=hand,
                    record=KeyRecord.REFUSAL,
                    labels=[error.code],
                )
            ):
                Refusal.objects.create(
                    workspace_id=workspace_id,
                    hand=hand,
                    key_prefix=call.key_prefix,
                    method=call.method[:10],
                    path=_printable(call.path)[:1024],
                    code=error.code,
                    message=error.message[:2000],
                    request_id=call.request_id,
                    details=_jsonable(error.fields),
                )
    except DatabaseError:
        logger.exception("could not record refusal %s", error.code)
    error.recorded = True


# How many of one key's records of a kind (its refusals; the fences it asks about) keep rows of
# their own each minute; the rest are counted in the key's tally (`KeyTally`). The limits table
# publishes it (groundcontrol/limits.py, `x-limits`).
KEPT_PER_KEY_MINUTE = 100

# The tally's one statement: insert the (workspace, key, kind, minute) row or add the call's
# records to it, on the database's clock, read once (`stamp`). ON CONFLICT takes the row lock for
# the update, so concurrent calls of one key are counted one after another, each against the
# count the previous one left: the records numbered past the limit (`WITH ORDINALITY`, from the
# old count) go to `past_limit` by label, and the new count comes back, which says how many of
# this call's records are within it. The minute is in UTC whatever the session's time zone.
_PAST_LIMIT = (
    "SELECT label, 1 AS n FROM unnest(CAST(%(labels)s AS text[])) WITH ORDINALITY AS l(label, i) "
    "WHERE i > %(kept)s - {before}"
)
_TALLY_UPSERT = """
INSERT INTO {table} AS tally ({columns})
SELECT %(workspace_id)s, %(key_prefix)s, %(record)s, date_trunc('minute', stamp.at, 'UTC'),
       cardinality(CAST(%(labels)s AS text[])),
       (SELECT COALESCE(jsonb_object_agg(label, n), CAST('{{}}' AS jsonb))
        FROM (SELECT label, COUNT(*) AS n FROM ({past_new}) AS past GROUP BY label) AS labelled),
       %(hand)s, stamp.at, stamp.at
FROM (SELECT {now} AS at) stamp
ON CONFLICT (workspace_id, key_prefix, record, minute) DO UPDATE SET
    {count} = tally.{count} + EXCLUDED.{count},
    past_limit = (
        SELECT COALESCE(jsonb_object_agg(label, n), CAST('{{}}' AS jsonb))
        FROM (SELECT label, SUM(n) AS n FROM (
            SELECT key AS label, CAST(value AS bigint) AS n FROM jsonb_each_text(tally.past_limit)
            UNION ALL {past_old}
        ) AS parts GROUP BY label) AS labelled
    ),
    last_at = GREATEST(tally.last_at, EXCLUDED.last_at)
RETURNING tally.{count}
"""
_TALLY_COLUMNS = (
    "workspace_id",
    "key_prefix",
    "record",
    "minute",
    "count",
    "past_limit",
    "hand",
    "first_at",
    "last_at",
)


def key_tally_sql() -> str:
    """The tally's upsert, with the engine's clock (a frozen test clock is in it)."""
    quote = connection.ops.quote_name
    count = quote("count")
    return _TALLY_UPSERT.format(
        table=quote(KeyTally._meta.db_table),
        columns=", ".join(quote(column) for column in _TALLY_COLUMNS),
        count=count,
        now=now_sql(),
        past_new=_PAST_LIMIT.format(before="0"),
        past_old=_PAST_LIMIT.format(before=f"tally.{count}"),
    )


def key_tally(
    *, workspace_id: int, key_prefix: str, hand: str, record: KeyRecord, labels: Sequence[str]
) -> int:
    """Count a call's records of `record` (each by its label: a refusal's code, a fence's
    status, in the call's order) in the key's tally for this minute, in one statement; how many
    of them, from the first, keep rows of their own. A key keeps at most `KEPT_PER_KEY_MINUTE`
    a minute of each kind, across every web process. Run it in the transaction that writes
    those rows: the tally's row lock holds the next call of the key until they are written."""
    if not labels:
        return 0
    kept = KEPT_PER_KEY_MINUTE
    params = {
        "workspace_id": workspace_id,
        "key_prefix": key_prefix[:32],
        "record": str(record),
        "labels": [label[:64] for label in labels],
        "kept": kept,
        "hand": hand[:200],
    }
    with connection.cursor() as cursor:
        cursor.execute(key_tally_sql(), params)
        (count,) = cursor.fetchone()
    before = count - len(labels)
    return max(0, min(len(labels), kept - before))


# The count's one statement: insert the (address, code, minute) row or add one to its count, on
# the database's clock, read once (`stamp`). ON CONFLICT takes the row lock for the update, so
# concurrent calls never lose one another's count. The minute is in UTC whatever the session's
# time zone: the same row everywhere.
_ADDRESS_UPSERT = """
INSERT INTO {table} ({columns})
SELECT %(address)s, %(code)s, date_trunc('minute', stamp.at, 'UTC'), 1, stamp.at, stamp.at,
       %(method)s, %(path)s, %(key_prefix)s
FROM (SELECT {now} AS at) stamp
ON CONFLICT (address, code, minute) DO UPDATE SET
    {count} = {table}.{count} + 1,
    last_at = GREATEST({table}.last_at, EXCLUDED.last_at)
"""
_ADDRESS_COLUMNS = (
    "address",
    "code",
    "minute",
    "count",
    "first_at",
    "last_at",
    "method",
    "path",
    "key_prefix",
)


def address_refusal_sql() -> str:
    """The upsert, with the engine's clock (a frozen test clock is in it)."""
    quote = connection.ops.quote_name
    return _ADDRESS_UPSERT.format(
        table=quote(AddressRefusal._meta.db_table),
        columns=", ".join(quote(column) for column in _ADDRESS_COLUMNS),
        count=quote("count"),
        now=now_sql(),
    )


def record_address_refusal(error: GroundControlError, call: CallContext | None = None) -> None:
    """Count `error` for the call's client address (one statement), once; never let the record
    itself fail the call."""
    if error.recorded or isinstance(error, DependencyUnavailable):
        return
    call = call or current_call()
    params = {
        "address": call.address[:64],
        "code": error.code[:64],
        "method": call.method[:10],
        "path": _printable(call.path)[:200],
        "key_prefix": call.key_prefix[:32],
    }
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(address_refusal_sql(), params)
    except DatabaseError:
        logger.exception("could not count refusal %s", error.code)
    error.recorded = True


def _printable(path: str) -> str:
    # PostgreSQL's text holds no NUL, and a path that carries one is refused for it: keep a mark.
    return path.replace("\x00", "\ufffd")


def _record_answered_refusal(sender: Any, *, error: GroundControlError, **_: Any) -> None:
    call = current_call()
    if call.workspace_id is None and call.address:
        record_address_refusal(error, call)
    else:
        record_refusal(error)


refused.connect(_record_answered_refusal, dispatch_uid="leases.audit.record_refusal")


def _jsonable(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in fields.items():
        out[name] = (
            value if isinstance(value, str | int | float | bool | list | dict) else str(value)
        )
    return out


def refusals_recorded(func: Callable[P, R]) -> Callable[P, R]:
    """Record a refusal for every domain error the service raises.

    The workspace and hand come from the call's keyword arguments when the service names them
    (`workspace_id`, `holder`, or a `hand` object), else from the call context.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except GroundControlError as error:
            workspace_id, hand = _who(kwargs)
            record_refusal(error, workspace_id=workspace_id, hand=hand)
            raise

    return wrapper


def _who(kwargs: dict[str, Any]) -> tuple[int | None, str]:
    hand_obj = kwargs.get("hand")
    if hand_obj is not None and hasattr(hand_obj, "workspace_id"):
        return hand_obj.workspace_id, hand_obj.name
    workspace_id = kwargs.get("workspace_id")
    holder = kwargs.get("holder") or ""
    return (workspace_id if isinstance(workspace_id, int) else None), str(holder)
