"""Behind PgBouncer 1.18 in transaction mode (Debian bookworm's; it keeps no prepared statements:
`max_prepared_statements` came in 1.21), with ONE server connection for every client, so that
any feature that needs a session of its own shows at once:

- the hot views, with `GC_DB_PREPARE=0` (the default under `GC_DB_POOLER=transaction`), answer
  every call with their own statement from many connections; with named prepared statements the
  same calls fail on the server (psycopg names them per connection, `_pg3_0` on each), which is
  why the setting exists;
- a `wait_s` acquire LISTENs and holds its wait permits (session advisory locks) on the direct
  connection (`DATABASE_DIRECT_URL`): a release wakes it at once, and the permits are the direct
  session's, gone when the wait ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client, override_settings

from bench import pgservers
from fleet.attempts import services as attempt_services
from hands import services as hand_services
from hands.models import Workspace
from leases import services as leases
from leasing import hot
from tests.scale.conftest import database_alias
from tests.support.api import mint
from tests.waking import pauses_recorded

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 6
CALLS = 8


@pytest.fixture
def pooled(bouncer: pgservers.Bouncer) -> Iterator[pgservers.Bouncer]:
    """The default alias through the pooler, as `GC_DB_POOLER=transaction` runs it, and the
    `direct` alias straight to the server (both on the test database)."""
    default = connections[DEFAULT_DB_ALIAS]
    settings = default.settings_dict
    saved = {**settings, "OPTIONS": dict(settings.get("OPTIONS") or {})}
    direct_options = {**saved["OPTIONS"], "application_name": "gc-direct"}
    default.close()
    settings.update(
        HOST="127.0.0.1",
        PORT=str(bouncer.port),
        DISABLE_SERVER_SIDE_CURSORS=True,
        OPTIONS={**saved["OPTIONS"], "application_name": "gc-pooled"},
    )
    try:
        with (
            database_alias("direct", **{**saved, "OPTIONS": direct_options}),
            override_settings(GC_DB_POOLER="transaction", GC_DB_PREPARE=False),
        ):
            yield bouncer
    finally:
        default.close()
        settings.clear()
        settings.update(saved)


def _post(key: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = Client().post(
        path,
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    return response.status_code, response.json()


def _hot_calls_from_threads(workspace: Workspace, make_run: Any) -> tuple[list[Any], list[bool]]:
    """THREADS hands, each on its own connection through the pooler, each acquiring, renewing
    and heartbeating CALLS times: every answer, and whether the hot statement gave it."""
    run = make_run(slots=THREADS, heartbeat_interval_s=100, grace_s=60)
    callers = []
    for i in range(THREADS):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"pooled-{i}")
        attempt = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p").attempt
        callers.append((mint(hand, ["work", "leases"]), attempt))
    answers: list[Any] = []
    hot_answered: list[bool] = []
    lock = threading.Lock()
    real = hot.run_statement

    def noting(*args: Any, **kwargs: Any) -> Any:
        try:
            out = real(*args, **kwargs)
        except Exception:
            with lock:
                hot_answered.append(False)
            raise
        with lock:
            hot_answered.append(out is not None)
        return out

    def calls(key: str, attempt: Any, i: int) -> None:
        try:
            resource = f"pooled/{i}"
            got = [
                _post(
                    key,
                    "/api/v1/leases/acquire",
                    {"resource": resource, "ttl_s": 60, "process_id": "p"},
                )
            ]
            for _ in range(CALLS):
                got.append(
                    _post(
                        key,
                        "/api/v1/leases/renew",
                        {"resource": resource, "fence": 1, "process_id": "p"},
                    )
                )
                got.append(
                    _post(
                        key,
                        f"/api/v1/attempts/{attempt.pk}/reports",
                        {"fence": attempt.fence, "kind": "heartbeat", "process_id": "p"},
                    )
                )
            with lock:
                answers.extend(got)
        finally:
            connections.close_all()

    with mock.patch.object(hot, "run_statement", noting):
        threads = [threading.Thread(target=calls, args=(*c, i)) for i, c in enumerate(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return answers, hot_answered


def test_the_hot_views_answer_through_a_transaction_pooler_without_prepared_statements(
    pooled: pgservers.Bouncer, workspace: Workspace, make_run: Any
) -> None:
    answers, hot_answered = _hot_calls_from_threads(workspace, make_run)
    assert len(answers) == THREADS * (1 + 2 * CALLS)
    assert {status for status, _ in answers} <= {200, 201}, answers
    assert hot_answered == [True] * len(answers)  # each call one statement, which matched


def test_named_prepared_statements_fail_behind_it(
    pooled: pgservers.Bouncer, workspace: Workspace, make_run: Any
) -> None:
    """The reason for GC_DB_PREPARE=0: with it on, the pooler's one server connection is asked
    to prepare `_pg3_0` by every client, and all but the first are refused, or a client runs the
    `_pg3_0` another prepared: calls that should succeed fail (a misconfiguration, which the
    default under `GC_DB_POOLER=transaction` avoids)."""
    with override_settings(GC_DB_PREPARE=True):
        answers, hot_answered = _hot_calls_from_threads(workspace, make_run)
    assert {status for status, _ in answers} - {200, 201}, answers
    assert False in hot_answered


def test_a_wait_listens_and_holds_its_permits_on_the_direct_connection(
    pooled: pgservers.Bouncer, workspace: Workspace, owner: Any, teammate: Any
) -> None:
    leases.lease_acquire(
        workspace_id=workspace.pk,
        resource="db/migrate",
        holder=owner.name,
        process_id="p",
        ttl_s=60,
    )
    key = mint(teammate, ["leases"])
    answer: dict[str, Any] = {}

    def waiter() -> None:
        try:
            body = {"resource": "db/migrate", "ttl_s": 30, "process_id": "q", "wait_s": 20}
            answer["response"] = _post(key, "/api/v1/leases/acquire", body)
        finally:
            connections.close_all()

    thread = threading.Thread(target=waiter)
    with pauses_recorded() as pauses:
        thread.start()
        assert pauses.began.wait(timeout=20)
        _check_sessions()
        leases.lease_release(
            workspace_id=workspace.pk, resource="db/migrate", holder=owner.name, fence=1
        )
        thread.join(timeout=30)
    status, body = answer["response"]
    assert status == 201 and body["holder"] == teammate.name and body["fence"] == 2, body
    # Its one pause was ended by the release's NOTIFY, and the next try was granted.
    assert pauses.woken == [True], pauses.woken
    direct = connections["direct"]
    with direct.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND a.application_name LIKE 'gc-%%'"
        )
        assert cursor.fetchone() == (0,)


def _check_sessions() -> None:
    """One session LISTENs, the direct one, holding the wait's two permits; no pooled session
    holds an advisory lock."""
    direct = connections["direct"]
    with direct.cursor() as cursor:
        cursor.execute(
            "SELECT a.application_name, a.query, "
            "(SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory') "
            "FROM pg_stat_activity a WHERE a.datname = current_database() "
            "AND a.pid <> pg_backend_pid() AND a.application_name LIKE 'gc-%%'"
        )
        sessions = cursor.fetchall()
    listeners = [s for s in sessions if s[1].startswith("LISTEN")]
    assert [(name, locks) for name, _, locks in listeners] == [("gc-direct", 2)], sessions
    assert all(locks == 0 for name, _, locks in sessions if name == "gc-pooled"), sessions
