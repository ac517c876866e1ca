"""Small SQL fragments the periodic jobs share, rendered for the database in use."""

from __future__ import annotations

from django.db import connection


def skip_locked() -> str:
    """Concurrent jobs split the rows instead of queueing on them (SQLite has one writer)."""
    return " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""


def seconds_param(name: str) -> str:
    """A float parameter as SQL, typed so `timestamp + seconds` resolves on both databases."""
    kind = "double precision" if connection.vendor == "postgresql" else "REAL"
    return f"CAST(%({name})s AS {kind})"
