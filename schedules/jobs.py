"""The beat job: make each due period's work package and its runs, sharing each run fairly
between the workspaces.

1. Read the database's time once (`now`); every period is judged against it.
2. The active schedules whose `next_period_at` has come (`schedule_due_idx`), each workspace's
   oldest first, at most MAX_SCHEDULES of them taken a workspace at a time (every workspace's
   first before any workspace's second), and for each the periods after `periods_after` up to
   now, oldest first: at most the latest `periods.MAX_CATCH_UP`, older ones skipped (the
   schedules so bounded are counted in the result).
3. Round robin: one period of one schedule of each workspace in turn (and each workspace's
   schedules in turn), so a workspace with heavy schedules delays another's period by at most
   one period of each, never by its whole backlog. A workspace stops for this run once its
   periods made WORKSPACE_SLOTS_PER_RUN slots (its first period is always made); the rest waits
   for the next run, so no workspace holds the job for long. A stored schedule over the caps
   (written before them: `schedules.services`) is switched off instead, with the reason on
   record.
4. Each period in one transaction: a conditional UPDATE moves `periods_after` to the period
   only if it is still before it (and the schedule still has the expression and is on); the
   package is then made through `work_package_create`, idempotent on its key (the lane's unique
   key), and only a package made now gets the template's runs; the try is recorded. Two beats
   at once queue on the UPDATE's row lock and the second matches nothing; a retry or a crash
   between the steps rolls all of it back, so a period never makes two packages or two sets of
   runs, and a period is tried until one transaction commits.
5. A failed period stops its schedule for this run (a later one must not move `periods_after`
   past it); the failure is recorded in a transaction of its own, and when the database is out
   of reach for that too, kept in this process and written at the start of its next run.

The job runs on a queue (and, embedded, a thread) of its own, never beside the sweep
(`settings.CELERY_TASK_ROUTES`, `groundcontrol.scheduler`): however long a run takes, no
workspace's lease expiry waits for it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from apikit.errors import ValidationFailed
from fleet.plan import services as plan_services
from leases.clock import db_now
from leases.jobs import JobResult
from schedules import periods
from schedules import services as schedule_services
from schedules.models import Schedule, ScheduleTry, TryOutcome

logger = logging.getLogger(__name__)

MAX_SCHEDULES = 500  # per run; the rest wait for the next (each workspace's oldest due first)
# A workspace's share of one run, in slots made (a period is made whole, so its first period is
# always made): ten periods of a schedule at the caps. What a workspace may schedule
# (`schedules.services`) fits in it at the default interval, so only a backlog waits.
WORKSPACE_SLOTS_PER_RUN = 5000
MAX_ERROR = 2000

# Failed tries this process could not write (the database was out of reach): written first
# thing on its next run. Bounded, so an outage that lasts cannot grow it without end.
_unrecorded: list[ScheduleTry] = []
_unrecorded_lock = threading.Lock()
MAX_UNRECORDED = 1000


@dataclass
class PlanResult(JobResult):
    created: int = 0
    existing: int = 0
    bounded: int = 0  # schedules whose catch-up left older periods out
    recorded_late: int = 0  # failed tries of an earlier run written now
    deferred: int = 0  # due periods left for the next run: their workspace's share was spent
    switched_off: int = 0  # stored schedules over the caps, switched off


@dataclass
class _Due:
    schedule: Schedule
    periods: deque[datetime]
    slots: int  # what each of its periods makes


def schedules_run(
    *, limit: int = MAX_SCHEDULES, workspace_slots: int = WORKSPACE_SLOTS_PER_RUN
) -> PlanResult:
    result = PlanResult()
    result.recorded_late = _write_unrecorded()
    now = db_now()
    queues: dict[int, deque[_Due]] = {}
    for schedule in _due_schedules(now, limit):
        refusal = _over_the_caps(schedule)
        if refusal is not None:
            result.switched_off += _switch_off(schedule, refusal, at=now)
            continue
        found, skipped = periods.due_periods(schedule.cron, after=schedule.periods_after, now=now)
        if skipped:
            result.bounded += 1
            logger.warning(
                "schedule %s: more than %s periods due; only the latest are made",
                schedule.pk,
                periods.MAX_CATCH_UP,
            )
        if found:
            queues.setdefault(schedule.workspace_id, deque()).append(
                _Due(schedule, deque(found), schedule_services.period_slots(schedule.runs))
            )
    spent = dict.fromkeys(queues, 0)
    while queues:
        for workspace_id in list(queues):
            waiting = queues[workspace_id]
            due = waiting.popleft()
            if spent[workspace_id] and spent[workspace_id] + due.slots > workspace_slots:
                # Its share of this run is spent: the rest of its periods wait for the next.
                result.deferred += len(due.periods) + sum(len(d.periods) for d in waiting)
                del queues[workspace_id]
                continue
            outcome = period_try(schedule=due.schedule, period=due.periods.popleft(), at=now)
            if outcome is not None:
                result.processed += 1
            if outcome == TryOutcome.CREATED:
                result.created += 1
                spent[workspace_id] += due.slots
            elif outcome == TryOutcome.EXISTING:
                result.existing += 1
            elif outcome == TryOutcome.FAILED:
                result.failed += 1
                due.periods.clear()  # no later period of it may pass the one that failed
            if due.periods:
                waiting.append(due)
            if not waiting:
                del queues[workspace_id]
    return result


def _due_schedules(now: datetime, limit: int) -> list[Schedule]:
    """The due schedules, each workspace's oldest due first: every workspace's first before any
    workspace's second, so `limit` never leaves a workspace out for another's many."""
    ranked = (
        Schedule.objects.filter(active=True, next_period_at__lte=now)
        .annotate(
            turn=Window(
                RowNumber(), partition_by=[F("workspace_id")], order_by=[F("next_period_at")]
            )
        )
        .select_related("lane")
        .order_by("turn", "next_period_at", "id")
    )
    return list(ranked[:limit])


def _over_the_caps(schedule: Schedule) -> str | None:
    """Why a stored schedule may not be planned (one written before the caps), or None: the
    rules its writes are held to (`periods.validate_period`,
    `schedule_services.validate_template_caps`)."""
    try:
        periods.validate_period(schedule.cron)
        schedule_services.validate_template_caps(schedule.runs)
    except ValidationFailed as refusal:
        return refusal.message
    return None


def _switch_off(schedule: Schedule, refusal: str, *, at: datetime) -> int:
    """Switch off a schedule over the caps, with a failed try that says why, in one
    transaction; only the schedule as it was read (a fix written meanwhile wins)."""
    with transaction.atomic():
        switched = Schedule.objects.filter(
            pk=schedule.pk, active=True, cron=schedule.cron, runs=schedule.runs
        ).update(active=False)
        if switched:
            ScheduleTry.objects.create(
                workspace_id=schedule.workspace_id,
                schedule=schedule,
                date_key=periods.date_key(schedule.next_period_at),
                at=at,
                outcome=TryOutcome.FAILED,
                error=f"switched off, over the caps: {refusal}"[:MAX_ERROR],
            )
    if switched:
        logger.warning("schedule %s switched off: %s", schedule.pk, refusal)
    return switched


def period_try(*, schedule: Schedule, period: datetime, at: datetime) -> str | None:
    """Make one period's package and runs, and record the try; None when another run of the
    job made (or is making) this period, or the schedule changed under it."""
    key = periods.date_key(period)
    try:
        with transaction.atomic():
            if not _advance(schedule, period):
                return None
            package, created = plan_services.work_package_create(
                lane=schedule.lane,
                key=periods.render(schedule.key_pattern, period),
                title=periods.render(schedule.title_pattern, period),
            )
            if created:
                for template in schedule.runs:
                    plan_services.run_create(work_package=package, **template)
            outcome = TryOutcome.CREATED if created else TryOutcome.EXISTING
            ScheduleTry.objects.create(
                workspace_id=schedule.workspace_id,
                schedule=schedule,
                date_key=key,
                at=at,
                outcome=outcome,
                work_package=package,
            )
        return outcome
    except Exception as error:  # noqa: BLE001 - any failure is recorded and retried
        logger.warning("schedule %s, period %s: %s", schedule.pk, key, error, exc_info=True)
        failed = ScheduleTry(
            workspace_id=schedule.workspace_id,
            schedule_id=schedule.pk,
            date_key=key,
            at=at,
            outcome=TryOutcome.FAILED,
            error=f"{type(error).__name__}: {error}"[:MAX_ERROR],
        )
        try:
            failed.save()
        except Exception:  # noqa: BLE001 - the database is still out of reach
            with _unrecorded_lock:
                if len(_unrecorded) < MAX_UNRECORDED:
                    _unrecorded.append(failed)
        return TryOutcome.FAILED


def _advance(schedule: Schedule, period: datetime) -> bool:
    """The one statement that decides who makes `period`: it moves the schedule past it only
    if it is still before it, with the expression this run read, and on."""
    return bool(
        Schedule.objects.filter(
            pk=schedule.pk, active=True, cron=schedule.cron, periods_after__lt=period
        ).update(periods_after=period, next_period_at=periods.next_period(schedule.cron, period))
    )


def _write_unrecorded() -> int:
    with _unrecorded_lock:
        pending = list(_unrecorded)
        _unrecorded.clear()
    written = 0
    for position, failed in enumerate(pending):
        try:
            # A schedule deleted meanwhile takes its record with it.
            if Schedule.objects.filter(pk=failed.schedule_id).exists():
                failed.save()
                written += 1
        except Exception:  # noqa: BLE001 - still out of reach: keep the rest for the next run
            with _unrecorded_lock:
                _unrecorded[:0] = pending[position:]
            break
    return written
