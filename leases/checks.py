"""System checks of the database Ground Control runs on (`manage.py check --database default`;
`migrate` runs them too)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register
from django.db import DatabaseError, connections

AUTOVACUUM_OFF = "leases.W001"


@register(Tags.database)
def autovacuum_runs(databases: list[str] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """The hot statements are prepared and planned from the tables' statistics, which autovacuum
    keeps (ANALYZE) and whose renewal makes PostgreSQL plan them again. Without statistics it
    guesses that a workspace holds one lease in two hundred, and an acquire scans the whole
    workspace's part of an index for its resource; without VACUUM the dead versions of leases
    renewed every few seconds pile up (docs/performance.md)."""
    messages: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW autovacuum")
                setting = cursor.fetchone()[0]
        except DatabaseError:
            continue  # the database's own checks report that it cannot be reached
        if setting != "on":
            messages.append(
                Warning(
                    f"PostgreSQL ({alias}) runs with autovacuum off, so Ground Control's tables "
                    "get no statistics and its hot statements may be planned to read ranges of "
                    "rows where one would do.",
                    hint="Turn autovacuum on (PostgreSQL's default), or run VACUUM (ANALYZE) on "
                    "the database every few minutes (docs/deploy.md).",
                    id=AUTOVACUUM_OFF,
                )
            )
    return messages
