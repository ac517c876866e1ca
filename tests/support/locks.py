"""Who waits on whose lock: a service without its conflict retry, and PostgreSQL's view of a
backend waiting on a lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection


def unretried(service: Callable[..., Any]) -> Callable[..., Any]:
    """The service under `@refusals_recorded` and `@retried`: a conflict raises."""
    return service.__wrapped__.__wrapped__  # type: ignore[attr-defined]


def backend_pid() -> int:
    connection.ensure_connection()
    return int(connection.connection.info.backend_pid)


def waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid]
        )
        row = cursor.fetchone()
    return bool(row and row[0])
