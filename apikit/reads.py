"""Reads that may come from a streaming replica, and only those that opt in.

A decision (acquire, renew, release, claim, report, finish, break, a fence or key check) must
see the primary's rows: a replica a second behind would grant a lease another hand already
holds, or accept a key revoked a second ago. So the router sends nothing to the replica by
default. A page or list endpoint that only shows rows opts in with `replica_reads()`, and only
then, and only while the replica is within `GC_REPLICA_MAX_LAG_S` of the primary, do its ORM
reads go to the `replica` alias (raw SQL on `connection` stays on the primary; so does every
read inside a transaction, which is how a decision reads). The context says how fresh the
data it served is, so the page can show it.

A client decides on some reads too: `gctl git`'s pre-commit asks which leases cover a path, a
session's end asks which leases are its own to release. Such a read is a decision however it
is sent (`is_decision`: it asks `covering`, or carries `X-GC-Decision`), and a list endpoint
answers it from the primary, saying so (`X-GC-Read-From: primary`); the client refuses a
decision's answer that says `replica`.

The replica's lag is measured on the replica, in one statement (`LAG_SQL`):

1. a server that is not in recovery is no replica (a promoted one diverges from the primary):
   unusable;
2. no WAL receiver running means it is cut off from the primary and its data ages unseen:
   unusable;
3. every byte of WAL received is replayed: caught up, age 0 (this is why an idle primary does
   not make the replica look stale, as `now() - pg_last_xact_replay_timestamp()` alone would);
4. else the age is `clock_timestamp() - pg_last_xact_replay_timestamp()`: the rows are at least
   as new as the last commit replayed, so that is an upper bound on how old they are.

The check is cached per process for `CHECK_S` (its answer is shown in whole seconds), and a
replica found unusable or unreachable is not asked again for `GC_REPLICA_RETRY_S`, so a replica
that is down costs one connect timeout per interval, not one per page.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from drf_spectacular.utils import OpenApiParameter

logger = logging.getLogger(__name__)

REPLICA = "replica"
# A connection that bypasses the pooler (`DATABASE_DIRECT_URL`): LISTEN and session advisory
# locks need one server session for their whole length, which a transaction pooler does not give.
DIRECT = "direct"
CHECK_S = 1.0

LAG_SQL = (
    "SELECT CASE "
    "WHEN NOT pg_is_in_recovery() THEN NULL "
    "WHEN NOT EXISTS (SELECT FROM pg_stat_wal_receiver) THEN NULL "
    "WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
    "ELSE EXTRACT(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8 END"
)

# The alias this context's ORM reads go to; None: the primary.
_reading: ContextVar[str | None] = ContextVar("gc_replica_reading", default=None)


@dataclass(frozen=True)
class Freshness:
    """Where a read-only view's rows came from, and how old they may be (seconds, an upper
    bound; 0 for the primary or a caught-up replica). `replica_lag_s` is the replica's lag when
    it was measured and found over the bound (the view then read the primary)."""

    source: str
    age_s: float
    replica_lag_s: float | None = None

    @property
    def live(self) -> bool:
        return self.age_s < 1

    @property
    def label(self) -> str:
        return "live" if self.live else f"data as of {int(self.age_s)} s ago"


PRIMARY = Freshness(source="primary", age_s=0.0)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def direct_alias() -> str:
    """The alias for a session-long feature (LISTEN, a session advisory lock): the direct
    connection when there is one, else the default."""
    return DIRECT if DIRECT in settings.DATABASES else DEFAULT_DB_ALIAS


def replica_lag_s() -> float | None:
    """The replica's lag as `LAG_SQL` measures it, or None when it is unusable or unreachable."""
    db = connections[REPLICA]
    try:
        with db.cursor() as cursor:
            cursor.execute(LAG_SQL)
            (lag,) = cursor.fetchone()
    except DatabaseError:
        logger.warning("the read replica is unreachable; reading the primary", exc_info=True)
        try:
            db.close()
        except DatabaseError:
            pass
        return None
    return None if lag is None else max(0.0, float(lag))


class _Checked:
    """The last check's answer and until when it stands (per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0
        self._at = 0.0
        self._lag: float | None = None

    def lag(self) -> float | None:
        """The lag, measured at most `CHECK_S` ago; a lag measured then has grown since (the
        rows have not moved), a caught-up replica is taken as still caught up."""
        now = time.monotonic()
        with self._lock:
            if now < self._until:
                lag, at = self._lag, self._at
                return lag + (now - at) if lag else lag
        lag = replica_lag_s()
        hold = CHECK_S if lag is not None else float(settings.GC_REPLICA_RETRY_S)
        with self._lock:
            self._at = time.monotonic()
            self._lag, self._until = lag, self._at + hold
        return lag

    def forget(self) -> None:
        with self._lock:
            self._until = 0.0


checked = _Checked()


def freshness() -> Freshness:
    """Where a read-only view would read now: the replica while it is usable and within the
    bound, else the primary."""
    if not replica_configured():
        return PRIMARY
    lag = checked.lag()
    if lag is None:
        return PRIMARY
    if lag > float(settings.GC_REPLICA_MAX_LAG_S):
        return Freshness(source="primary", age_s=0.0, replica_lag_s=lag)
    return Freshness(source="replica", age_s=lag)


@contextmanager
def replica_reads() -> Iterator[Freshness]:
    """The ORM reads made inside go to the replica when it is fresh enough (never inside a
    transaction); yields where they go and how old their rows may be."""
    fresh = freshness()
    token = _reading.set(REPLICA if fresh.source == "replica" else None)
    try:
        yield fresh
    finally:
        _reading.reset(token)


@contextmanager
def primary() -> Iterator[None]:
    """Every read inside goes to the primary, even inside `replica_reads()`: the API's views
    and the pages' actions run in it, so a decision made anywhere below them reads the primary
    whatever context it was called from."""
    token = _reading.set(None)
    try:
        yield
    finally:
        _reading.reset(token)


def reading_from() -> str:
    """The alias an ORM read made here would use (for tests and the pages' notice)."""
    alias = _reading.get()
    if alias is None or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return alias


class ReplicaRouter:
    """Reads go to the replica only inside `replica_reads()` and outside any transaction;
    everything else, every write, and every migration is the primary's. The answer is always
    an alias, never None: Django would otherwise follow an instance's own database, and an
    object read from the replica would pull its relations from there after the context ended."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str:
        return reading_from()

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def is_decision(request: Any) -> bool:
    """Whether a client will decide on this request's answer (whether a commit, a push or a
    write may go ahead; which leases are a session's own to release): the one rule for which
    reads a replica never answers. A decision is marked by the client (`X-GC-Decision`, any
    value), or asks what only a decision asks (`DECISION_PARAMS`: which leases cover a name).

    Only a `replica_list` endpoint can read the replica at all, and it asks this first; every
    other call (acquire, check, fences/verify, the hot statements) reads the primary in
    `primary()` whatever it carries."""
    return DECISION_HEADER in request.headers or any(
        name in request.GET for name in DECISION_PARAMS
    )


def replica_list(handler: Any) -> Any:
    """A list endpoint's GET handler that may read the replica (after its key was checked on the
    primary, in `initial`; every API view runs in `primary()`, and this is the one way out of
    it), unless the request is a decision (`is_decision`): its answer says where its rows came
    from (`X-GC-Read-From`) and how old they may be (`X-GC-Data-Age-S`, whole seconds, an upper
    bound)."""

    @functools.wraps(handler)
    def handle(view: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if is_decision(request):
            fresh = PRIMARY  # the view's own `primary()` stands
            response = handler(view, request, *args, **kwargs)
        else:
            with replica_reads() as fresh:
                response = handler(view, request, *args, **kwargs)
        response[READ_FROM_HEADER] = fresh.source
        response[DATA_AGE_HEADER] = str(int(fresh.age_s))
        return response

    return handle


READ_FROM_HEADER = "X-GC-Read-From"
DATA_AGE_HEADER = "X-GC-Data-Age-S"
# The request header a client marks a decision with, and the query parameters whose answer only
# a decision asks for (`is_decision`).
DECISION_HEADER = "X-GC-Decision"
DECISION_PARAMS = ("covering",)
# The answer's headers, and the decision's request header, for the schema of each
# `replica_list` endpoint.
REPLICA_HEADERS = [
    OpenApiParameter(
        DECISION_HEADER,
        str,
        OpenApiParameter.HEADER,
        required=False,
        description="Present (any value): the caller decides on this answer, so the primary "
        "answers it, never a replica (`X-GC-Read-From: primary`). A `covering` read of "
        "`/leases` is always one.",
    ),
    OpenApiParameter(
        READ_FROM_HEADER,
        str,
        OpenApiParameter.HEADER,
        response=[200],
        enum=["primary", "replica"],
        description="Where the rows came from: the primary, or a replica within its lag bound.",
    ),
    OpenApiParameter(
        DATA_AGE_HEADER,
        int,
        OpenApiParameter.HEADER,
        response=[200],
        description="How old the rows may be, in whole seconds (an upper bound; 0 from the "
        "primary or a caught-up replica).",
    ),
]
