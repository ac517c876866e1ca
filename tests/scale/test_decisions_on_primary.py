"""Every decision reads the primary, never the replica: the key check, acquire (its hot
statement, and its service's on a denial), renew, release, the fence check and fences/verify, claim,
report, finish, an attempt's release, break, and a revoked key's refusal.

The `replica` alias is a real streaming replica that holds the schema and none of the test's
rows: a decision that read it would find no key, no lease and no run, and answer wrongly. Each
call is made from inside `replica_reads()` (as if a read-only context leaked around it), every
query on the replica's connection is captured, and none may be. A supervisor's list under the
same capture does read the replica, so the capture sees what it should.

A client's decision reads (issue 30, item 8) are asked of a replica that really lags: it holds
the workspace and both hands, its replay is paused, and then hand A takes a lease on the primary.
A list that only shows rows still reads the replica (and misses the lease); a covering read, or
a list marked `X-GC-Decision`, is answered by the primary and sees it, and `gctl git`'s
pre-commit refuses hand B's commit under it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
import pytest
from django.db import connections
from django.test import override_settings

from apikit import reads
from bench import pgservers
from fleet.models import Attempt, Run
from hands.models import Hand, Workspace
from leases.models import Lease
from leasing import hot
from tests.client.conftest import Fleet
from tests.client.test_git_fences import clone
from tests.scale.conftest import database_alias
from tests.scale.test_replica_reads import (
    copy_rows,
    emptied,
    lagging_past,
    primary_of,
    replayed,
    replica_settings,
)
from tests.support.api import PR_URL, Api, error_of, mint

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def replica(pair: pgservers.Pair) -> Iterator[list[str]]:
    """The replica alias, fresh (caught up: nothing is written on its primary), and the list
    of statements run on it (the lag check left out)."""
    seen: list[str] = []

    def capture(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        if sql != reads.LAG_SQL:
            seen.append(sql)
        return execute(sql, *args)

    with (
        database_alias("replica", **replica_settings(pair)),
        override_settings(GC_REPLICA_MAX_LAG_S=60),
        connections["replica"].execute_wrapper(capture),
    ):
        assert reads.freshness().source == "replica"
        yield seen


@contextmanager
def inside_a_read_only_context() -> Iterator[None]:
    with reads.replica_reads() as fresh:
        assert fresh.source == "replica"
        yield


def call(api: Api, method: str, path: str, body: Any = None) -> Any:
    with inside_a_read_only_context():
        return api.post(path, body) if method == "POST" else api.get(path, body)


def test_no_decision_reads_the_replica(
    replica: list[str],
    workspace: Workspace,
    owner: Hand,
    teammate: Hand,
    boss: Api,
    run: Run,
) -> None:
    a = Api(mint(owner, ["work", "leases"]), owner)
    b = Api(mint(teammate, ["work", "leases", "verify"]), teammate)
    boss = Api(boss.key, boss.hand)

    # The key check.
    assert call(a, "GET", "/me").json()["hand"] == "hand-a"
    # Acquire, a denied acquire, renew, the fence check, fences/verify, release.
    granted = call(
        a, "POST", "/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "p"}
    )
    assert granted.status_code == 201, granted.content
    assert granted.json()["fence"] == 1
    denied = call(
        b, "POST", "/leases/acquire", {"resource": "src/a.py", "ttl_s": 30, "process_id": "q"}
    )
    assert error_of(denied, 409, "lease_held")["holder"] == "hand-a"
    renewed = call(a, "POST", "/leases/renew", {"resource": "src/", "fence": 1, "process_id": "p"})
    assert renewed.status_code == 200, renewed.content
    checked = call(b, "POST", "/leases/check", {"resource": "src/", "fence": 1})
    assert checked.status_code == 200 and checked.json()["valid"] is True
    verified = call(b, "POST", "/fences/verify", {"fences": ["src/@1"]})
    assert verified.status_code == 200 and verified.json()["all_current"] is True
    released = call(a, "POST", "/leases/release", {"resource": "src/", "fence": 1})
    assert released.status_code == 200, released.content
    assert Lease.objects.get(workspace_id=workspace.pk, resource="src/").status == "free"

    # A supervisor's break.
    call(a, "POST", "/leases/acquire", {"resource": "db", "ttl_s": 30, "process_id": "p"})
    broken = call(boss, "POST", "/leases/break", {"resource": "db", "reason": "stuck"})
    assert broken.status_code == 200, broken.content

    # Claim, report (a renewing heartbeat), finish; claim again and release.
    claimed = call(a, "POST", f"/runs/{run.pk}/claim", {"process_id": "host-a:1"})
    assert claimed.status_code == 201, claimed.content
    attempt = claimed.json()
    beat = {"fence": attempt["fence"], "kind": "heartbeat", "process_id": "host-a:1"}
    reported = call(a, "POST", f"/attempts/{attempt['id']}/reports", beat)
    assert reported.status_code in (200, 201), reported.content
    finished = call(
        a,
        "POST",
        f"/attempts/{attempt['id']}/finish",
        {
            "fence": attempt["fence"],
            "process_id": "host-a:1",
            "evidence": [{"kind": "pull_request", "url": PR_URL}],
        },
    )
    assert finished.status_code == 200, finished.content
    assert Attempt.objects.get(pk=attempt["id"]).end == "finished"
    again = call(b, "POST", f"/runs/{run.pk}/claim", {"process_id": "host-b:1"})
    assert again.status_code == 201, again.content
    other = again.json()
    given_back = call(
        b,
        "POST",
        f"/attempts/{other['id']}/release",
        {"fence": other["fence"], "process_id": "host-b:1", "reason": "done for today"},
    )
    assert given_back.status_code == 200, given_back.content

    # A key revoked a moment ago is refused: the replica would not know it exists at all.
    prefix = a.key.split("_")[1]
    assert call(boss, "POST", f"/keys/{prefix}/revoke", {"reason": "leaked"}).status_code == 200
    error_of(call(a, "GET", "/me"), 401, "key_revoked")
    error_of(
        call(a, "POST", "/leases/acquire", {"resource": "x", "ttl_s": 30, "process_id": "p"}),
        401,
        "key_revoked",
    )

    assert replica == []

    # The capture sees the replica when a list opts in to it.
    listed = call(boss, "GET", "/hands")
    assert listed.status_code == 200 and listed.json() == []  # the replica has no rows
    assert listed[reads.READ_FROM_HEADER] == "replica"
    assert replica != []


def test_the_hot_statements_answered_those_calls(
    replica: list[str], owner: Hand, workspace: Workspace
) -> None:
    """The hot calls' own statements ran the acquire and renew above, each once and matching:
    they are raw SQL on the default connection."""
    a = Api(mint(owner, ["leases"]), owner)
    answered: list[bool] = []
    real = hot.run_statement

    def noting(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        answered.append(out is not None)
        return out

    with mock.patch.object(hot, "run_statement", noting):
        call(a, "POST", "/leases/acquire", {"resource": "r", "ttl_s": 30, "process_id": "p"})
        call(a, "POST", "/leases/renew", {"resource": "r", "fence": 1, "process_id": "p"})
    assert answered == [True, True]
    assert replica == []


# --- A client's decisions, against a replica that lags (issue 30, item 8) -----------------------


@pytest.fixture
def lagging(
    pair: pgservers.Pair, workspace: Workspace, owner: Hand, teammate: Hand
) -> Iterator[None]:
    """The `replica` alias on a replica that holds the workspace and both hands and then stopped
    replaying (`pg_wal_replay_pause()`) while its primary moved on: it lags, within a bound of
    ten minutes, so every read that may go to it does."""
    with (
        database_alias("replica", **replica_settings(pair)),
        override_settings(GC_REPLICA_MAX_LAG_S=600, GC_REPLICA_RETRY_S=0.1),
    ):
        copy_rows(pair, Workspace._meta.db_table, "id = %s", workspace.pk)
        copy_rows(pair, Hand._meta.db_table, "id IN (%s, %s)", owner.pk, teammate.pk)
        replayed(pair)
        with psycopg.connect(pair.url("replica"), autocommit=True) as db:
            db.execute("SELECT pg_wal_replay_pause()")
        with primary_of(pair) as db:  # WAL the replica receives and does not replay
            db.execute(f"UPDATE {Hand._meta.db_table} SET name = name || '-later'")
        lagging_past(0.0)
        assert reads.freshness().source == "replica"
        yield
    emptied(pair)


def leases_of(response: Any) -> list[tuple[str, str, int]]:
    assert response.status_code == 200, response.content
    return [(row["resource"], row["holder"], row["fence"]) for row in response.json()]


def test_a_covering_read_is_the_primarys_and_sees_a_lease_taken_after_replay_paused(
    lagging: None, owner: Hand, teammate: Hand
) -> None:
    a = Api(mint(owner, ["leases"]), owner)
    b = Api(mint(teammate, ["leases", "verify"]), teammate)
    taken = a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "a"})
    assert taken.status_code == 201, taken.content

    # A list that only shows rows reads the lagging replica, which has not seen the lease.
    shown = b.get("/leases", {"prefix": "src/"})
    assert leases_of(shown) == []
    assert shown[reads.READ_FROM_HEADER] == "replica"

    # What the pre-commit asks: the primary answers, and says so.
    covering = b.get("/leases", {"covering": ["src/a.py", "docs/x.md"]})
    assert leases_of(covering) == [("src/", "hand-a", 1)]
    assert covering[reads.READ_FROM_HEADER] == "primary"
    assert covering[reads.DATA_AGE_HEADER] == "0"

    # Any list the client marks as a decision (a session's end lists its own leases).
    for value in ("1", "yes"):
        held = b.get("/leases", {"holder": "hand-a"}, **{reads.DECISION_HEADER: value})
        assert leases_of(held) == [("src/", "hand-a", 1)]
        assert held[reads.READ_FROM_HEADER] == "primary"
    boss = Api(mint(owner, ["supervise"]), owner)
    marked = boss.get("/attempts", {}, **{reads.DECISION_HEADER: "1"})
    assert marked.status_code == 200 and marked[reads.READ_FROM_HEADER] == "primary"

    # The fence check and fences/verify read the primary whatever the replica holds.
    checked = b.post("/leases/check", {"resource": "src/", "fence": 1})
    assert checked.status_code == 200 and checked.json()["valid"] is True
    verified = b.post("/fences/verify", {"fences": ["src/@1"]})
    assert verified.status_code == 200 and verified.json()["all_current"] is True

    # The replica still lags: the primary answered because these were decisions, not because
    # the replica had caught up.
    assert leases_of(b.get("/leases", {"prefix": "src/"})) == []


def test_gctl_git_refuses_a_commit_under_a_lease_the_lagging_replica_has_not_seen(
    lagging: None, live_server: Any, owner: Hand, teammate: Hand, tmp_path: Path
) -> None:
    """The issue's case: hand A holds `src/` on the primary; hand B's commit of `src/a.py` passed
    because the replica answered its pre-commit's covering read."""
    fleet = Fleet(
        url=live_server.url,
        key_a=mint(owner, ["work", "leases"]),
        key_b=mint(teammate, ["work", "leases"]),
        make_run=lambda **plan: None,
    )
    home = tmp_path / "home"
    home.mkdir()
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    a = clone(fleet, remote, tmp_path / "a", fleet.key_a, "a", home)
    b = clone(fleet, remote, tmp_path / "b", fleet.key_b, "b", home)

    taken = a.gctl("lease", "acquire", "src/", "--ttl", "120")
    assert taken.returncode == 0, taken.stderr
    assert Api(fleet.key_b, teammate).get("/leases", {"prefix": "src/"}).json() == []

    refused = b.commit("src/a.py")
    assert refused.returncode != 0, refused.stdout
    assert "src/a.py is under src/, held by hand 'hand-a'" in refused.stderr
    assert "commit refused" in refused.stderr
    done = a.commit("src/a.py")
    assert done.returncode == 0, done.stderr
    assert a.trailers() == ["src/@1 hand-a"]  # the trailer names its holder (issue 32)
