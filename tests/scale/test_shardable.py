"""Sharding by workspace made possible, checked in code (docs/scale.md, "Sharding"):

- every table carries the workspace, or is listed as global (with its reason) or as a gap (with
  its fix), and the lists are true of the models;
- every unique index of a table that carries the workspace includes it, or is a listed gap;
- every statement the engine and the hot views run pins each table it touches to one
  workspace: the statements are captured as the services run them (acquire, shared and on a
  tree, renew, renew-all, release, check, break, a queued wait, claim, report, finish, release,
  fences/verify, a pool's grant) and the hot views' own are rendered; only the listed gap
  tables may be reached otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connection

from evidence import services as evidence_services
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from hands.models import Hand, Workspace
from leases import queue, verification
from leases import services as leases
from leases.clock import now_sql
from leasing import hot
from pools import services as pool_services
from tests.scale import shardable

pytestmark = pytest.mark.django_db

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scale.md"


def _tables() -> dict[str, list[str]]:
    out = {}
    for model in apps.get_models(include_auto_created=True):
        out[model._meta.db_table] = [f.column for f in model._meta.concrete_fields]
    return out


def workspace_tables() -> set[str]:
    return {table for table, columns in _tables().items() if "workspace_id" in columns}


def test_every_table_carries_the_workspace_or_is_listed_with_its_reason() -> None:
    tables = _tables()
    without = {table for table, columns in tables.items() if "workspace_id" not in columns}
    listed = set(shardable.GLOBAL_TABLES) | set(shardable.GAPS)
    assert without == listed
    assert not set(shardable.GLOBAL_TABLES) & set(shardable.GAPS)
    docs = DOCS.read_text()
    for table in sorted(listed):
        assert f"`{table}`" in docs, f"docs/scale.md does not say why {table} has no workspace"


def test_every_unique_index_includes_the_workspace_or_is_a_listed_gap() -> None:
    """Read from PostgreSQL's catalog, so an index made by a migration's SQL counts too; a
    primary key (`id`) is the one kind left out: docs/scale.md says what it becomes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.relname, array_agg(a.attname ORDER BY k.ord) "
            "FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
            "WHERE i.indisunique AND NOT i.indisprimary AND n.nspname = current_schema() "
            "GROUP BY i.indexrelid, t.relname"
        )
        unique = cursor.fetchall()
    carrying = workspace_tables() | set(shardable.GAPS)
    missing = set()
    for table, columns in unique:
        if table in carrying and "workspace_id" not in columns:
            missing.add((table, tuple(c.removesuffix("_id") for c in columns)))
    assert missing == set(shardable.UNIQUE_GAPS)
    docs = DOCS.read_text()
    for table, columns in shardable.UNIQUE_GAPS:
        assert f"`{table}` ({', '.join(columns)})" in docs, (table, columns)


# --- the statements ---------------------------------------------------------------------------


@pytest.fixture
def captured() -> Iterator[list[str]]:
    seen: list[str] = []

    def capture(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(capture):
        yield seen


def _statements_of_the_services(
    workspace: Workspace, owner: Hand, teammate: Hand, run: Any
) -> None:
    ws = workspace.pk
    a, b = owner.name, teammate.name
    # Resource leases: a new one, a shared one on a tree, a denial, renew, renew-all, check,
    # release, a take of a free row, break.
    lease = leases.lease_acquire(
        workspace_id=ws, resource="src/", holder=a, process_id="p", ttl_s=30
    )
    leases.lease_acquire(
        workspace_id=ws, resource="docs/", holder=a, process_id="p", ttl_s=30, mode="shared"
    )
    leases.lease_acquire(
        workspace_id=ws, resource="docs/", holder=b, process_id="q", ttl_s=30, mode="shared"
    )
    with pytest.raises(Exception, match="held"):
        leases.lease_acquire(
            workspace_id=ws, resource="src/a.py", holder=b, process_id="q", ttl_s=30
        )
    leases.lease_renew(
        workspace_id=ws, resource="src/", holder=a, process_id="p", fence=lease.fence
    )
    leases.lease_renew_all(workspace_id=ws, holder=a, process_id="p")
    leases.lease_check(workspace_id=ws, resource="src/", fence=lease.fence)
    leases.lease_release(workspace_id=ws, resource="src/", holder=a, fence=lease.fence)
    again = leases.lease_acquire(
        workspace_id=ws, resource="src/", holder=b, process_id="q", ttl_s=30
    )
    verification.fences_verify(workspace_id=ws, fences=[f"src/@{again.fence}"])
    # A place in the line, kept and left.
    ticket = queue.join(
        workspace_id=ws, resource="src/", holder=a, process_id="p", mode="exclusive"
    )
    queue.stay(ticket)
    queue.leave(ticket)
    leases.lease_break(workspace_id=ws, resource="src/", actor="boss", reason="stuck")
    # A pool's member.
    pool, _ = pool_services.pool_create(workspace=workspace, name="ports", members=["80", "81"])
    pool_services.pool_acquire(workspace_id=ws, name=pool.name, holder=a, process_id="p", ttl_s=30)
    # A slot's life: claim, reports, finish; claim, release; a supervisor's break.
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="p")
    attempt = view.attempt
    for kind in ("heartbeat", "progress"):
        report_services.attempt_report(
            hand=owner, attempt_id=attempt.pk, fence=attempt.fence, kind=kind, process_id="p"
        )
    evidence_services.attempt_finish(
        hand=owner,
        attempt_id=attempt.pk,
        fence=attempt.fence,
        process_id="p",
        evidence=[{"kind": "pull_request", "url": "https://github.com/acme/app/pull/7"}],
    )
    other = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="q").attempt
    attempt_services.attempt_release(
        hand=teammate, attempt_id=other.pk, fence=other.fence, process_id="q", reason="later"
    )
    third = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="q").attempt
    attempt_services.lease_break(
        workspace_id=ws, resource=third.lease.resource, actor="boss", reason="stuck"
    )


def _hot_statements() -> dict[str, str]:
    return {
        name: hot.statement(name, now_sql())
        for name in ("renew", "acquire", "renew_all", "report", "report_percent", "heartbeat")
    }


_SKIP = re.compile(
    r"^\s*(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT|SET |SELECT pg_notify)", re.I
)


def test_every_statement_pins_each_table_to_one_workspace(
    captured: list[str], workspace: Workspace, owner: Hand, teammate: Hand, make_run: Any
) -> None:
    run = make_run(slots=3, evidence_required=["pull_request"])
    captured.clear()
    _statements_of_the_services(workspace, owner, teammate, run)
    statements = {f"service #{i}": sql for i, sql in enumerate(captured) if not _SKIP.match(sql)}
    statements.update({f"hot {name}": sql for name, sql in _hot_statements().items()})
    assert len(statements) > 40
    every, carrying = set(_tables()), workspace_tables()
    reached: set[str] = set()
    ways: dict[tuple[str, str], str] = {}
    for name, sql in statements.items():
        reached.update(table for table, _ in shardable.references(sql, every))
        for way in shardable.how_reached(sql, carrying, every):
            ways.setdefault(way, name)
    unroutable = {way: name for way, name in ways.items() if way[1] == "unroutable"}
    assert unroutable == {}, {w: statements[n][:300] for w, n in unroutable.items()}
    assert set(ways) == set(shardable.ROUTE_GAPS)
    docs = DOCS.read_text()
    for table, how in shardable.ROUTE_GAPS:
        assert f"`{table}` {how}" in docs, (table, how)
    # The walk reached the engine's tables, and the capture saw what it should.
    assert {
        "leases_lease",
        "leases_event",
        "fleet_attempt",
        "fleet_run",
        "leases_waiter",
    } <= reached


def test_the_reader_tells_pinned_from_unroutable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(shardable.GAPS, "fleet_slot", "a gap, for this test")
    tables = {"leases_lease", "fleet_attempt", "fleet_run", "fleet_slot", "fleet_handkey"}
    carrying = {"leases_lease", "fleet_attempt", "fleet_run"}

    def how(sql: str) -> list[tuple[str, str]]:
        return shardable.how_reached(sql, carrying, tables)

    assert how("SELECT * FROM leases_lease WHERE workspace_id = %s AND node = %s") == []
    assert how("UPDATE leases_lease l SET fence = 1 WHERE l.workspace_id = %(ws)s") == []
    assert how("INSERT INTO leases_lease (workspace_id, resource) VALUES (%s, %s)") == []
    assert how("SELECT count(*) FROM leases_lease WHERE status = 'held'") == [
        ("leases_lease", "unroutable")
    ]
    assert how('UPDATE "fleet_attempt" SET "end" = %s WHERE "fleet_attempt"."id" = %s') == [
        ("fleet_attempt", "by id")
    ]
    assert how(
        "SELECT a.id FROM fleet_attempt a JOIN fleet_run r ON r.id = a.run_id "
        "WHERE a.workspace_id = %s"
    ) == [("fleet_run", "by foreign key")]
    assert how("SELECT * FROM fleet_slot WHERE run_id = %s") == [
        ("fleet_slot", "no workspace column")
    ]
    assert how("SELECT * FROM fleet_handkey WHERE prefix = %s") == []  # a global table
