"""The hot statements' plans (PostgreSQL). The hot path prepares its statements, and after five
calls PostgreSQL may keep one generic plan, made for the tables as they were then, until the
plan is invalidated (as autovacuum's ANALYZE does). A renewal's
`status = 'held'` used to imply the sweep's partial index's predicate, and a generic plan made
on a small table read the lease through that index: every held lease of the workspace per
renewal once the table had grown (measured in bench/: 7,700 rows per renewal, a third of the
rate). The key check's `revoked_at IS NULL` did the same with the revoking job's index of live
keys. Each statement must find the key by its prefix and the lease by its resource, holder or
primary key, never through the jobs' indexes; the jobs must still use theirs."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from hands import services as hand_services
from leases.clock import now_sql
from leases.models import Lease, LeaseKind, LeaseStatus
from leasing import hot

pytestmark = pytest.mark.django_db

SWEEP_INDEX = "lease_due_idx"
REVOKE_INDEX = "key_expiry_idx"


def generic_plan(statement: str, *, seqscan: bool = True) -> str:
    """EXPLAIN of `statement`'s generic plan: prepared with $n for its %(name)s parameters and
    explained for NULLs (the plan is the same for every value; nothing is executed)."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", placeholder, statement)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        if not seqscan:  # the tables are tiny here: which index, if one is read at all
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"PREPARE plan_probe AS {prepared}")
        try:
            cursor.execute(f"EXPLAIN EXECUTE plan_probe({', '.join(['NULL'] * len(names))})")
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE plan_probe")


HOT_STATEMENTS = ["renew", "acquire", "renew_all", "heartbeat", "report", "report_percent"]


def lease_lookups(plan: str) -> list[tuple[str, str]]:
    """(scan line, its index condition or filter) for every read of the lease table."""
    lines = plan.splitlines()
    return [
        (line.strip(), lines[number + 1].strip())
        for number, line in enumerate(lines)
        if "Scan" in line and " on leases_lease" in line
    ]


@pytest.mark.parametrize("name", HOT_STATEMENTS)
def test_a_plan_made_on_small_tables_never_reads_through_the_jobs_indexes(name: str) -> None:
    plan = generic_plan(hot.statement(name, now_sql()))
    assert SWEEP_INDEX not in plan, plan
    assert REVOKE_INDEX not in plan, plan
    assert re.search(r"Index Cond: \(\(prefix\)::text = \$\d+\)", plan), plan
    # Which index, where one is read: each lease by its key. (On a table as small as the tests
    # leave it, a sequential scan may be cheapest, by the statistics earlier tests left: that
    # depends on autovacuum's timing, and is no read through the jobs' indexes.)
    indexed = generic_plan(hot.statement(name, now_sql()), seqscan=False)
    assert SWEEP_INDEX not in indexed and REVOKE_INDEX not in indexed, indexed
    assert lease_lookups(indexed), indexed
    for _, condition in lease_lookups(indexed):
        assert condition.startswith("Index Cond"), indexed


@pytest.mark.parametrize("name", [name for name in HOT_STATEMENTS if name != "renew_all"])
def test_with_statistics_a_plan_reaches_each_lease_by_its_key(name: str, workspace, owner) -> None:
    """With statistics (autovacuum's ANALYZE, which Ground Control's database needs: see
    docs/deploy.md), a statement reads one lease by its id, or by workspace and resource
    (and holder, in the holder index), never a range of them. Without any, PostgreSQL assumes a
    workspace holds one lease in two hundred, and an acquire's take of a free lease (which names
    no holder) plans a scan of the workspace's part of the holder index as cheaply as the unique
    index, even with 500 leases in the table."""
    Lease.objects.bulk_create(
        Lease(
            workspace_id=workspace.id,
            resource=f"grown/{n}",
            kind=LeaseKind.RESOURCE,
            status=LeaseStatus.HELD,
            holder=owner.name,
            fence=1,
        )
        for n in range(500)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leases_lease, fleet_handkey, fleet_attempt")
    plan = generic_plan(hot.statement(name, now_sql()))
    for scan, condition in lease_lookups(plan):
        by_id = condition.startswith("Index Cond: (id = ")
        by_key = "workspace_id = " in condition and "(node)::text = " in condition
        if "lease_holder_idx" in scan:
            by_key = by_key and "(holder)::text = " in condition
        # The tree's conflict checks (leases.engine): the node's line, or its descendants' range.
        on_line = "lease_held_node_idx" in scan and (
            "(node)::text = ANY" in condition or "(node)::text >= " in condition
        )
        # A renew-all reads every lease of one process, by its own index.
        by_process = "lease_process_idx" in scan and "(process_id)::text = " in condition
        assert by_id or by_key or on_line or by_process, plan


def test_a_renew_all_reads_its_process_leases_through_their_index(workspace, owner) -> None:
    """A renew-all reads a range by nature: the leases of one process, and only those, through
    `lease_process_idx`, however many the hand holds in other processes. The update then finds
    the rows it locked (in id order, the engine's LOCK_ORDER) by their primary key."""
    Lease.objects.bulk_create(
        Lease(
            workspace_id=workspace.id,
            resource=f"grown/{n}",
            kind=LeaseKind.RESOURCE,
            status=LeaseStatus.HELD,
            holder=owner.name,
            process_id=f"p:{n % 50}",
            fence=1,
        )
        for n in range(1000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leases_lease, fleet_handkey, fleet_attempt")
    plan = generic_plan(hot.statement("renew_all", now_sql()))
    lookups = [(scan, cond) for scan, cond in lease_lookups(plan) if "bl " not in scan]
    reads = [scan for scan, cond in lookups if not _by_id_of_locked_rows(scan, cond)]
    assert reads and all("lease_process_idx" in scan for scan in reads), plan


def _by_id_of_locked_rows(scan: str, condition: str) -> bool:
    """The renew-all's update reaching, by primary key, the rows its sub-select locked."""
    return "leases_lease_pkey" in scan and "(id = " in condition


def test_the_jobs_still_find_their_rows_through_their_indexes() -> None:
    sweep = generic_plan(
        "SELECT id FROM leases_lease WHERE status = 'held' AND next_check_at < %(now)s "
        "ORDER BY next_check_at LIMIT 500",
        seqscan=False,
    )
    assert SWEEP_INDEX in sweep, sweep
    revoke = generic_plan(
        "SELECT k.id FROM fleet_handkey k WHERE k.revoked_at IS NULL "
        "AND k.expires_at IS NOT NULL AND k.expires_at <= %(now)s LIMIT 500",
        seqscan=False,
    )
    assert REVOKE_INDEX in revoke, revoke


@pytest.mark.parametrize("name", ["heartbeat", "report", "report_percent"])
def test_with_one_key_per_hand_in_the_statistics_a_report_finds_its_key_by_prefix(
    name: str, workspace
) -> None:
    """Statistics that say each hand has one key made the key's hand index look as good as its
    prefix; a hand with many keys (one per attempt, with revoke_when_done) would then have them
    all read per call."""
    for i in range(300):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"one-key-{i}")
        hand_services.key_issue(hand=hand, scopes=["work", "leases"], actor="test")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE fleet_handkey, fleet_hand, fleet_attempt, leases_lease")
    plan = generic_plan(hot.statement(name, now_sql()))
    assert re.search(r"Index Cond: \(\(prefix\)::text = \$\d+\)", plan), plan
    assert "fleet_handkey_hand_id" not in plan, plan
