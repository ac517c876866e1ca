"""The append-only record: events (every transition) and refusals (every refused call).

Events are written by the service that made the transition, inside its transaction. Refusals are
written by `refusals_recorded` around each service, after the service's own transaction has rolled
back, so a refused call leaves exactly one row behind and nothing else; the API's refusals (keys,
scopes, limits, input) arrive by `apikit.context.refused`. The API sets the call context (key
prefix, method, path, request id) once per request; services outside HTTP (the dashboard,
commands) leave it empty.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.db import DatabaseError, transaction

from apikit.context import current_call, refused
from apikit.errors import DependencyUnavailable, GroundControlError
from leases.models import Event, Refusal

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


# Events, written once: every transition's event is made by `event` (and saved by `record_event`
# or, many at once, `record_events`) in the transaction of its transition; a statement that
# writes its own event (the hot acquire) inserts exactly these columns (`EVENT_COLUMNS`), and
# `tests/api/test_hot_path.py` compares the two rows.
EVENT_COLUMNS = ("workspace_id", "kind", "at", "actor", "hand", "resource", "fence", "data")
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
) -> Event:
    """An event, not yet saved."""
    return Event(
        workspace_id=workspace_id,
        kind=kind,
        at=at,
        actor=actor,
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
    """Write one refusal row for `error`, once; never let the record itself fail the call."""
    if error.recorded or isinstance(error, DependencyUnavailable):
        return
    call = current_call()
    try:
        with transaction.atomic():
            Refusal.objects.create(
                workspace_id=workspace_id if workspace_id is not None else call.workspace_id,
                hand=(hand or call.hand)[:200],
                key_prefix=call.key_prefix,
                method=call.method,
                path=call.path[:1024],
                code=error.code,
                message=error.message[:2000],
                request_id=call.request_id,
                details=_jsonable(error.fields),
            )
    except DatabaseError:
        logger.exception("could not record refusal %s", error.code)
    error.recorded = True


def _record_answered_refusal(sender: Any, *, error: GroundControlError, **_: Any) -> None:
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
