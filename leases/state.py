"""A lease's state, computed from its timestamps (DESIGN "The lease")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from leases.models import LeaseState, LeaseStatus


@dataclass(frozen=True)
class Thresholds:
    late_at: datetime  # after this instant the holder is late
    stalled_at: datetime
    lost_at: datetime


def thresholds(deadline: datetime, grace_s: float) -> Thresholds:
    return Thresholds(
        late_at=deadline,
        stalled_at=deadline + timedelta(seconds=grace_s / 2),
        lost_at=deadline + timedelta(seconds=grace_s),
    )


def lease_state(
    *, status: str, deadline: datetime | None, grace_s: float, now: datetime
) -> LeaseState:
    """live | late | stalled | lost for a held lease; free otherwise.

    live     now <= deadline
    late     deadline < now <= deadline + grace/2
    stalled  deadline + grace/2 < now <= deadline + grace
    lost     now > deadline + grace      (grace 0 goes straight from live to lost)
    """
    if status != LeaseStatus.HELD or deadline is None:
        return LeaseState.FREE
    t = thresholds(deadline, grace_s)
    if now <= t.late_at:
        return LeaseState.LIVE
    if now <= t.stalled_at and grace_s > 0:
        return LeaseState.LATE
    if now <= t.lost_at:
        return LeaseState.STALLED
    return LeaseState.LOST


def next_threshold(*, deadline: datetime, grace_s: float, now: datetime) -> datetime | None:
    """The next instant at which the state changes, or None once lost."""
    t = thresholds(deadline, grace_s)
    for instant in (t.late_at, t.stalled_at, t.lost_at):
        if now <= instant and (instant != t.stalled_at or grace_s > 0):
            return instant
    return None


def seconds_until(instant: datetime | None, now: datetime) -> float | None:
    if instant is None:
        return None
    return round((instant - now).total_seconds(), 3)
