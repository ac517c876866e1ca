"""Reads of the fleet: attempts with their computed state, runs with their slots.

State is computed on read from the lease's timestamps and the database's time (DESIGN rule 3);
each selector asks the database for the time once, however many rows it returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import BooleanField, Case, CharField, F, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL

from apikit.errors import NotFound
from fleet.idle import idle_q
from fleet.models import Attempt, AttemptEnd, Run, RunState, Slot, SlotState, WorkPackage
from hands import capabilities as hand_capabilities
from hands.models import Hand, HandKey, Lane
from leases import names
from leases.clock import db_now, now_expression
from leases.engine import LeaseSnapshot
from leases.models import Event, Lease, LeaseKind, LeaseState, LeaseStatus, Refusal
from leases.state import lease_state, state_expression, state_q, state_sql


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
    """An attempt as a renewing report's row gives it (`fleet.services.reports.report_view`): the
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


def run_get(*, workspace_id: int, run_id: int, lane_id: int | None = None) -> Run:
    try:
        return (
            Run.objects.in_lane(lane_id)
            .select_related("work_package", "work_package__lane")
            .get(pk=run_id, workspace_id=workspace_id)
        )
    except (Run.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"no run {run_id}") from None


def slot_state(lease: LeaseSnapshot) -> str:
    """done (its lease retired by a finish), held (a tenure not lost), else open (free, or its
    holder lost: claimable at once, before any sweep)."""
    if lease.status == LeaseStatus.RETIRED:
        return SlotState.DONE
    return SlotState.HELD if lease.held else SlotState.OPEN


@dataclass(frozen=True)
class SlotView:
    slot: Slot
    lease: LeaseSnapshot

    @property
    def state(self) -> str:
        return slot_state(self.lease)

    @property
    def holder(self) -> str | None:
        return self.lease.holder if self.lease.held else None


@dataclass(frozen=True)
class SlotCounts:
    """How a run's slots stand, for a denial, a list of runs or the board."""

    total: int
    open: int
    held: int
    done: int
    # The soonest end of a holder's current renewal window (seconds), None if none is held.
    next_expires_in_s: float | None

    @classmethod
    def of(cls, leases: list[LeaseSnapshot]) -> SlotCounts:
        states = [slot_state(lease) for lease in leases]
        windows = [
            lease.expires_in_s
            for lease, state in zip(leases, states, strict=True)
            if state == SlotState.HELD and lease.expires_in_s is not None
        ]
        return cls(
            total=len(states),
            open=states.count(SlotState.OPEN),
            held=states.count(SlotState.HELD),
            done=states.count(SlotState.DONE),
            next_expires_in_s=max(min(windows), 0.0) if windows else None,
        )

    @property
    def all_done(self) -> bool:
        return self.total > 0 and self.done == self.total


def run_slots(*, run: Run, state: str | None = None) -> list[SlotView]:
    now = db_now()
    slots = list(Slot.objects.filter(run=run).select_related("lease").order_by("index"))
    views = [SlotView(s, LeaseSnapshot.from_model(s.lease, now)) for s in slots]
    if state:
        views = [v for v in views if v.state == state]
    return views


def run_slot_counts(*, run_id: int) -> SlotCounts:
    """The run's slots counted by state now, on the database's clock (one query)."""
    now = db_now()
    leases = Lease.objects.filter(slot__run_id=run_id)
    return SlotCounts.of([LeaseSnapshot.from_model(lease, now) for lease in leases])


def runs_slot_counts(runs: list[Run], now: datetime | None = None) -> dict[int, SlotCounts]:
    """Slot counts for a page of runs in one query, whatever the page's size."""
    now = now or db_now()
    by_run: dict[int, list[LeaseSnapshot]] = {run.pk: [] for run in runs}
    for slot in Slot.objects.filter(run_id__in=list(by_run)).select_related("lease"):
        by_run[slot.run_id].append(LeaseSnapshot.from_model(slot.lease, now))
    return {run_id: SlotCounts.of(leases) for run_id, leases in by_run.items()}


def lease_snapshots(leases: list[Lease], now: datetime | None = None) -> list[LeaseSnapshot]:
    now = now or db_now()
    return [LeaseSnapshot.from_model(lease, now) for lease in leases]


# --- Lists for the API (filters in SQL, on the database's clock) --------------------------------
# Each returns an unordered queryset; the caller pages it by primary key (newest first).


LEASE_STATES = [state.value for state in LeaseState]
ATTEMPT_STATES = ["live", "late", "stalled", "lost", "finished", "released"]


def lease_state_q(state: str, *, prefix: str = "") -> Q:
    """Rows whose lease (at `prefix`) is in `state` now (`leases.state.state_q`)."""
    return state_q(state, now_expression(), prefix=prefix)


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


def covering_nodes(name: str) -> list[str]:
    """The nodes whose leases cover `name`: its own and every ancestor's."""
    node = names.node_of(name)
    return [*names.ancestors_of(node), node]


def leases_list(
    *,
    workspace_id: int,
    prefix: str = "",
    holder: str = "",
    state: str = "",
    kind: str = LeaseKind.RESOURCE,
    covering: list[str] | None = None,
) -> QuerySet[Lease]:
    """`covering`: only leases on those names' nodes or a directory above one (the leases that
    cover a file: `src/auth/` covers `src/auth/login.py`)."""
    leases = Lease.objects.filter(workspace_id=workspace_id, kind=kind)
    if covering:
        line = {node for name in covering for node in covering_nodes(name)}
        leases = leases.filter(node__in=sorted(line))
    if prefix:
        leases = leases.filter(resource__startswith=prefix)
    if holder:
        leases = leases.filter(holder=holder)
    if state:
        leases = leases.filter(lease_state_q(state))
    return leases


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
    fleet/idle.py does."""
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


def work_packages_list(*, lane: Lane) -> QuerySet[WorkPackage]:
    return WorkPackage.objects.filter(lane=lane).select_related("lane")


def work_package_get(
    *, workspace_id: int, work_package_id: int, lane_id: int | None = None
) -> WorkPackage:
    try:
        return (
            WorkPackage.objects.in_lane(lane_id)
            .select_related("lane")
            .get(pk=work_package_id, workspace_id=workspace_id)
        )
    except (WorkPackage.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"no work package {work_package_id}") from None


def runs_list(*, work_package: WorkPackage) -> QuerySet[Run]:
    return Run.objects.filter(work_package=work_package).select_related(
        "work_package", "work_package__lane"
    )


def runs_of_workspace(
    *,
    workspace_id: int,
    state: str = "",
    lane_slug: str = "",
    lane_id: int | None = None,
    fitting: list[str] | None = None,
) -> QuerySet[Run]:
    """The workspace's runs (a lane-limited key's: its lane's), for hands discovering work. An
    open run of a closed work package takes no claims, so `open` leaves it out. `fitting`: only
    the runs a hand with those capabilities can take (the claim's own rule, in SQL)."""
    runs = Run.objects.filter(workspace_id=workspace_id).select_related(
        "work_package", "work_package__lane"
    )
    if fitting is not None:
        column = f'"{Run._meta.db_table}"."capabilities"'
        fits = RawSQL(
            hand_capabilities.fits_sql(column, hand_capabilities.array_param_sql("%s")),
            [json.dumps(fitting)],
            output_field=BooleanField(),
        )
        runs = runs.alias(fits=fits).filter(fits=True)
    runs = runs.in_lane(lane_id)
    if lane_slug:
        runs = runs.filter(work_package__lane__slug=lane_slug)
    if state == RunState.OPEN:
        runs = runs.filter(state=RunState.OPEN, work_package__state=RunState.OPEN)
    elif state:
        runs = runs.filter(state=state)
    return runs


def _lane_hand_names(lane_id: int) -> QuerySet[Hand]:
    return Hand.objects.filter(lane_id=lane_id).values("name")


def refusals_list(
    *, workspace_id: int, code: str = "", hand_name: str = "", lane_id: int | None = None
) -> QuerySet[Refusal]:
    """A workspace's refusals; for a lane-limited caller (`lane_id`), those of its lane's hands
    or made with its lane's keys."""
    refusals = Refusal.objects.filter(workspace_id=workspace_id)
    if lane_id is not None:
        refusals = refusals.filter(
            Q(hand__in=_lane_hand_names(lane_id))
            | Q(key_prefix__in=HandKey.objects.filter(lane_id=lane_id).values("prefix"))
        )
    if code:
        refusals = refusals.filter(code=code)
    if hand_name:
        refusals = refusals.filter(hand=hand_name)
    return refusals


def events_list(
    *,
    workspace_id: int,
    kind: str = "",
    since: datetime | None = None,
    after_id: int | None = None,
    hand_name: str = "",
    attempt_id: int | None = None,
    lane_id: int | None = None,
) -> QuerySet[Event]:
    """A workspace's events; for a lane-limited caller (`lane_id`), those of its lane's hands
    and attempts."""
    events = Event.objects.filter(workspace_id=workspace_id)
    if lane_id is not None:
        events = events.filter(
            Q(hand__in=_lane_hand_names(lane_id))
            | Q(attempt_id__in=Attempt.objects.filter(lane_id=lane_id).values("pk"))
        )
    if kind:
        events = events.filter(kind=kind)
    if since is not None:
        events = events.filter(at__gte=since)
    if after_id is not None:
        events = events.filter(pk__gt=after_id)
    if hand_name:
        events = events.filter(hand=hand_name)
    if attempt_id is not None:
        events = events.filter(attempt_id=attempt_id)
    return events
