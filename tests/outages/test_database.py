"""PostgreSQL faults under load: the whole database restarted (a throwaway cluster the test starts
itself, never the machine's), and connections killed with pg_terminate_backend mid-request.

Either way every call answers: a real answer, or 503 dependency_unavailable, never a 500; nothing
is half-applied; and service resumes by itself."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings
from django.db import connection

from hands import services as hand_services
from tests.outages.support import (
    PG_BIN,
    Load,
    ThrowawayPostgres,
    assert_nothing_half_applied,
    fleet_setup,
)
from tests.reliability.live import WebServer, database_url, migrate_and_bootstrap, server_env

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def _wait_for_success(load: Load, after: float, timeout: float = 20) -> float:
    """Seconds from `after` to the first successful answer after it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [a.at for a in list(load.answers) if a.at > after and a.status in (200, 201)]
        if done:
            return min(done) - after
        time.sleep(0.05)
    raise AssertionError(f"no call succeeded within {timeout}s of the fault ending")


@pytest.mark.skipif(not (PG_BIN / "initdb").exists(), reason="needs PostgreSQL 15's initdb")
def test_a_database_restart_answers_503_then_service_resumes_by_itself(tmp_path: Path) -> None:
    pg = ThrowawayPostgres().init()
    try:
        pg.start()
        with psycopg.connect(pg.url(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE gc")
        env = server_env(pg.url("gc"), DB_CONNECT_TIMEOUT="2")
        key = migrate_and_bootstrap(env, "faults")
        with WebServer(env=env, log=tmp_path / "server.log", workers=2) as server:
            load = Load(fleet_setup(server.url, key)).start()
            time.sleep(2)
            pg.stop("fast")  # terminates every backend, mid-request or not
            down_at = time.monotonic()  # pg_ctl -w returns once the server has stopped
            time.sleep(1)
            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            time.sleep(2)
            up_at = time.monotonic()
            pg.start()
            resumed_s = _wait_for_success(load, up_at)
            time.sleep(1)
            load.finish()
            log = server.tail()
        # Sent once the database had stopped and answered before it was started again:
        # no such call can have been served, however slow the loaded machine was.
        during = [a for a in load.answers if down_at < a.sent and a.at < up_at]
        statuses = load.statuses()
        assert during, "no call was made while the database was down"
        assert {(a.status, a.code) for a in during} == {(503, "dependency_unavailable")}, (
            statuses,
            log,
        )
        assert not [s for s in statuses if s[0] is None or s[0] >= 500 and s[0] != 503], (
            statuses,
            log,
        )
        assert (ready.status_code, ready.json()["checks"]["database"][:11]) == (503, "unavailable")
        assert resumed_s < 10
        counts = assert_nothing_half_applied(pg.url("gc"), load)
        assert counts["lease_rows"] > 10 and counts["attempts"] > 1, counts
    finally:
        pg.destroy()


@pytest.mark.django_db(transaction=True)
def test_connections_killed_mid_request_answer_503_and_leave_nothing_half_done(
    workspace, tmp_path: Path
) -> None:  # noqa: ANN001
    boss, _ = hand_services.hand_create(workspace=workspace, name="boss")
    key = hand_services.key_issue(
        hand=boss, scopes=hand_services.ALL_SCOPES, actor="test"
    ).plaintext
    db = settings.DATABASES["default"]
    url = database_url(db)
    ours = connection.connection.info.backend_pid if connection.connection else 0
    killed = 0
    with WebServer(env=server_env(url), log=tmp_path / "server.log", workers=2) as server:
        load = Load(fleet_setup(server.url, key)).start()
        time.sleep(1)
        stop = threading.Event()

        def killer() -> None:
            nonlocal killed
            with psycopg.connect(url, autocommit=True) as admin:
                while not stop.wait(0.03):
                    killed += sum(
                        row[0]
                        for row in admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = %s AND pid <> pg_backend_pid() AND pid <> %s "
                            "AND state <> 'idle'",
                            (db["NAME"], ours),
                        ).fetchall()
                    )

        thread = threading.Thread(target=killer)
        started = time.monotonic()
        thread.start()
        time.sleep(4)
        stop.set()
        thread.join(10)
        ended = time.monotonic()
        resumed_s = _wait_for_success(load, ended)
        time.sleep(0.5)
        load.finish()
        log = server.tail()
    statuses = load.statuses()
    during = [a for a in load.answers if started < a.at < ended]
    assert killed >= 1, killed
    assert any(a.status == 503 for a in during), statuses
    assert not [s for s in statuses if s[0] is None or s[0] >= 500 and s[0] != 503], (statuses, log)
    assert all(a.code == "dependency_unavailable" for a in load.answers if a.status == 503)
    assert resumed_s < 5
    assert_nothing_half_applied(url, load)
