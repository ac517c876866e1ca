"""Read replicas (apikit/reads.py): the pages and supervisor lists that opt in read a real
streaming replica (made by `pg_basebackup -R` from a primary of the tests' own) while it is within
`GC_REPLICA_MAX_LAG_S`, fall back to the primary when it lags, is down or is no replica, and
say which and how old their rows may be.

The replica is not the test database's: it holds the schema and only the rows a test copies
into its primary, so a page that reads it shows what only the replica has."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import psycopg
import pytest
from django.db import connections
from django.test import override_settings

from apikit import reads
from bench import pgservers
from hands.models import Hand, Workspace
from tests.scale.conftest import REPLICA_DB, database_alias
from tests.support.api import Api
from tests.support.people import member

pytestmark = pytest.mark.django_db(transaction=True)

BOUND_S = 1.0


def replica_settings(pair: pgservers.Pair) -> dict[str, Any]:
    return {
        "HOST": "127.0.0.1",
        "PORT": str(pair.replica_port),
        "NAME": REPLICA_DB,
        "USER": "postgres",
        "PASSWORD": "",
        "OPTIONS": {"connect_timeout": 2},
    }


@pytest.fixture
def replica(pair: pgservers.Pair) -> Iterator[pgservers.Pair]:
    """The `replica` alias on the pair's replica, a lag bound of a second, and the pair's
    primary emptied after the test."""
    with (
        database_alias("replica", **replica_settings(pair)),
        override_settings(GC_REPLICA_MAX_LAG_S=BOUND_S, GC_REPLICA_RETRY_S=0.1),
    ):
        yield pair
    emptied(pair)


def emptied(pair: pgservers.Pair) -> None:
    """The pair as a test found it: replay resumed, the primary's rows gone, the replica caught
    up."""
    with psycopg.connect(pair.url("replica"), autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_resume()")
    with primary_of(pair) as db:
        tables = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        db.execute(f"TRUNCATE {', '.join(row[0] for row in tables.fetchall())} CASCADE")
    replayed(pair)


def primary_of(pair: pgservers.Pair) -> psycopg.Connection[Any]:
    return psycopg.connect(pair.url("primary", REPLICA_DB), autocommit=True)


def copy_rows(pair: pgservers.Pair, table: str, where: str, *params: object) -> None:
    """Rows of the test database, as they are, into the pair's primary (and so its replica)."""
    source = connections["default"]
    source.ensure_connection()
    with primary_of(pair) as target, source.connection.cursor() as out:
        with (
            out.copy(f"COPY (SELECT * FROM {table} WHERE {where}) TO STDOUT", params) as reader,
            target.cursor().copy(f"COPY {table} FROM STDIN") as writer,
        ):
            for chunk in reader:
                writer.write(chunk)


def replayed(pair: pgservers.Pair, timeout_s: float = 10.0) -> None:
    """Wait until the replica has replayed everything the primary has written."""
    with psycopg.connect(pair.url("primary"), autocommit=True) as primary:
        (target,) = primary.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
    give_up = time.monotonic() + timeout_s
    with psycopg.connect(pair.url("replica"), autocommit=True) as db:
        while time.monotonic() < give_up:
            (done,) = db.execute(
                "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]
            ).fetchone()
            if done:
                reads.checked.forget()
                return
            time.sleep(0.02)
    raise AssertionError("the replica did not catch up")


def lagging_past(bound_s: float, timeout_s: float = 10.0) -> float:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        reads.checked.forget()
        lag = reads.replica_lag_s()
        if lag is not None and lag > bound_s:
            reads.checked.forget()
            return lag
        time.sleep(0.05)
    raise AssertionError("the replica never lagged")


def hand_names(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(row["name"] for row in response.json())


@pytest.fixture
def on_the_replica(replica: pgservers.Pair, workspace: Workspace, boss: Api) -> Hand:
    """The workspace and its boss copied to the replica's primary, the boss renamed there."""
    copy_rows(replica, Workspace._meta.db_table, "id = %s", workspace.pk)
    copy_rows(replica, Hand._meta.db_table, "id = %s", boss.hand.pk)
    with primary_of(replica) as db:
        db.execute(f"UPDATE {Hand._meta.db_table} SET name = 'only-on-the-replica'")
    replayed(replica)
    return boss.hand


def test_it_lists_from_a_fresh_replica_and_says_so(on_the_replica: Hand, boss: Api) -> None:
    response = boss.get("/hands")
    assert hand_names(response) == ["only-on-the-replica"]
    assert response[reads.READ_FROM_HEADER] == "replica"
    assert response[reads.DATA_AGE_HEADER] == "0"


def test_an_idle_primary_does_not_make_the_replica_look_stale(
    on_the_replica: Hand, boss: Api
) -> None:
    # Nothing is written for longer than the bound: every byte received is replayed.
    time.sleep(BOUND_S + 0.5)
    reads.checked.forget()
    assert reads.replica_lag_s() == 0
    response = boss.get("/hands")
    assert hand_names(response) == ["only-on-the-replica"]
    assert response[reads.READ_FROM_HEADER] == "replica"


def test_past_the_bound_it_reads_the_primary_and_back_when_caught_up(
    replica: pgservers.Pair, on_the_replica: Hand, boss: Api
) -> None:
    with psycopg.connect(replica.url("replica"), autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_pause()")
    with primary_of(replica) as db:
        db.execute(f"UPDATE {Hand._meta.db_table} SET name = 'renamed-later'")
    lag = lagging_past(BOUND_S)
    assert lag > BOUND_S
    response = boss.get("/hands")
    assert hand_names(response) == ["boss"]
    assert response[reads.READ_FROM_HEADER] == "primary"
    assert response[reads.DATA_AGE_HEADER] == "0"

    with psycopg.connect(replica.url("replica"), autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_resume()")
    replayed(replica)
    response = boss.get("/hands")
    assert hand_names(response) == ["renamed-later"]
    assert response[reads.READ_FROM_HEADER] == "replica"


def test_a_lagging_replica_within_the_bound_shows_its_age(
    replica: pgservers.Pair, on_the_replica: Hand, boss: Api
) -> None:
    with psycopg.connect(replica.url("replica"), autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_pause()")
    with primary_of(replica) as db:
        db.execute(f"UPDATE {Hand._meta.db_table} SET name = 'renamed-later'")
    lagging_past(2.0)
    with override_settings(GC_REPLICA_MAX_LAG_S=600):
        response = boss.get("/hands")
    assert hand_names(response) == ["only-on-the-replica"]
    assert response[reads.READ_FROM_HEADER] == "replica"
    assert int(response[reads.DATA_AGE_HEADER]) >= 2


def test_the_dashboard_page_shows_where_its_data_came_from(
    replica: pgservers.Pair, on_the_replica: Hand, workspace: Workspace
) -> None:
    # The login and the membership are the primary's: the user exists nowhere else.
    client = member(workspace, "vic", "viewer")
    page = client.get("/hands/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "only-on-the-replica" in html
    assert "Read from a replica: live" in html

    with psycopg.connect(replica.url("replica"), autocommit=True) as db:
        db.execute("SELECT pg_wal_replay_pause()")
    with primary_of(replica) as db:
        db.execute(f"UPDATE {Hand._meta.db_table} SET name = 'renamed-later'")
    lagging_past(2.0)
    with override_settings(GC_REPLICA_MAX_LAG_S=600):
        html = client.get("/hands/").content.decode()
    assert "only-on-the-replica" in html
    assert "Read from a replica: data as of " in html
    html = client.get("/hands/").content.decode()  # the bound of a second again
    assert "only-on-the-replica" not in html and ">boss<" in html
    assert "the replica is " in html and "behind: read from the primary" in html


@pytest.mark.parametrize("where", ["down", "not a replica"])
def test_a_replica_that_is_down_or_no_replica_leaves_the_reads_on_the_primary(
    pair: pgservers.Pair, boss: Api, where: str
) -> None:
    if where == "down":
        changes = {**replica_settings(pair), "PORT": str(pgservers.free_port())}
    else:  # the pair's primary: not in recovery, so no replica of anything
        changes = {**replica_settings(pair), "PORT": str(pair.primary_port)}
    with database_alias("replica", **changes), override_settings(GC_REPLICA_RETRY_S=30):
        assert reads.replica_lag_s() is None
        with mock.patch.object(reads, "replica_lag_s", wraps=reads.replica_lag_s) as asked:
            for _ in range(3):
                response = boss.get("/hands")
                assert hand_names(response) == ["boss"]
                assert response[reads.READ_FROM_HEADER] == "primary"
            # Asked once, then not again until GC_REPLICA_RETRY_S has passed.
            assert asked.call_count == 1
            reads.checked.forget()
            boss.get("/hands")
            assert asked.call_count == 2
