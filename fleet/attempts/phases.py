"""A tenure's phases (live, late, stalled, lost) over time, from the record: what a timeline bar
draws.

The record of a tenure's renewals is its claim, its renewing reports (`Report.renewed`), the
lease's own latest renewal while the lease is still the tenure's, and the deadlines the sweep
recorded passing (its `late` and `stalled` events carry the deadline they passed). The
thresholds are `leases.state.thresholds`, the one definition of late, stalled and lost.

A bare heartbeat is on record at most once a `HEARTBEAT_RECORD_S` (fleet/attempts/reports.py):
after a recorded report the hand may have renewed unrecorded until that long after it, and only
then must the next renewal be on record. So a quiet span that starts at a recorded report is
taken as renewed until the record's resolution runs out (or the next renewal), unless the sweep
recorded a deadline passing inside it, which is exact. Without that, a hand heartbeating every
ten seconds on a 30-second interval would draw late between every minute's record.

    1. The spans: from the claim, and from each recorded renewal, to the next renewal (or the
       bar's end); a span no longer than the interval is live throughout.
    2. In a span, the renewals are its start and each renewal a swept deadline implies
       (`deadline - interval`); the lease's current deadline, while the tenure holds it, is the
       final span's.
    3. Each renewal's deadline gives, by `thresholds`, where live ends and late, stalled and
       lost begin; the next renewal ends the episode (a late hand that reported is live again).
    4. Lost is final: a tenure recorded lost is lost from its threshold or its end, whichever
       came first (a broken lease is lost at the break).
    5. At an instant (`tenure_at`: the run page's replay of the board at a moment), the phase
       holding it (`phase_at`), read as the lease rule reads an instant: the replay and the bar
       are one reading of one record, and cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection

from fleet.attempts.reports import HEARTBEAT_RECORD_S
from fleet.models import Attempt, AttemptEnd, Report, Run
from leases.clock import parse_timestamp, plus_seconds_sql
from leases.engine import LeaseSnapshot
from leases.models import Event, EventKind, LeaseState, LeaseStatus
from leases.state import thresholds

# A renewing report's `at` and the lease's `renewed_at` are read from the clock at two points of
# one statement, microseconds apart: a swept deadline implies a renewal this close before a
# recorded one is that recorded one.
CLOCK_SLACK = timedelta(milliseconds=100)


@dataclass(frozen=True, slots=True)
class Phase:
    state: str  # live | late | stalled | lost
    start: datetime
    end: datetime


@dataclass(frozen=True)
class TenureRecord:
    """What the record holds of one tenure's renewals."""

    claimed_at: datetime
    interval_s: float
    grace_s: float
    # Consecutive renewals (the claim counts as the first) further apart than the interval.
    gaps: Sequence[tuple[datetime, datetime]] = ()
    last_recorded: datetime | None = None  # the latest renewing report
    swept: Sequence[datetime] = ()  # deadlines the sweep recorded passing (late, stalled)
    # The lease's latest renewal and deadline while the lease is still this tenure's.
    lease_renewed_at: datetime | None = None
    lease_deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class Episode:
    """From a renewal to the next (or the bar's end), and the deadline that renewal set."""

    renewal: datetime
    upto: datetime
    deadline: datetime


def _episodes(record: TenureRecord, until: datetime) -> list[Episode]:
    """1 and 2: each renewal the record holds, to the next, with the deadline it set, in order.
    Where renewals no further apart than the interval are not each on record, none."""
    interval = timedelta(seconds=record.interval_s)
    resolution = timedelta(seconds=HEARTBEAT_RECORD_S)
    # 1. The spans (start, next renewal or None, whether the start is a recorded report).
    spans: list[tuple[datetime, datetime | None, bool]] = [
        (start, following, start != record.claimed_at) for start, following in record.gaps
    ]
    final_start = record.last_recorded or record.claimed_at
    spans.append((final_start, None, record.last_recorded is not None))
    episodes: list[Episode] = []
    for start, following, after_report in spans:
        stop = until if following is None else min(following, until)
        if stop <= start:
            continue
        # 2. The renewals in the span: its start, those the swept deadlines imply, and the
        # lease's latest while it is the tenure's.
        implied = {
            max(d - interval, start)
            for d in record.swept
            if start - CLOCK_SLACK <= d - interval
            and (following is None or d - interval < following)
        }
        known = {start, *implied}
        if following is None and record.lease_renewed_at is not None:
            known |= {t for t in (record.lease_renewed_at,) if t > start}
        renewals = sorted(known)
        for i, renewal in enumerate(renewals):
            last = i + 1 == len(renewals)
            upto = stop if last else min(renewals[i + 1], stop)
            if upto <= renewal:
                continue
            if last and following is None and record.lease_deadline is not None:
                deadline = record.lease_deadline  # the lease's own: exact
            elif renewal in implied:
                deadline = renewal + interval
            elif i == 0 and after_report:
                # Renewed unrecorded, at most until the record's resolution ran out.
                deadline = min(renewal + resolution, upto) + interval
            else:
                deadline = renewal + interval
            episodes.append(Episode(renewal, upto, deadline))
    return episodes


def tenure_phases(
    record: TenureRecord, *, until: datetime, end: str | None, ended_at: datetime | None
) -> list[Phase]:
    """The tenure's phases from its claim to `until` (where its bar stops), in order, adjacent,
    equal states merged."""
    return _phases(record, _episodes(record, until), until=until, end=end, ended_at=ended_at)


def _phases(
    record: TenureRecord,
    episodes: list[Episode],
    *,
    until: datetime,
    end: str | None,
    ended_at: datetime | None,
) -> list[Phase]:
    phases = [
        phase
        for episode in episodes
        for phase in _episode(episode.renewal, episode.upto, episode.deadline, record.grace_s)
    ]
    phases = _filled(phases, record.claimed_at, until)
    # 4. Lost is final: a tenure recorded lost is lost from its end at the latest.
    if end == AttemptEnd.LOST and ended_at is not None:
        phases = _lost_from(phases, min(ended_at, until))
    return _merged(phases)


# The states in the order a silent holder passes through them (`leases.state.STEPS`, then lost).
_ORDER = (LeaseState.LIVE, LeaseState.LATE, LeaseState.STALLED, LeaseState.LOST)


def phase_at(phases: Sequence[Phase], at: datetime) -> Phase | None:
    """The phase holding the instant `at`, as `leases.state.lease_state` reads an instant: a
    threshold belongs to the state before it (live until and at the deadline, late until and at
    `deadline + grace/2`, ...), and a renewal to the live phase it begins. So where two phases
    meet, the milder of the two. None outside the phases."""
    holding = [p for p in phases if p.start <= at <= p.end]
    return min(holding, key=lambda p: _ORDER.index(LeaseState(p.state)), default=None)


@dataclass(frozen=True, slots=True)
class TenureAt:
    """A tenure at an instant, as its bar draws it there."""

    state: str  # live | late | stalled | lost
    # The deadline the renewal in force then set; None where the record does not hold that
    # renewal (renewals no further apart than the interval, a bare heartbeat on record once a
    # `HEARTBEAT_RECORD_S`: the holder was live, its deadline not on record).
    deadline: datetime | None


def tenure_at(
    record: TenureRecord,
    at: datetime,
    *,
    until: datetime,
    end: str | None,
    ended_at: datetime | None,
) -> TenureAt:
    """The tenure's state at `at` (from its claim to `until`, where its bar stops): the phase of
    `tenure_phases` holding `at` (`phase_at`), so that a replay of the record at any instant and
    the bar drawn from it never disagree."""
    until = max(until, at)
    episodes = _episodes(record, until)
    phase = phase_at(_phases(record, episodes, until=until, end=end, ended_at=ended_at), at)
    # The renewal in force: the latest begun by then (a renewal at `at` is in force at `at`).
    current = [e for e in episodes if e.renewal <= at <= e.upto]
    deadline = max(current, key=lambda e: e.renewal).deadline if current else None
    # No phase only at the claim's own instant, when the bar has no length yet: live.
    return TenureAt(phase.state if phase else str(LeaseState.LIVE), deadline)


def _filled(phases: list[Phase], start: datetime, until: datetime) -> list[Phase]:
    """Live wherever no span said otherwise: renewals no further apart than the interval."""
    out: list[Phase] = []
    cursor = start
    for phase in sorted(phases, key=lambda p: p.start):
        if phase.start > cursor:
            out.append(Phase(str(LeaseState.LIVE), cursor, phase.start))
        out.append(phase)
        cursor = max(cursor, phase.end)
    if until > cursor:
        out.append(Phase(str(LeaseState.LIVE), cursor, until))
    return out


def _episode(renewal: datetime, upto: datetime, deadline: datetime, grace_s: float) -> list[Phase]:
    """3. From a renewal to the next (or the bar's end): live to the deadline, then each state
    in turn at the instants `thresholds` gives."""
    limits = thresholds(deadline, grace_s)
    steps = [
        (LeaseState.LIVE, renewal, deadline),
        (LeaseState.LATE, limits.late_at, limits.stalled_at),
        (LeaseState.STALLED, limits.stalled_at, limits.lost_at),
        (LeaseState.LOST, limits.lost_at, upto),
    ]
    return [
        Phase(str(state), max(start, renewal), min(stop, upto))
        for state, start, stop in steps
        if min(stop, upto) > max(start, renewal)
    ]


def _lost_from(phases: list[Phase], at: datetime) -> list[Phase]:
    out = [Phase(p.state, p.start, min(p.end, at)) for p in phases if p.start < at]
    tail = max((p.end for p in phases), default=at)
    if tail > at:
        out.append(Phase(str(LeaseState.LOST), at, tail))
    return out


def _merged(phases: list[Phase]) -> list[Phase]:
    out: list[Phase] = []
    for phase in sorted(phases, key=lambda p: p.start):
        if out and out[-1].state == phase.state and out[-1].end >= phase.start:
            out[-1] = Phase(phase.state, out[-1].start, max(out[-1].end, phase.end))
        else:
            out.append(phase)
    return out


# --- Reading the record ---------------------------------------------------------------------------


def _gaps_sql() -> str:
    """Each attempt's renewing reports with the renewal before them (the claim before the
    first), kept where the two are further apart than the run's interval (the lease's, copied
    at the claim), and the latest: one scan of `report_attempt_idx` per attempt, whatever the
    number of reports, returning only what a bar needs."""
    reports, attempts, runs = Report._meta.db_table, Attempt._meta.db_table, Run._meta.db_table
    longer = f"s.at > {plus_seconds_sql('s.prev', 's.interval_s')}"
    return (
        "SELECT s.attempt_id, s.prev, s.at, s.latest FROM ("
        "SELECT r.attempt_id, r.at, ru.heartbeat_interval_s AS interval_s, "
        "lag(r.at, 1, a.claimed_at) OVER w AS prev, "
        "lead(r.at) OVER w IS NULL AS latest "
        f"FROM {reports} r JOIN {attempts} a ON a.id = r.attempt_id "
        f"JOIN {runs} ru ON ru.id = a.run_id "
        "WHERE r.attempt_id = ANY(%(ids)s) AND r.workspace_id = %(workspace_id)s AND r.renewed "
        f"WINDOW w AS (PARTITION BY r.attempt_id ORDER BY r.at, r.id)) s "
        f"WHERE {longer} OR s.latest "
        "ORDER BY s.attempt_id, s.at"
    )


def tenure_records(attempts: Iterable[Attempt], now: datetime) -> dict[int, TenureRecord]:
    """The record of each attempt's renewals (attempts loaded with their run and lease).

    Two queries whatever the attempts and their reports: the renewal gaps and latest renewals
    (`_gaps_sql`), and the sweep's late and stalled events of these attempts."""
    attempts = list(attempts)
    if not attempts:
        return {}
    workspace_id = attempts[0].workspace_id
    ids = [a.pk for a in attempts]
    gaps: dict[int, list[tuple[datetime, datetime]]] = {}
    latest: dict[int, datetime] = {}
    intervals = {a.pk: timedelta(seconds=a.run.heartbeat_interval_s) for a in attempts}
    with connection.cursor() as cursor:
        cursor.execute(_gaps_sql(), {"ids": ids, "workspace_id": workspace_id})
        for attempt_id, prev, at, is_latest in cursor.fetchall():
            prev, at = parse_timestamp(prev), parse_timestamp(at)
            assert prev is not None and at is not None
            if at - prev > intervals[attempt_id]:  # the latest is kept even when it is not
                gaps.setdefault(attempt_id, []).append((prev, at))
            if is_latest:
                latest[attempt_id] = at
    swept: dict[int, set[datetime]] = {}
    earliest = min(a.claimed_at for a in attempts)
    events = Event.objects.filter(
        workspace_id=workspace_id,
        kind__in=[EventKind.LATE, EventKind.STALLED],
        attempt_id__in=ids,
        at__gte=earliest,
    ).values_list("attempt_id", "data")
    for attempt_id, data in events:
        deadline = parse_timestamp((data or {}).get("deadline"))
        if deadline is not None:
            swept.setdefault(attempt_id, set()).add(deadline)
    records = {}
    for attempt in attempts:
        lease = LeaseSnapshot.from_model(attempt.lease, now)
        current = lease.fence == attempt.fence
        interval = lease.interval_s if current else attempt.run.heartbeat_interval_s
        grace = lease.grace_s if current else attempt.run.grace_s
        renewed_at = lease.renewed_at if current and lease.renewed_at else None
        deadline = None
        if current and attempt.end is None and lease.status == LeaseStatus.HELD:
            deadline = lease.deadline
        elif renewed_at is not None:
            deadline = renewed_at + timedelta(seconds=interval)
        records[attempt.pk] = TenureRecord(
            claimed_at=attempt.claimed_at,
            interval_s=interval,
            grace_s=grace,
            gaps=gaps.get(attempt.pk, ()),
            last_recorded=latest.get(attempt.pk),
            swept=sorted(swept.get(attempt.pk, ())),
            lease_renewed_at=renewed_at,
            lease_deadline=deadline,
        )
    return records
