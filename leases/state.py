"""A lease's state, computed from its timestamps (DESIGN "The lease")."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import NamedTuple

from leases.models import LeaseState, LeaseStatus


class Thresholds(NamedTuple):  # a tuple: built on every answer, at a fifth of a dataclass's cost
    late_at: datetime  # after this instant the holder is late
    stalled_at: datetime
    lost_at: datetime


def thresholds(deadline: datetime, grace_s: float) -> Thresholds:
    half, whole = _grace_steps(grace_s)
    return Thresholds(deadline, deadline + half, deadline + whole)


@functools.lru_cache(maxsize=256)
def _grace_steps(grace_s: float) -> tuple[timedelta, timedelta]:
    """Half the grace and all of it: a fleet's runs share a few graces, and every heartbeat's
    answer needs both."""
    return timedelta(seconds=grace_s / 2), timedelta(seconds=grace_s)


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
    if now <= deadline:  # late_at is the deadline: a renewal's answer needs no more
        return LeaseState.LIVE
    t = thresholds(deadline, grace_s)
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
