"""The sweep: each late, stalled and lost transition recorded once, at exact boundaries."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.attempts import reports as report_services
from fleet.models import Attempt
from fleet.plan.selectors import run_slots
from leases import clock
from leases import services as leases
from leases.errors import LeaseLost
from leases.models import Event, Lease
from ops import jobs as ops_jobs
from ops.models import JobRun

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(heartbeat_interval_s=100, grace_s=60, slots=2)


def kinds(attempt_id: int | None = None, resource: str | None = None) -> list[str]:
    events = Event.objects.exclude(kind__in=["claimed", "lease_acquired"]).order_by("id")
    if attempt_id is not None:
        events = events.filter(attempt_id=attempt_id)
    if resource is not None:
        events = events.filter(resource=resource)
    return list(events.values_list("kind", flat=True))


def test_it_records_late_stalled_and_lost_each_at_its_exact_boundary(
    owner, run, claim, frozen_clock: datetime
) -> None:
    view = claim(owner, run)
    attempt_id = view.attempt.pk
    steps = [
        (100, []),  # exactly at the deadline: still live
        (0.001, ["late"]),
        (29.999, ["late"]),  # deadline + grace/2: still late
        (0.001, ["late", "stalled"]),
        (29.999, ["late", "stalled"]),  # deadline + grace: still stalled
        (0.001, ["late", "stalled", "lost"]),
    ]
    for seconds, expected in steps:
        clock.advance(seconds)
        ops_jobs.leases_sweep()
        assert kinds(attempt_id) == expected
    late, stalled, lost = Event.objects.filter(attempt_id=attempt_id).exclude(kind="claimed")
    deadline = frozen_clock + timedelta(seconds=100)
    assert (late.actor, late.hand, late.fence) == ("system", "hand-a", 1)
    assert late.data["since"] == deadline.isoformat()
    assert stalled.data["since"] == (deadline + timedelta(seconds=30)).isoformat()
    assert lost.at == frozen_clock + timedelta(seconds=160.001)
    attempt = Attempt.objects.get(pk=attempt_id)
    assert (attempt.end, attempt.end_reason) == ("lost", "no heartbeat within grace")
    lease = Lease.objects.get(pk=attempt.lease_id)
    assert (lease.noticed_state, lease.next_check_at) == ("lost", None)
    assert [s.state for s in run_slots(run=run)] == ["open", "open"]


def test_it_records_each_transition_once_however_often_it_runs(
    owner, run, claim, frozen_clock: datetime
) -> None:
    view = claim(owner, run)
    for _ in range(4):
        clock.advance(50)
        for _ in range(3):
            ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == ["late", "stalled", "lost"]
    assert ops_jobs.leases_sweep().processed == 0


def test_a_sweep_that_ran_late_still_records_every_state_in_order(
    owner, run, claim, frozen_clock: datetime
) -> None:
    view = claim(owner, run)
    clock.advance(500)
    result = ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == ["late", "stalled", "lost"]
    assert (result.processed, result.events, result.lost) == (1, 3, 1)
    assert result.lag_s == pytest.approx(400)


def test_a_late_hand_that_reports_is_live_and_its_next_silence_is_recorded_again(
    owner, run, claim, frozen_clock: datetime
) -> None:
    view = claim(owner, run)
    clock.advance(110)
    ops_jobs.leases_sweep()
    renewed, _ = report_services.attempt_report(
        hand=owner, attempt_id=view.attempt.pk, fence=1, kind="heartbeat", process_id="host:1"
    )
    assert renewed
    clock.advance(100)
    ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == ["late"]
    clock.advance(0.001)
    ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == ["late", "late"]
    assert Attempt.objects.get(pk=view.attempt.pk).end is None


def test_a_slot_with_no_grace_goes_from_live_straight_to_lost(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=10, grace_s=0, slots=1)
    view = claim(owner, run)
    clock.advance(10)
    ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == []
    clock.advance(0.001)
    ops_jobs.leases_sweep()
    assert kinds(view.attempt.pk) == ["lost"]


def test_it_frees_an_expired_resource_lease_with_one_lease_expired_event(
    frozen_clock: datetime,
) -> None:
    leases.lease_acquire(
        workspace_id=7, resource="migrations", holder="a", process_id="p", ttl_s=30
    )
    clock.advance(30)
    ops_jobs.leases_sweep()
    assert Lease.objects.get(resource="migrations").status == "held"
    clock.advance(0.001)
    result = ops_jobs.leases_sweep()
    ops_jobs.leases_sweep()
    assert (result.expired, result.events) == (1, 1)
    assert kinds(resource="migrations") == ["lease_expired"]
    expired = Event.objects.get(kind="lease_expired")
    assert (expired.workspace_id, expired.hand, expired.fence, expired.actor) == (
        7,
        "a",
        1,
        "system",
    )
    lease = Lease.objects.get(resource="migrations")
    assert (lease.status, lease.next_check_at, lease.holder, lease.fence) == (
        "free",
        None,
        "a",
        1,
    )
    # The expired holder stays refused; another hand takes it at the next fence.
    with pytest.raises(LeaseLost):
        leases.lease_renew(
            workspace_id=7, resource="migrations", holder="a", fence=1, process_id="p"
        )
    taken = leases.lease_acquire(
        workspace_id=7, resource="migrations", holder="b", process_id="q", ttl_s=30
    )
    assert (taken.holder, taken.fence) == ("b", 2)


def test_a_claim_that_took_a_lost_slot_first_leaves_one_lost_event(
    owner, teammate, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=10, grace_s=10, slots=1)
    first = claim(owner, run)
    clock.advance(25)
    second = claim(teammate, run, "host:2")  # no sweep yet: the slot is open at once
    ops_jobs.leases_sweep()
    assert kinds(first.attempt.pk) == ["lost"]
    assert kinds(second.attempt.pk) == []
    assert Attempt.objects.get(pk=first.attempt.pk).end_reason == "slot reclaimed"


def test_its_work_does_not_grow_with_leases_that_are_not_due(
    owner, run, claim, frozen_clock: datetime, django_assert_num_queries
) -> None:
    ops_jobs.leases_sweep()  # creates the JobRun row, so both rounds below do the same bookkeeping
    claim(owner, run)
    clock.advance(101)
    with CaptureQueriesContext(connection) as first:
        assert ops_jobs.leases_sweep().events == 1  # late
    for i in range(30):
        leases.lease_acquire(
            workspace_id=1, resource=f"quiet/{i}", holder="a", process_id="p", ttl_s=3600
        )
    clock.advance(30)
    with django_assert_num_queries(len(first)):
        assert ops_jobs.leases_sweep().events == 1  # stalled; the 30 live leases are not read
    # The claim's WHERE is served by the partial index (seqscan off: the table is tiny).
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT id FROM leases_lease WHERE status = 'held' "
            "AND next_check_at < now() ORDER BY next_check_at LIMIT 500 FOR UPDATE SKIP LOCKED"
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "lease_due_idx" in plan


def test_it_records_its_runs_for_the_metrics(owner, run, claim, frozen_clock: datetime) -> None:
    claim(owner, run)
    clock.advance(130.5)
    ops_jobs.leases_sweep()
    ops_jobs.leases_sweep()
    row = JobRun.objects.get(name="sweep_leases")
    assert row.runs == 2
    assert (row.last_processed, row.last_failed) == (0, 0)
    assert row.last_finished_at == frozen_clock + timedelta(seconds=130.5)
    assert row.last_duration_s >= 0
