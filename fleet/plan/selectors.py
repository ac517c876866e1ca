"""Reads of the plan: work packages, runs and their slots, each slot with its state computed on
read from its lease (DESIGN rule 3), on the database's clock."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from apikit.errors import NotFound
from fleet.models import PlanState, Run, RunState, Slot, SlotState, WorkPackage
from fleet.plan import dependencies
from hands import capabilities as hand_capabilities
from hands.models import Lane
from leases.clock import db_now, now_sql
from leases.engine import LeaseSnapshot
from leases.models import Lease, LeaseStatus
from leases.state import takeable_sql


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
    return dependencies.annotated(
        Run.objects.filter(work_package=work_package).select_related(
            "work_package", "work_package__lane"
        )
    )


def runs_of_workspace(
    *,
    workspace_id: int,
    state: str = "",
    lane_slug: str = "",
    lane_id: int | None = None,
    fitting: list[str] | None = None,
    ready: bool = False,
) -> QuerySet[Run]:
    """The workspace's runs (a lane-limited key's: its lane's), for hands discovering work. An
    open run of a closed work package takes no claims, so `open` leaves it out. `fitting`: only
    the runs a hand with those capabilities can take (the claim's own rule, in SQL). `ready`:
    the ready queue (`ready_queue`), in its order."""
    runs = dependencies.annotated(
        Run.objects.filter(workspace_id=workspace_id).select_related(
            "work_package", "work_package__lane"
        )
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
    return ready_queue(runs) if ready else runs


# A run has a slot to claim now: free, or its holder lost (the claim's own test, `takeable_sql`).
_OPEN_SLOT = (
    f"EXISTS (SELECT 1 FROM {Slot._meta.db_table} ready_slot "
    f"JOIN {Lease._meta.db_table} ready_lease ON ready_lease.id = ready_slot.lease_id "
    f'WHERE ready_slot.workspace_id = "{Run._meta.db_table}"."workspace_id" '
    f'AND ready_slot.run_id = "{Run._meta.db_table}"."id" AND {{takeable}})'
)
READY_ORDER = ("priority", "created_at", "pk")


def ready_queue(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Of `runs`, those a hand could claim now: open, of an open work package, waiting for no
    run (`fleet.plan.dependencies.waits_sql`, the claim's own rule), with a slot open; in the
    queue's order: priority (0 first), then age (oldest first), then id. One query."""
    run = f'"{Run._meta.db_table}"'
    now = now_sql()
    takeable = takeable_sql(
        now,
        status="ready_lease.status",
        deadline="ready_lease.deadline",
        grace="ready_lease.grace_s",
    )
    ready = RawSQL(
        f"(NOT {dependencies.waits_sql(f'{run}.id', f'{run}.workspace_id')} AND "
        + _OPEN_SLOT.format(takeable=takeable)
        + ")",
        (),
        output_field=BooleanField(),
    )
    return (
        runs.filter(state=RunState.OPEN, work_package__state=PlanState.OPEN)
        .alias(ready=ready)
        .filter(ready=True)
        .order_by(*READY_ORDER)
    )


def waiting_runs(
    *, workspace_id: int, lane_slug: str = "", limit: int = 20
) -> tuple[list[Run], int]:
    """The open runs (of open packages) that wait for a run not done, in the ready queue's
    order, each with what it depends on (`dependencies.annotated`), at most `limit` of them,
    and how many there are: the board's "waiting" list (two queries)."""
    run = f'"{Run._meta.db_table}"'
    waits = RawSQL(
        dependencies.waits_sql(f"{run}.id", f"{run}.workspace_id"), (), output_field=BooleanField()
    )
    runs = (
        Run.objects.filter(
            workspace_id=workspace_id, state=RunState.OPEN, work_package__state=PlanState.OPEN
        )
        .alias(waits=waits)
        .filter(waits=True)
    )
    if lane_slug:
        runs = runs.filter(work_package__lane__slug=lane_slug)
    shown = dependencies.annotated(
        runs.select_related("work_package", "work_package__lane").order_by(*READY_ORDER)
    )
    return list(shown[:limit]), runs.count()
