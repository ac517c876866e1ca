"""Idle: a hand that keeps its lease live but reports no progress (issue 22, part 3), computed
on read from stored timestamps by one rule, written once:

    idle   the tenure is live (fleet.attempts.selectors.tenure_state), the attempt has a
           progress timeout (the run's progress_timeout_s, copied at the claim), and
           now > COALESCE(last_progress_at, claimed_at) + progress_timeout_s

"Progress" is every report that is not a bare heartbeat (fleet.attempts.reports
is_bare_heartbeat): a progress, blocker or note report, or a heartbeat with a message, a percent
or details. A late, stalled or lost hand is not idle: it is missing, which its state says.

Each form is built from `PROGRESS_SINCE` and the bound: Python (`is_idle`, `idle_at`) for answers
and pages, SQL text (`idle_sql`) for the sweep, an ORM filter (`idle_q`) for lists and counts.
`tests/attempts/test_idle_parity.py` runs one table of boundary cases through every form.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.db.models.lookups import GreaterThan

from leases.clock import plus_seconds_sql
from leases.models import LeaseState
from leases.state import PlusSeconds, state_q

# The instant progress was last seen: the last progress report, else the claim.
PROGRESS_SINCE = ("last_progress_at", "claimed_at")


def idle_at(
    *, progress_timeout_s: int | None, last_progress_at: datetime | None, claimed_at: datetime
) -> datetime | None:
    """The instant after which a live tenure is idle, or None (never)."""
    if progress_timeout_s is None:
        return None
    return (last_progress_at or claimed_at) + timedelta(seconds=progress_timeout_s)


def is_idle(
    *,
    state: str,
    progress_timeout_s: int | None,
    last_progress_at: datetime | None,
    claimed_at: datetime,
    now: datetime,
) -> bool:
    """Whether a tenure in `state` is idle at the database time `now`."""
    bound = idle_at(
        progress_timeout_s=progress_timeout_s,
        last_progress_at=last_progress_at,
        claimed_at=claimed_at,
    )
    return state == LeaseState.LIVE and bound is not None and now > bound


def idle_sql(now: str, *, attempt: str, state: str) -> str:
    """`is_idle` as SQL over the attempt alias `attempt`, whose tenure state is the SQL `state`
    (fleet.attempts.selectors.tenure_state_sql)."""
    since = f"COALESCE({attempt}.{PROGRESS_SINCE[0]}, {attempt}.{PROGRESS_SINCE[1]})"
    bound = plus_seconds_sql(since, f"{attempt}.progress_timeout_s")
    return (
        f"({state} = '{LeaseState.LIVE.value}' AND {attempt}.progress_timeout_s IS NOT NULL "
        f"AND {now} > {bound})"
    )


def idle_q(now: Any, *, lease: str = "lease__") -> Q:
    """Open attempts that are idle at the expression `now`, their lease at `lease`. A tenure is
    live only while the slot's lease is at the attempt's fence."""
    bound = PlusSeconds(Coalesce(*(F(name) for name in PROGRESS_SINCE)), F("progress_timeout_s"))
    return (
        Q(end=None, progress_timeout_s__isnull=False, **{f"{lease}fence": F("fence")})
        & state_q(LeaseState.LIVE, now, prefix=lease)
        & Q(GreaterThan(now, bound))
    )
