"""A tenure's phases come from the record: its claim, its renewing reports, the lease's interval
and grace, the sweep's late and stalled events, and `leases.state`'s one definition of late,
stalled and lost. The database clock is frozen and moved to each boundary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.attempts.phases import Phase, TenureRecord, tenure_phases, tenure_records
from fleet.attempts.reports import HEARTBEAT_RECORD_S
from fleet.models import Attempt
from leases import clock
from leases.clock import db_now
from ops import jobs as ops_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

INTERVAL, GRACE = 100, 60  # late after 100 s, stalled after 130 s, lost after 160 s


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(heartbeat_interval_s=INTERVAL, grace_s=GRACE, slots=1)


def at(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)


def phases_now(attempt_id: int) -> list[tuple[str, float, float]]:
    """The attempt's phases as the pages draw them, in seconds from its claim."""
    now = db_now()
    attempt = Attempt.objects.select_related("lease", "run").get(pk=attempt_id)
    record = tenure_records([attempt], now)[attempt.pk]
    until = attempt.ended_at or now
    drawn = tenure_phases(record, until=until, end=attempt.end, ended_at=attempt.ended_at)
    start = attempt.claimed_at
    return [
        (p.state, (p.start - start).total_seconds(), (p.end - start).total_seconds()) for p in drawn
    ]


def beat(owner, attempt_id: int, **said: object) -> None:  # noqa: ANN001
    report_services.attempt_report(
        hand=owner,
        attempt_id=attempt_id,
        fence=1,
        kind=str(said.pop("kind", "heartbeat")),
        process_id="host:1",
        **said,
    )


def test_an_open_tenure_turns_late_stalled_and_lost_at_each_exact_boundary(
    owner, run, claim, frozen_clock
):
    attempt_id = claim(owner, run).attempt.pk
    steps = [
        (100, [("live", 0, 100)]),  # at the deadline: still live
        (0.5, [("live", 0, 100), ("late", 100, 100.5)]),
        (29.5, [("live", 0, 100), ("late", 100, 130)]),  # deadline + grace/2: still late
        (0.5, [("live", 0, 100), ("late", 100, 130), ("stalled", 130, 130.5)]),
        (29.5, [("live", 0, 100), ("late", 100, 130), ("stalled", 130, 160)]),
        (5, [("live", 0, 100), ("late", 100, 130), ("stalled", 130, 160), ("lost", 160, 165)]),
    ]
    for seconds, expected in steps:
        clock.advance(seconds)
        assert phases_now(attempt_id) == expected, seconds


def test_a_lost_attempt_is_live_late_stalled_then_lost_where_the_record_says(
    owner, run, claim, frozen_clock
):
    attempt_id = claim(owner, run).attempt.pk
    clock.advance(50)
    beat(owner, attempt_id, kind="progress", message="halfway", percent=50)
    clock.advance(250)  # silent: late at 150, stalled at 180, lost at 210; swept at 300
    ops_jobs.leases_sweep()
    attempt = Attempt.objects.get(pk=attempt_id)
    assert attempt.end == "lost" and attempt.ended_at == at(frozen_clock, 300)
    assert phases_now(attempt_id) == [
        ("live", 0, 150),
        ("late", 150, 180),
        ("stalled", 180, 210),
        ("lost", 210, 300),
    ]


def test_a_late_tenure_that_reported_shows_late_only_for_that_gap(owner, run, claim, frozen_clock):
    attempt_id = claim(owner, run).attempt.pk
    clock.advance(10)
    beat(owner, attempt_id)  # on record
    clock.advance(110)  # the deadline was 110: late since
    ops_jobs.leases_sweep()  # the sweep records it late, with the deadline it passed
    clock.advance(30)
    beat(owner, attempt_id, kind="note", message="back")  # live again at 150
    clock.advance(40)
    assert phases_now(attempt_id) == [
        ("live", 0, 110),
        ("late", 110, 140),
        ("stalled", 140, 150),
        ("live", 150, 190),
    ]


def test_a_gap_within_the_records_resolution_is_taken_as_renewed_unrecorded(
    owner, make_run, claim, frozen_clock
):
    """A bare heartbeat is on record once a minute, so a recorded one followed by silence may
    have renewed unrecorded for a minute: with no sweep to say otherwise, the gap is late only
    from the last deadline those renewals could have reached."""
    run = make_run(heartbeat_interval_s=INTERVAL, grace_s=120, slots=1)  # lost only after 230
    attempt_id = claim(owner, run).attempt.pk
    clock.advance(10)
    beat(owner, attempt_id)  # on record
    clock.advance(180)
    beat(owner, attempt_id, kind="note", message="back")  # at 190, nothing swept meanwhile
    clock.advance(10)
    latest = 10 + HEARTBEAT_RECORD_S + INTERVAL
    assert phases_now(attempt_id) == [
        ("live", 0, latest),
        ("late", latest, 190),
        ("live", 190, 200),
    ]


def test_heartbeats_within_the_interval_but_recorded_once_a_minute_draw_live(
    owner, make_run, claim, frozen_clock
):
    run = make_run(heartbeat_interval_s=30, grace_s=60, slots=1)
    attempt_id = claim(owner, run).attempt.pk
    for _ in range(30):  # five minutes of a heartbeat every 10 s on a 30 s interval
        clock.advance(10)
        beat(owner, attempt_id)
    assert phases_now(attempt_id) == [("live", 0, 300)]


def test_a_tenure_that_finished_late_is_capped_by_its_end(owner, one_slot, claim, frozen_clock):
    attempt_id = claim(owner, one_slot).attempt.pk
    clock.advance(120)  # late since 100
    attempt_finish(
        hand=owner,
        attempt_id=attempt_id,
        fence=1,
        process_id="host:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/1"}],
    )
    clock.advance(60)
    assert phases_now(attempt_id) == [("live", 0, 100), ("late", 100, 120)]


def test_a_broken_lease_is_lost_at_the_break(owner, run, claim, frozen_clock):
    view = claim(owner, run)
    clock.advance(40)
    attempt_services.lease_break(
        workspace_id=view.attempt.workspace_id,
        resource=view.lease.resource,
        actor="ada",
        reason="stuck",
    )
    clock.advance(60)
    assert phases_now(view.attempt.pk) == [("live", 0, 40)]
    assert Attempt.objects.get(pk=view.attempt.pk).end == "lost"


def test_a_lease_without_grace_goes_from_live_to_lost():
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    record = TenureRecord(claimed_at=start, interval_s=10, grace_s=0)
    drawn = tenure_phases(record, until=at(start, 25), end=None, ended_at=None)
    assert drawn == [
        Phase("live", start, at(start, 10)),
        Phase("lost", at(start, 10), at(start, 25)),
    ]


def test_the_record_costs_two_queries_whatever_the_attempts_and_reports(
    owner, make_run, claim, frozen_clock, django_assert_num_queries
):
    attempts = []
    for _ in range(5):
        run = make_run(heartbeat_interval_s=INTERVAL, grace_s=GRACE, slots=1)
        attempt_id = claim(owner, run).attempt.pk
        for _ in range(4):
            clock.advance(61)
            beat(owner, attempt_id)
        attempts.append(attempt_id)
    loaded = list(Attempt.objects.select_related("lease", "run").filter(pk__in=attempts))
    now = db_now()
    with django_assert_num_queries(2):  # the renewals' gaps, the sweep's events
        records = tenure_records(loaded, now)
    assert len(records) == 5
    assert records[attempts[-1]].last_recorded == now
