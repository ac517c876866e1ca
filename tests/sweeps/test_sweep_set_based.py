"""The sweep's one statement per batch (`fleet.jobs._sweep_statement`) records the same
whatever the batch: one batch for the whole fleet, batches of two, and batches of one lease (how
a sweep goes on past a batch the database refused). Each scenario runs both ways, rolled back in
between, and every row they leave must be the same; a lost attempt ends as `attempt_mark_lost`
ends it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet import jobs
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, Run
from leases import clock
from leases import services as leases
from leases.models import Event, Lease
from ops import jobs as ops_jobs
from ops.models import JobRun

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


class _Undo(Exception):
    pass


def _snapshot() -> dict[str, Any]:
    """Every event, attempt and lease as rows, ids replaced by what they name (a slot's
    resource by its run's place among the runs: the two passes make runs of their own)."""
    runs = {pk: i for i, pk in enumerate(Run.objects.order_by("pk").values_list("pk", flat=True))}

    def named(resource: str) -> str:
        return re.sub(r"^run/(\d+)/", lambda m: f"run/#{runs[int(m.group(1))]}/", resource)

    def run_named(data: str) -> str:  # a claim's event names its run
        return re.sub(r'"run": (\d+)', lambda m: f'"run": "#{runs[int(m.group(1))]}"', data)

    resource_of = {pk: named(r) for pk, r in Lease.objects.values_list("pk", "resource")}
    attempt_of = {
        pk: resource_of[lease_id] + f"@{fence}"
        for pk, lease_id, fence in Attempt.objects.values_list("pk", "lease_id", "fence")
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT workspace_id, kind, at, actor, hand, attempt_id, resource, fence, "
            f"CAST(data AS TEXT), dispatched_at FROM {Event._meta.db_table} ORDER BY id"
        )
        events = [
            (*row[:5], attempt_of.get(row[5]), named(row[6]), row[7], run_named(row[8]), row[9])
            for row in cursor.fetchall()
        ]
    # Each lease's events in the order they were written; the leases of one batch in any order.
    events.sort(key=lambda event: event[6])
    attempts = sorted(
        (attempt_of[pk], end, ended_at, reason)
        for pk, end, ended_at, reason in Attempt.objects.values_list(
            "pk", "end", "ended_at", "end_reason"
        )
    )
    lease_rows = sorted(
        (named(resource), *rest)
        for resource, *rest in Lease.objects.values_list(
            "resource", "status", "fence", "noticed_state", "next_check_at", "holder"
        )
    )
    return {"events": events, "attempts": attempts, "leases": lease_rows}


def _both_ways(
    scenario: Callable[[Callable[[], jobs.SweepResult]], None], batches: tuple[int, int]
) -> tuple[tuple[dict[str, Any], list[Any]], tuple[dict[str, Any], list[Any]]]:
    """Run `scenario` (which builds rows, and sweeps them) with each of the two batch sizes,
    each in a transaction rolled back after its snapshot: the rows and the sweeps' results."""
    out = []
    for batch in batches:
        results: list[jobs.SweepResult] = []

        def swept(batch: int = batch, results: list[Any] = results) -> jobs.SweepResult:
            done = ops_jobs.leases_sweep(batch=batch)
            results.append(done)
            return done

        try:
            with transaction.atomic():
                clock.freeze(datetime(2030, 1, 1, 12, 0, 0, 250000, tzinfo=UTC))
                scenario(swept)
                out.append((_snapshot(), [r.as_dict() for r in results]))
                raise _Undo
        except _Undo:
            pass
    return out[0], out[1]


def _same_records(one: list[dict[str, Any]], other: list[dict[str, Any]]) -> None:
    """What the sweeps recorded agrees, whatever their batches (which only they count)."""
    keep = ("processed", "events", "lost", "expired", "failed", "lag_s")
    assert [{k: r[k] for k in keep} for r in one] == [{k: r[k] for k in keep} for r in other]


def _mixed_fleet(owner, teammate, make_run) -> Callable[[Callable[[], Any]], None]:  # noqa: ANN001
    """Slots and resource leases that a sweep meets live, late, stalled and lost at once."""

    def scenario(sweep: Callable[[], Any]) -> None:
        def claim(hand, **run_options) -> Attempt:  # noqa: ANN001
            run = make_run(slots=1, **run_options)
            return attempt_services.attempt_claim(
                hand=hand, run_id=run.pk, process_id="host:1"
            ).attempt

        live = claim(owner, heartbeat_interval_s=500, grace_s=60)
        late = claim(owner, heartbeat_interval_s=100, grace_s=60)
        clock.advance(0.123457)  # deadlines with microseconds, and an odd grace
        stalled = claim(teammate, heartbeat_interval_s=60, grace_s=61)
        lost = claim(teammate, heartbeat_interval_s=10, grace_s=60)
        no_grace = claim(owner, heartbeat_interval_s=50, grace_s=0)
        ended = claim(owner, heartbeat_interval_s=10, grace_s=7)
        # An odd grace (a run's is whole seconds; a lease's column is a float).
        Lease.objects.filter(pk=ended.lease_id).update(grace_s=7.5)
        for i in range(3):
            leases.lease_acquire(
                workspace_id=owner.workspace_id,
                resource=f"res/{i}",
                holder="b",
                process_id="p",
                ttl_s=30 + 40 * i,
            )
        # A resource lease with a grace (none is acquired so; the sweep must not care).
        Lease.objects.filter(resource="res/2").update(grace_s=20.25)
        clock.advance(101)
        # Someone else ended this one's attempt already: its lease still passes every state,
        # and its lost is nobody's to record again.
        attempt_services.attempt_mark_lost(
            workspace_id=ended.workspace_id, attempt_id=ended.pk, at=clock.db_now(), reason="x"
        )
        sweep()
        clock.advance(45)
        sweep()
        clock.advance(400)
        sweep()
        sweep()
        assert (
            Attempt.objects.filter(pk__in=[late.pk, stalled.pk, lost.pk], end="lost").count() == 3
        )
        assert Attempt.objects.get(pk=no_grace.pk).end == "lost"
        assert Attempt.objects.get(pk=live.pk).end is None

    return scenario


def test_a_mixed_batch_records_exactly_what_one_lease_at_a_time_records(
    owner, teammate, make_run
) -> None:
    (set_rows, set_results), (row_rows, row_results) = _both_ways(
        _mixed_fleet(owner, teammate, make_run), (500, 1)
    )
    assert set_rows == row_rows
    _same_records(set_results, row_results)
    kinds = [event[1] for event in set_rows["events"]]
    # Every kind the sweep writes is in the scenario, and some events have an attempt, some not.
    assert {"late", "stalled", "lost", "lease_expired"} <= set(kinds)
    # late, stalled, lost and no_grace by the sweep; ended by attempt_mark_lost before it.
    assert sum(1 for kind in kinds if kind == "lost") == 5
    assert any(e[5] is None and e[1] == "late" for e in set_rows["events"])  # res/2
    # The JSON is written as Python writes it: a float grace stays a float.
    assert any('"grace_s": 60.0' in e[8] for e in set_rows["events"])
    assert any('"grace_s": 7.5' in e[8] for e in set_rows["events"])


def test_small_batches_record_exactly_what_one_batch_records(owner, teammate, make_run) -> None:
    # Batches of two: a sweep goes through several, and a batch holds rows of every kind.
    (small_rows, small_results), (whole_rows, whole_results) = _both_ways(
        _mixed_fleet(owner, teammate, make_run), (2, 500)
    )
    assert small_rows == whole_rows
    _same_records(small_results, whole_results)
    assert sum(r["batches"] for r in small_results) > 4


def test_a_lost_attempt_ends_as_attempt_mark_lost_ends_it(
    owner, teammate, make_run, frozen_clock: datetime
) -> None:
    """The sweep's UPDATE of attempts and its `lost` event, against `attempt_mark_lost`'s."""
    runs = [make_run(heartbeat_interval_s=10, grace_s=10, slots=1) for _ in range(2)]
    by_hand = attempt_services.attempt_claim(hand=owner, run_id=runs[0].pk, process_id="h:1")
    by_sweep = attempt_services.attempt_claim(hand=teammate, run_id=runs[1].pk, process_id="h:2")
    clock.advance(20.5)
    at = clock.db_now()
    assert attempt_services.attempt_mark_lost(
        workspace_id=owner.workspace_id,
        attempt_id=by_hand.attempt.pk,
        at=at,
        reason=jobs.LOST_REASON,
    )
    result = ops_jobs.leases_sweep()
    assert result.lost == 1  # the one already ended is not ended again

    def ended(attempt_id: int) -> tuple[Any, ...]:
        attempt = Attempt.objects.get(pk=attempt_id)
        event = Event.objects.get(kind="lost", attempt_id=attempt_id)
        return (
            attempt.end,
            attempt.ended_at,
            attempt.end_reason,
            event.workspace_id,
            event.at,
            event.actor,
            event.fence,
            event.data,
            event.dispatched_at,
            event.resource == attempt.lease.resource,
            event.hand == attempt.hand.name,
        )

    assert ended(by_sweep.attempt.pk) == ended(by_hand.attempt.pk)
    assert ended(by_sweep.attempt.pk)[:3] == ("lost", at, jobs.LOST_REASON)


def test_on_postgresql_a_batch_is_one_statement(owner, make_run, frozen_clock: datetime) -> None:
    for _ in range(3):
        run = make_run(heartbeat_interval_s=10, grace_s=10, slots=1)
        attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="h:1")
    clock.advance(25)
    with CaptureQueriesContext(connection) as captured:
        result = jobs.leases_sweep()
    assert (result.processed, result.events, result.lost, result.batches) == (3, 9, 3, 1)
    statements = [
        q["sql"] for q in captured if "SAVEPOINT" not in q["sql"] and "SET LOCAL" not in q["sql"]
    ]
    assert len(statements) == 1, statements


def test_the_candidates_are_found_by_index_condition_not_read_and_filtered(db: None) -> None:
    """ "now" read once, so the scan of lease_due_idx stops at the first lease not yet due (a
    quiet tick reads nothing), instead of filtering every held lease by clock_timestamp()."""
    candidates, _ = jobs._claim_sql(clock.now_sql())
    assert "clock_timestamp()" in candidates
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {candidates}", {"batch": 500})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "lease_due_idx" in plan
    # The InitPlan's output: `$0` up to PostgreSQL 16, `(InitPlan 1).col1` from 17.
    assert re.search(r"Index Cond: \(next_check_at < (\$\d+|\(InitPlan \d+\)\.col\d+)\)", plan), (
        plan
    )


def _fail_events_of(hand: str) -> None:
    """A real fault: the database refuses any event of `hand` (rolled back with the test)."""
    table = Event._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION gc_test_refuse_event() RETURNS trigger AS $$ BEGIN "
            f"IF NEW.hand = '{hand}' THEN RAISE EXCEPTION 'a bad row'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER gc_test_refuse_event BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION gc_test_refuse_event()"
        )


def _stop_failing() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER gc_test_refuse_event ON {Event._meta.db_table}")
        cursor.execute("DROP FUNCTION gc_test_refuse_event()")


def test_a_row_the_database_refuses_is_pushed_back_and_the_others_are_recorded(
    owner, teammate, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=100, grace_s=60, slots=2)
    good = claim(owner, run)
    bad = claim(teammate, run, "host:2")
    _fail_events_of("hand-b")
    clock.advance(101)
    result = ops_jobs.leases_sweep(retry_s=20)
    assert (result.processed, result.failed, result.events) == (2, 1, 1)
    events = Event.objects.exclude(kind="claimed")
    assert list(events.filter(attempt_id=good.attempt.pk).values_list("kind", flat=True)) == [
        "late"
    ]
    assert not events.filter(attempt_id=bad.attempt.pk).exists()
    lease = Lease.objects.get(pk=bad.attempt.lease_id)
    assert lease.noticed_state == "live"
    assert lease.next_check_at == frozen_clock + timedelta(seconds=121)
    assert JobRun.objects.get(name="sweep_leases").last_failed == 1
    # Not due again until pushed-back time has passed; then recorded once the fault is gone.
    assert ops_jobs.leases_sweep().processed == 0
    _stop_failing()
    clock.advance(20.001)
    assert ops_jobs.leases_sweep().events == 1
    assert list(events.filter(attempt_id=bad.attempt.pk).values_list("kind", flat=True)) == ["late"]
