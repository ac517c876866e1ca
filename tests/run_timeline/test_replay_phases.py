"""The replay of the board at a moment (`fleet.timeline.run_state_at`) reads each holder's state
from its attempt bar (`fleet.attempts.phases`, as the run page draws it): for a recorded history
of claims, a late gap that recovered, a lost tenure, a reclaim, heartbeats on record once a
minute and a finish, the two agree at every phase boundary, a microsecond either side, and every
few seconds between; and a replay costs the same queries however long the run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard import pages
from dashboard.charts import Bar
from dashboard.views.work import _bars
from evidence.services import attempt_finish
from fleet import timeline
from fleet.attempts import reports as report_services
from fleet.attempts.reports import HEARTBEAT_RECORD_S
from fleet.models import Attempt, Run
from hands.models import Hand
from leases import clock
from ops import jobs as ops_jobs
from tests.run_timeline.conftest import Story, acquire
from tests.support.api import report

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

INTERVAL, GRACE = 100, 60  # late after 100 s, stalled after 130 s, lost after 160 s
TICK = timedelta(microseconds=1)
# How the replay names the state of a slot whose holder's tenure ended.
ENDED = {"finished": "done", "lost": "lost"}


@dataclass
class History:
    run: Run
    start: datetime  # hand-a's claim
    lost: Attempt  # hand-a's
    reclaimed: Attempt  # hand-b's

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


def beat(hand: Hand, attempt: Attempt, **said: object) -> None:
    report_services.attempt_report(
        hand=hand,
        attempt_id=attempt.pk,
        fence=attempt.fence,
        kind=str(said.pop("kind", "heartbeat")),
        process_id=attempt.process_id,
        **said,
    )


@pytest.fixture
def history(owner: Hand, teammate: Hand, make_run, claim, frozen_clock) -> History:  # noqa: ANN001
    """One slot. hand-a claims at 0 and beats at 10 (on record), then falls silent: late past 110,
    which the sweep records at 120; it reports at 130 and is live again; then silent for good:
    late past 230, stalled past 260, lost past 290, swept lost at 300. hand-b reclaims the slot
    at 310 and sends a bare heartbeat every 55 s (on record at 365 and 475, the one at 420 not:
    a bare heartbeat is recorded once a minute), then finishes at 490. Now is 510."""
    run = make_run(
        heartbeat_interval_s=INTERVAL,
        grace_s=GRACE,
        slots=1,
        evidence_required=["pull_request"],
    )
    lost = claim(owner, run, "host-a:1").attempt
    clock.advance(10)
    beat(owner, lost)
    clock.advance(110)
    ops_jobs.leases_sweep()  # late, since 110
    clock.advance(10)
    beat(owner, lost, kind="note", message="back")
    for seconds in (110, 30, 30):  # late since 230, stalled since 260, lost since 290
        clock.advance(seconds)
        ops_jobs.leases_sweep()
    clock.advance(10)
    reclaimed = claim(teammate, run, "host-b:1").attempt
    for _ in range(3):
        clock.advance(55)
        beat(teammate, reclaimed)
    clock.advance(15)
    attempt_finish(
        hand=teammate,
        attempt_id=reclaimed.pk,
        fence=reclaimed.fence,
        process_id="host-b:1",
        evidence=[{"kind": "pull_request", "url": "https://example.com/pr/1"}],
    )
    clock.advance(20)
    run.refresh_from_db()
    return History(run=run, start=frozen_clock, lost=lost, reclaimed=reclaimed)


def bars(history: History) -> dict[int, Bar]:
    """The run page's attempt bars, by attempt."""
    page = pages.run_page(workspace_id=history.run.workspace_id, run_id=history.run.pk)
    drawn = _bars(page.rows, now=page.now, label=lambda row: str(row.attempt.pk), href=str)
    return {int(bar.label): bar for bar in drawn}


def drawn_state(bars: list[Bar], t: datetime) -> str:
    """What the bars say of the slot at `t`: nothing before the first claim (free); from a
    claim, that bar's phase holding `t`, where two phases meet the one the lease rule reads at
    that instant (a renewal is live at its instant, a threshold is passed only after it); from
    the bar's end, how its tenure ended."""
    begun = [bar for bar in bars if bar.start <= t]
    if not begun:
        return "free"
    bar = max(begun, key=lambda b: b.start)
    if bar.end is not None and t >= bar.end:
        return ENDED.get(bar.state, "free")
    holding = sorted((p for p in bar.phases if p[1] <= t <= p[2]), key=lambda p: p[1])
    if len(holding) == 1:
        return holding[0][0]
    before, after = holding
    return after[0] if after[0] == "live" else before[0]


def replayed(history: History, t: datetime) -> timeline.SlotAt:
    state = timeline.run_state_at(timeline.timeline_scope(history.run), t)
    assert state.at == t
    (slot,) = state.slots
    return slot


def seconds(history: History, phases: list[tuple[str, datetime, datetime]]) -> list[tuple]:
    return [
        (state, (start - history.start).total_seconds(), (end - history.start).total_seconds())
        for state, start, end in phases
    ]


def test_the_bars_draw_the_history_as_the_record_holds_it(history: History) -> None:
    drawn = bars(history)
    assert seconds(history, list(drawn[history.lost.pk].phases)) == [
        ("live", 0, 110),
        ("late", 110, 130),
        ("live", 130, 230),
        ("late", 230, 260),
        ("stalled", 260, 290),
        ("lost", 290, 300),
    ]
    # The heartbeat at 420 is not on record, so the recorded ones are 110 s apart; the bar
    # takes the hand as renewed unrecorded for the record's resolution, and draws it live.
    assert seconds(history, list(drawn[history.reclaimed.pk].phases)) == [("live", 310, 490)]


def test_the_replay_reads_each_holders_state_from_its_bar_at_every_boundary(
    history: History,
) -> None:
    drawn = list(bars(history).values())
    boundaries = sorted({instant for bar in drawn for _, *span in bar.phases for instant in span})
    assert len(boundaries) == 9
    moments = [b + step for b in boundaries for step in (-TICK, timedelta(0), TICK)]
    # And every five seconds from before the first claim to now.
    moments += [history.at(s) for s in range(-5, 515, 5)]
    disagreements = []
    for moment in sorted(set(moments)):
        expected, got = drawn_state(drawn, moment), replayed(history, moment).state
        if got != expected:
            disagreements.append(((moment - history.start).total_seconds(), expected, got))
    assert disagreements == []


def test_the_replay_names_the_holder_and_the_deadline_the_record_holds(history: History) -> None:
    # hand-a at the claim: live, its first renewals (the beat at 10, then a gap) on record.
    slot = replayed(history, history.at(0))
    assert (slot.state, slot.hand, slot.tenure.attempt) == ("live", "hand-a", history.lost.pk)
    # Between the beat at 10 and the report at 130, the beat's deadline (the sweep passed it).
    assert replayed(history, history.at(50)).deadline == history.at(110)
    assert replayed(history, history.at(120)).deadline == history.at(110)
    # The report at 130 renews at its instant.
    slot = replayed(history, history.at(130))
    assert (slot.state, slot.deadline) == ("live", history.at(230))
    assert replayed(history, history.at(300) - TICK).state == "lost"
    slot = replayed(history, history.at(300))
    assert (slot.state, slot.hand, slot.deadline) == ("lost", "hand-a", None)
    # hand-b from the reclaim; live where its recorded heartbeats are further apart than the
    # interval, a microsecond after the deadline the earlier one set.
    slot = replayed(history, history.at(310))
    assert (slot.state, slot.hand, slot.tenure.attempt) == ("live", "hand-b", history.reclaimed.pk)
    recorded = history.at(365)
    slot = replayed(history, recorded + timedelta(seconds=INTERVAL) + TICK)
    assert slot.state == "live"
    assert slot.deadline == recorded + timedelta(seconds=HEARTBEAT_RECORD_S + INTERVAL)
    assert replayed(history, history.at(490)).state == "done"


def test_a_replay_costs_the_same_queries_however_long_the_run(story: Story) -> None:
    # The holders still holding with their slot leases, their record (renewal gaps, the sweep's
    # events), their last reports, the leases taken under the run.
    def queries() -> int:
        scope = timeline.timeline_scope(story.run)
        now = clock.db_now()
        with CaptureQueriesContext(connection) as captured:
            state = timeline.run_state_at(scope, now, now=now)
        assert state.slots[1].state == "live"
        return len(captured.captured_queries)

    small = queries()
    for n in range(20):
        report(story.a, story.attempts["a2"], process="host-a:3", kind="note", message=f"n{n}")
        acquire(story.a, f"src/many/{n}.py", "host-a:3")
        clock.advance(61)
    big = queries()
    assert small == big == 5
