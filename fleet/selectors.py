"""Reads of the fleet: attempts with their computed state, runs with their slots.

State is computed on read from the lease's timestamps and the database's time (DESIGN rule 3);
each selector asks the database for the time once, however many rows it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from fleet.models import Attempt, AttemptEnd, Hand, Run, Slot
from leases.clock import db_now
from leases.engine import LeaseSnapshot
from leases.errors import NotFound
from leases.models import Lease, LeaseState


@dataclass(frozen=True)
class AttemptView:
    """An attempt with the lease of its slot, as of `lease.server_time`."""

    attempt: Attempt
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
    if attempt.end:
        return str(attempt.end)
    if lease.fence != attempt.fence:
        return AttemptEnd.LOST
    state = lease.state
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
    filters = {"pk": attempt_id, "workspace_id": workspace_id}
    if lane_id is not None:
        filters["lane_id"] = lane_id
    try:
        return attempts_base().get(**filters)
    except (Attempt.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"no attempt {attempt_id}") from None


def attempt_view(attempt: Attempt) -> AttemptView:
    return attempt_views([attempt])[0]


def run_get(*, workspace_id: int, run_id: int, lane_id: int | None = None) -> Run:
    filters = {"pk": run_id, "workspace_id": workspace_id}
    if lane_id is not None:
        filters["work_package__lane_id"] = lane_id
    try:
        return Run.objects.select_related("work_package", "work_package__lane").get(**filters)
    except (Run.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound(f"no run {run_id}") from None


@dataclass(frozen=True)
class SlotView:
    slot: Slot
    lease: LeaseSnapshot

    @property
    def state(self) -> str:
        """open (free, or its holder lost) or held."""
        return "held" if self.lease.held else "open"

    @property
    def holder(self) -> str | None:
        return self.lease.holder if self.lease.held else None


def run_slots(*, run: Run, state: str | None = None) -> list[SlotView]:
    now = db_now()
    slots = list(Slot.objects.filter(run=run).select_related("lease").order_by("index"))
    views = [SlotView(s, LeaseSnapshot.from_model(s.lease, now)) for s in slots]
    if state:
        views = [v for v in views if v.state == state]
    return views


def hand_get(*, workspace_id: int, name: str) -> Hand:
    try:
        return Hand.objects.get(workspace_id=workspace_id, name=name)
    except Hand.DoesNotExist:
        raise NotFound(f"no hand {name!r}") from None


def lease_snapshots(leases: list[Lease], now: datetime | None = None) -> list[LeaseSnapshot]:
    now = now or db_now()
    return [LeaseSnapshot.from_model(lease, now) for lease in leases]
