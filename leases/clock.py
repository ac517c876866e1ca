"""The one clock: the database's.

Every comparison with "now" happens in SQL (DESIGN rule 1), so web workers whose clocks disagree
still agree about every lease. This module renders PostgreSQL's "now" and lets tests travel in
time by shifting or freezing the database's clock as the engine sees it. Nothing outside tests
ever changes the offset.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import DateTimeField
from django.db.models.expressions import RawSQL

_lock = threading.Lock()
_offset_s: float = 0.0
_frozen_at: datetime | None = None


def now_sql() -> str:
    """SQL for the database's current time (as shifted or frozen by a test, if any)."""
    frozen, offset = _frozen_at, _offset_s
    if frozen is not None:
        return f"'{frozen.isoformat()}'::timestamptz"
    # clock_timestamp(): the time the row is actually evaluated. now() is the transaction's start
    # and statement_timestamp() the statement's arrival; a statement that waited (for a row lock,
    # or for a CPU) would judge "lost" and stamp its grant with a time from before the release it
    # waited for, so its tenure would appear to start before the last one ended.
    if offset:
        return f"(clock_timestamp() + interval '{offset!r} seconds')"
    return "clock_timestamp()"


def plus_seconds_sql(timestamp_sql: str, seconds_sql: str) -> str:
    """SQL for `timestamp + seconds`, where both are SQL expressions (columns or parameters)."""
    return f"({timestamp_sql} + ({seconds_sql}) * interval '1 second')"


def now_expression() -> RawSQL:
    """The database's "now" as an ORM expression, for filters and annotations."""
    return RawSQL(now_sql(), (), output_field=DateTimeField())


def parse_timestamp(value: object) -> datetime | None:
    """A timestamp as a raw cursor returns it (a datetime; text where a statement cast it)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def db_now() -> datetime:
    """Ask the database for the time (one query)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {now_sql()}", ())
        result = parse_timestamp(cursor.fetchone()[0])
    assert result is not None
    return result


# --- Time travel, for tests ---------------------------------------------------------------------


@contextlib.contextmanager
def travel(seconds: float) -> Iterator[None]:
    """Shift the database's clock by `seconds` for the engine, while the block runs."""
    global _offset_s
    with _lock:
        _offset_s += seconds
    try:
        yield
    finally:
        with _lock:
            _offset_s -= seconds


def freeze(at: datetime) -> None:
    """Stop the engine's clock at `at` (a test pins exact boundaries with this)."""
    global _frozen_at
    _frozen_at = at.astimezone(UTC)


def advance(seconds: float) -> datetime:
    """Move a frozen clock forward and return the new time."""
    global _frozen_at
    assert _frozen_at is not None, "freeze() the clock first"
    _frozen_at = _frozen_at + timedelta(seconds=seconds)
    return _frozen_at


def unfreeze() -> None:
    global _frozen_at, _offset_s
    _frozen_at = None
    _offset_s = 0.0
