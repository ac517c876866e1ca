"""Servers of the scale tests' own (bench/pgservers.py): a primary with a streaming replica, and a
PgBouncer in transaction mode; and database aliases added for one test.

An alias is added after the test's database setup and removed before its teardown; Django's
guard against connections to aliases a test did not list (a patch of `ensure_connection` for
the test's length) is stepped around for the added aliases only."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from apikit import reads
from bench import pgservers
from tests.reliability import live

REPLICA_DB = "gc"


_ADDED: set[str] = set()
_REAL: dict[str, Any] = {}


@pytest.fixture(scope="session", autouse=True)
def _real_ensure_connection(django_db_blocker: Any) -> None:
    """Django's own `ensure_connection`, as pytest-django's blocker keeps it."""
    with django_db_blocker.unblock():
        _REAL["ensure_connection"] = BaseDatabaseWrapper.ensure_connection


@contextmanager
def database_alias(alias: str, **changes: Any) -> Iterator[None]:
    """`alias` for the length of the block: the default's settings (the test database) with
    `changes` (HOST, PORT, NAME, OPTIONS...)."""
    base = connections.settings[DEFAULT_DB_ALIAS]
    added = {**base, **changes, "TEST": {"MIRROR": None}}
    connections.settings[alias] = added
    reads.checked.forget()
    guarded, real_one = BaseDatabaseWrapper.ensure_connection, _REAL["ensure_connection"]

    def ensure_connection(self: BaseDatabaseWrapper, *args: Any, **kwargs: Any) -> None:
        real = real_one if self.alias in _ADDED else guarded
        return real(self, *args, **kwargs)

    _ADDED.add(alias)
    try:
        with mock.patch.object(BaseDatabaseWrapper, "ensure_connection", ensure_connection):
            yield
    finally:
        _ADDED.discard(alias)
        if hasattr(connections._connections, alias):
            connections[alias].close()
            del connections[alias]
        del connections.settings[alias]
        reads.checked.forget()


def _socket_only() -> str | None:
    """Why the test database's server cannot stand beside a replica or a pooler made from this
    machine's binaries: the embedded PostgreSQL listens on a socket only, and is another major
    version than theirs."""
    if str(connections[DEFAULT_DB_ALIAS].settings_dict["HOST"]).startswith("/"):
        return (
            "the test database is the embedded PostgreSQL (a Unix socket); the replica and "
            "pooler tests need a server on TCP: set DATABASE_URL (CI does)"
        )
    return None


@pytest.fixture(scope="session")
def pair(django_db_setup: None, django_db_blocker: Any) -> Iterator[pgservers.Pair]:
    """A primary and its streaming replica holding the test database's schema (no rows): a
    replica whose rows are not the test database's, so anything that reads it by mistake gets
    a wrong answer."""
    reason = pgservers.unavailable() or _socket_only()
    if reason:
        pytest.skip(reason)
    started = pgservers.start_pair()
    try:
        settings = connections[DEFAULT_DB_ALIAS].settings_dict
        source = live.database_url(settings)
        target = started.url("primary", REPLICA_DB)
        _psql(started.url("primary"), f"CREATE DATABASE {REPLICA_DB}")
        schema = subprocess.run(
            [str(pgservers.PG_BIN / "pg_dump"), "--schema-only", "--no-owner", source],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        subprocess.run(
            [str(pgservers.PG_BIN / "psql"), "-q", "-v", "ON_ERROR_STOP=1", target],
            input=schema,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        yield started
    finally:
        started.stop()


def _psql(url: str, sql: str) -> None:
    subprocess.run(
        [str(pgservers.PG_BIN / "psql"), "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture(scope="session")
def bouncer(django_db_setup: None) -> Iterator[pgservers.Bouncer]:
    """PgBouncer 1.18 (Debian bookworm's) in transaction mode in front of the test server, with
    ONE server connection per database: two clients' transactions share it, so a feature that
    needs its own session shows at once."""
    reason = pgservers.unavailable(pgbouncer=True) or _socket_only()
    if reason:
        pytest.skip(reason)
    port = connections[DEFAULT_DB_ALIAS].settings_dict["PORT"] or 5432
    started = pgservers.start_pgbouncer(server_port=int(port), pool_size=1)
    yield started
    started.stop()
