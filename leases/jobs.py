"""What every periodic job shares, whatever app it belongs to: its result, its batch limit and
the SQL fragments its statements are built from, rendered for the database in use. The jobs are
`fleet.jobs` (the sweep, key revocation), `webhooks.services` (delivery) and `ops.jobs` (their
bookkeeping, retention and the reads for /metrics)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db import connection

SYSTEM_ACTOR = "system"
# A job stops after this many batches and leaves the rest to its next run, so one run cannot
# hold a worker forever after an outage.
MAX_BATCHES = 1000


@dataclass
class JobResult:
    """What a run did, for its JobRun row, the task's return value and the logs."""

    processed: int = 0
    failed: int = 0
    lag_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def skip_locked() -> str:
    """Concurrent jobs split the rows instead of queueing on them."""
    return " FOR UPDATE SKIP LOCKED"


def seconds_param(name: str) -> str:
    """A float parameter as SQL, typed so `timestamp + seconds` resolves."""
    return f"CAST(%({name})s AS double precision)"
