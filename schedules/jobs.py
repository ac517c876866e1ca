"""The beat job: make each due period's work package and its runs.

1. Read the database's time once (`now`); every period is judged against it.
2. For each active schedule whose `next_period_at` has come (`schedule_due_idx`), the periods
   after `periods_after` up to now, oldest first: at most the latest `periods.MAX_CATCH_UP`,
   older ones skipped (the schedules so bounded are counted in the result).
3. Each period in one transaction: a conditional UPDATE moves `periods_after` to the period
   only if it is still before it (and the schedule still has the expression and is on); the
   package is then made through `work_package_create`, idempotent on its key (the lane's unique
   key), and only a package made now gets the template's runs; the try is recorded. Two beats
   at once queue on the UPDATE's row lock and the second matches nothing; a retry or a crash
   between the steps rolls all of it back, so a period never makes two packages or two sets of
   runs, and a period is tried until one transaction commits.
4. A failed period stops its schedule for this run (a later one must not move `periods_after`
   past it); the failure is recorded in a transaction of its own, and when the database is out
   of reach for that too, kept in this process and written at the start of its next run.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from fleet.plan import services as plan_services
from leases.clock import db_now
from leases.jobs import JobResult
from schedules import periods
from schedules.models import Schedule, ScheduleTry, TryOutcome

logger = logging.getLogger(__name__)

MAX_SCHEDULES = 500  # per run; the rest wait for the next (oldest due first)
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


def schedules_run(*, limit: int = MAX_SCHEDULES) -> PlanResult:
    result = PlanResult()
    result.recorded_late = _write_unrecorded()
    now = db_now()
    due = list(
        Schedule.objects.filter(active=True, next_period_at__lte=now)
        .select_related("lane")
        .order_by("next_period_at")[:limit]
    )
    for schedule in due:
        found, skipped = periods.due_periods(schedule.cron, after=schedule.periods_after, now=now)
        if skipped:
            result.bounded += 1
            logger.warning(
                "schedule %s: more than %s periods due; only the latest are made",
                schedule.pk,
                periods.MAX_CATCH_UP,
            )
        for period in found:
            outcome = period_try(schedule=schedule, period=period, at=now)
            if outcome is None:
                continue
            result.processed += 1
            if outcome == TryOutcome.CREATED:
                result.created += 1
            elif outcome == TryOutcome.EXISTING:
                result.existing += 1
            else:
                result.failed += 1
                break
    return result


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
