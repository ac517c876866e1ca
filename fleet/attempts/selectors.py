"""Reads of attempts: each with its computed state (`tenure_state`, in Python, the ORM and SQL),
one or a list of them.

State is computed on read from the lease's timestamps and the database's time (DESIGN rule 3);
each selector asks the database for the time once, however many rows it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Case, CharField, F, Q, QuerySet, Value, When

from apikit.errors import NotFound
from fleet.attempts.idle import idle_q
from fleet.models import Attempt, AttemptEnd, Run
from leases.clock import db_now, now_expression
from leases.engine import LeaseSnapshot
from leases.models import LeaseState
from leases.state import lease_state, state_expression, state_q, state_sql

ATTEMPT_STATES = ["live", "late", "stalled", "lost", "finished", "released"]


def last_report_at(attempt: Attempt, lease: LeaseSnapshot) -> datetime | None:
    """When the hand last reported: the attempt's record, or the slot lease's latest renewal in
    the attempt's tenure (a bare heartbeat renews without a record up to a minute)."""
    return latest_report_at(
        attempt.last_report_at, attempt.fence, lease.fence, lease.renewed_at, lease.acquired_at
    )


def latest_report_at(
    recorded: datetime | None,
    fence: int,
    lease_fence: int,
    renewed_at: datetime | None,
    acquired_at: datetime | None,
) -> datetime | None:
    """`last_report_at` from the values themselves (the hot path has no objects to give)."""
    if lease_fence != fence or renewed_at is None or acquired_at is None:
        return recorded
    renewed = renewed_at if renewed_at > acquired_at else None
    if recorded is None or (renewed is not None and renewed > recorded):
        return renewed
    return recorded


@dataclass(frozen=True, slots=True)
class Named:
    """A related row as far as an attempt's answer names it: a hand's `name`, a slot's `index`,
    a lane's `slug`."""

    name: str = ""
    index: int = 0
    slug: str = ""


@dataclass(slots=True)
class ReportedAttempt:
    """An attempt as a renewing report's row gives it (`fleet.attempts.reports.report_view`): the
    model's columns as plain attributes, its hand, slot and lane as far as the answer names
    them. Building model instances instead took a quarter of a heartbeat's Python time."""

    id: int
    workspace_id: int
    run_id: int
    slot_id: int
    hand_id: int
    lane_id: int
    lease_id: int
    fence: int
    process_id: str
    directive: str
    claimed_at: datetime
    last_report_at: datetime | None
    ended_at: datetime | None
    end: str | None
    end_reason: str
    summary: str
    progress_percent: float | None
    progress_timeout_s: int | None
    last_progress_at: datetime | None
    idle_since: datetime | None
    budget_notice: Any
    budget_until: datetime | None
    hand: Named
    slot: Named
    lane: Named

    @property
    def pk(self) -> int:
        return self.id

    @property
    def run(self) -> Run:
        # Read only for an answer about a tenure other than the one just renewed.
        return Run.objects.get(workspace_id=self.workspace_id, pk=self.run_id)


@dataclass(frozen=True)
class AttemptView:
    """An attempt with the lease of its slot, as of `lease.server_time`."""

    attempt: Attempt | ReportedAttempt
    lease: LeaseSnapshot

    @property
    def state(self) -> str:
        return attempt_state(self.attempt, self.lease)

    @property
    def server_time(self) -> datetime:
        return self.lease.server_time


def attempt_state(attempt: Attempt, lease: LeaseSnapshot) -> str:
    """finished | released | lost (sticky), else live | late | stalled | lost from the lease.

    A tenure whose lease has moved on (broken, or taken after it was lost) is lost even before
    any sweep has recorded it.
    """
    return tenure_state(
        attempt.end,
        attempt.fence,
        lease.fence,
        status=lease.status,
        deadline=lease.deadline,
        grace_s=lease.grace_s,
        now=lease.server_time,
    )


def tenure_state(
    end: str | None,
    fence: int,
    lease_fence: int,
    *,
    status: str,
    deadline: datetime | None,
    grace_s: float,
    now: datetime,
) -> str:
    """`attempt_state` from the values themselves (the hot path has no objects to give)."""
    if end:
        return str(end)
    if lease_fence != fence:
        return AttemptEnd.LOST
    state = lease_state(status=status, deadline=deadline, grace_s=grace_s, now=now)
    if state == LeaseState.FREE:
        return AttemptEnd.LOST
    return str(state)


def attempt_views(attempts: list[Attempt], now: datetime | None = None) -> list[AttemptView]:
    """Views for attempts loaded with `select_related("lease")`."""
    now = now or db_now()
    return [AttemptView(a, LeaseSnapshot.from_model(a.lease, now)) for a in attempts]


def attempts_base() -> QuerySet[Attempt]:
    return Attempt.objects.select_related(
        "lease", "hand", "run", "run__work_package", "lane", "slot"
    )


def attempt_get(*, workspace_id: int, attempt_id: int, lane_id: int | None = None) -> Attempt:
    """One attempt of the workspace (and lane, for a lane-limited key), or not_found."""
    try:
        return attempts_base().in_lane(lane_id).get(pk=attempt_id, workspace_id=workspace_id)
    except (Attempt.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"no attempt {attempt_id}") from None


def attempt_view(attempt: Attempt) -> AttemptView:
    return attempt_views([attempt])[0]


# --- The tenure's state (`tenure_state`), as ORM and SQL ------------------------------------------
# An attempt's state is its end once it ended; lost once its slot's lease moved on (broken, or
# taken after it was lost) or stopped being held; else its lease's state. Lost is final.


def _moved_on() -> Q:
    return ~Q(lease__fence=F("fence"))


def tenure_state_expression(now: Any) -> Case:
    """`tenure_state` for attempts joined to their lease, at the expression `now`."""
    return Case(
        When(end__isnull=False, then=F("end")),
        When(_moved_on(), then=Value(AttemptEnd.LOST.value)),
        When(state_q(LeaseState.FREE, now, prefix="lease__"), then=Value(AttemptEnd.LOST.value)),
        default=state_expression(now, prefix="lease__"),
        output_field=CharField(),
    )


def tenure_state_q(state: str, now: Any) -> Q:
    """Attempts in `state` (one of ATTEMPT_STATES) at the expression `now`."""
    if state in (AttemptEnd.FINISHED, AttemptEnd.RELEASED):
        return Q(end=state)
    open_tenure = Q(end=None) & ~_moved_on()
    if state == AttemptEnd.LOST:
        lost_or_free = state_q(LeaseState.LOST, now, prefix="lease__") | state_q(
            LeaseState.FREE, now, prefix="lease__"
        )
        return Q(end=AttemptEnd.LOST) | (Q(end=None) & _moved_on()) | (open_tenure & lost_or_free)
    return open_tenure & state_q(state, now, prefix="lease__")


def tenure_state_sql(now: str, *, attempt: str, lease: str) -> str:
    """`tenure_state` as SQL over the aliases of an attempt and its lease."""
    lease_state_text = state_sql(
        now, status=f"{lease}.status", deadline=f"{lease}.deadline", grace=f"{lease}.grace_s"
    )
    end = f'{attempt}."end"'
    return (
        f"CASE WHEN {end} IS NOT NULL THEN {end} "
        f"WHEN {lease}.fence <> {attempt}.fence THEN '{AttemptEnd.LOST.value}' "
        f"ELSE COALESCE(NULLIF({lease_state_text}, '{LeaseState.FREE.value}'), "
        f"'{AttemptEnd.LOST.value}') END"
    )


def attempts_list(
    *,
    workspace_id: int,
    state: str = "",
    lane_slug: str = "",
    hand_name: str = "",
    run_id: int | None = None,
    lane_id: int | None = None,
    idle: bool | None = None,
) -> QuerySet[Attempt]:
    """Attempts of the workspace; `state` as `attempt_state` computes it, in SQL; `idle` as
    fleet/attempts/idle.py does."""
    attempts = attempts_base().filter(workspace_id=workspace_id).in_lane(lane_id)
    if lane_slug:
        attempts = attempts.filter(lane__slug=lane_slug)
    if hand_name:
        attempts = attempts.filter(hand__name=hand_name)
    if run_id is not None:
        attempts = attempts.filter(run_id=run_id)
    if state:
        attempts = attempts.filter(tenure_state_q(state, now_expression()))
    if idle is not None:
        q = idle_q(now_expression())
        attempts = attempts.filter(q if idle else ~q)
    return attempts
