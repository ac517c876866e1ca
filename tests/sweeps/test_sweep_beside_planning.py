"""The sweep is never starved by the schedules' planning (issue 33). A hostile review ran six
every-minute schedules of 20 runs x 1,000 slots: each planning run took 40-75 s on the shared
jobs and another workspace's `lease_expired` was recorded up to 49.7 s late.

Here one workspace has six schedules at the caps (every 5 minutes, 20 runs x 25 slots, two hours
of periods due), and its planning is held in the middle of a period's transaction for as long as
the test likes, the way a slow run would be, whatever this machine's speed. Another workspace's
lease runs out meanwhile. The embedded scheduler runs the real table of jobs on a clock the test
moves in steps of one sweep interval, with the database's clock frozen and moved with it, so the
verdict is read from the records (the event's time, the jobs' runs), never from a stopwatch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.test import override_settings

from fleet.models import Run, Slot, WorkPackage
from fleet.plan import services as plan_services
from groundcontrol import scheduler as embedded
from groundcontrol.celery import app
from hands import services as hand_services
from leases import clock
from leases import services as leases
from leases.models import Event, EventKind
from ops.models import JobRun
from schedules import services as schedule_services

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SWEEP_S = 1.0  # this test's sweep interval: each step of its clocks
HEAVY_SCHEDULES = 6
# A period at the caps (`schedules.services`): 20 runs of 25 slots, what the review's 20 x 1,000
# is cut to.
SLOTS = 25
HEAVY_RUNS = [{"title": f"Fan out {i}", "slots": SLOTS} for i in range(20)]
PATIENCE_S = 180.0  # how long the test waits for something that must happen; never a verdict
# (the planning run's remaining 5,000 slots took over 60 s with three suites on two cores)


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(what)
        time.sleep(0.05)


def job_runs(name: str) -> int:
    return JobRun.objects.filter(name=name).values_list("runs", flat=True).first() or 0


class HeldPlanning:
    """`run_create` as the beat job calls it, held at the first run of the second period (inside
    that period's transaction: its schedule's row updated, its package made) until `release`;
    after `abort`, every call fails, so a run cut short by a failing test ends at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.held = threading.Event()
        self.release = threading.Event()
        self.abort = threading.Event()
        self._real = plan_services.run_create

    def __call__(self, **kwargs: Any) -> Run:
        if self.abort.is_set():
            raise RuntimeError("the test is over")
        self.calls += 1
        if self.calls == len(HEAVY_RUNS) + 1:
            self.held.set()
            self.release.wait(PATIENCE_S * 2)
        return self._real(**kwargs)


@pytest.fixture
def heavy_workspace() -> Any:
    """Six schedules at the caps, made two hours ago: each has more periods due than a run
    makes (the latest 24), every one of them 500 slots."""
    workspace = hand_services.workspace_get_or_create(name="heavy")
    lane, _ = hand_services.lane_create(workspace=workspace, slug="flood", name="Flood")
    clock.freeze(START - timedelta(hours=2))
    for i in range(HEAVY_SCHEDULES):
        schedule_services.schedule_create(
            lane=lane,
            cron="*/5 * * * *",
            key_pattern=f"flood{i}-{{date}}-{{time}}",
            title_pattern=f"Flood {i}",
            runs=HEAVY_RUNS,
            actor="mallory",
        )
    return workspace


@pytest.fixture
def scheduler() -> Iterator[tuple[embedded.Scheduler, list[float]]]:
    """The embedded scheduler with the real table of jobs (the sweep every SWEEP_S), on a
    monotonic clock the test moves; stopped at the end, whatever happened."""
    table = dict(settings.CELERY_BEAT_SCHEDULE)
    table["sweep-leases"] = {**table["sweep-leases"], "schedule": SWEEP_S}
    now = [0.0]
    with override_settings(CELERY_BEAT_SCHEDULE=table):
        running = embedded.Scheduler(embedded.jobs_from_settings(), monotonic=lambda: now[0])
    yield running, now
    running.stop(timeout=PATIENCE_S * 2)


@pytest.mark.concurrency
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("quiet_notifications")
def test_another_workspaces_heavy_planning_never_delays_a_lease_expiry_past_one_sweep_interval(
    heavy_workspace, scheduler
) -> None:
    running, now = scheduler
    clock.freeze(START)
    light = hand_services.workspace_get_or_create(name="light")
    lease = leases.lease_acquire(
        workspace_id=light.pk,
        resource="deploy/prod",
        holder="hand-b",
        process_id="host-b:1",
        ttl_s=SWEEP_S,  # lost once the database's clock passes START + 1 s (a grace of 0)
    )
    planning = HeldPlanning()
    with mock.patch.object(plan_services, "run_create", planning):
        try:
            running.start()
            wait_for("the heavy workspace's planning never began", planning.held.is_set)
            # Its first period is made (500 slots); the second is in its transaction, held.
            assert WorkPackage.objects.filter(workspace_id=heavy_workspace.pk).count() == 1
            wait_for("the sweep never ran", lambda: job_runs("sweep_leases") >= 1)
            swept = job_runs("sweep_leases")  # its first run, at START: nothing due yet
            for step in (1, 2):
                # The database's clock first: a sweep the step lets run reads the new time.
                clock.advance(SWEEP_S)
                now[0] += SWEEP_S
                wait_for(
                    "the sweep did not run while the schedules' planning was in progress",
                    lambda step=step: job_runs("sweep_leases") >= swept + step,
                )
            expired = Event.objects.get(
                workspace_id=light.pk, kind=EventKind.LEASE_EXPIRED, resource="deploy/prod"
            )
            # Recorded while the planning run was still going: it has no finished run on record.
            assert job_runs("plan_schedules") == 0
            planning.release.set()
            wait_for("the planning run never finished", lambda: job_runs("plan_schedules") == 1)
        finally:
            # Whatever happened, the held run ends (failing fast) before the patch is undone.
            planning.abort.set()
            planning.release.set()
            running.stop(timeout=PATIENCE_S * 2)

    # On the database's clock: the lease was lost from its deadline (START + 1 s) and its
    # expiry recorded by the next sweep, one interval later, not after the planning run.
    threshold = datetime.fromisoformat(expired.data["since"])
    assert threshold == lease.deadline == START + timedelta(seconds=SWEEP_S)
    assert expired.at - threshold <= timedelta(seconds=SWEEP_S)
    assert Event.objects.filter(kind=EventKind.LEASE_EXPIRED).count() == 1
    # And the heavy workspace's planning did its work: whole periods, its share of the run.
    made = Run.objects.filter(workspace_id=heavy_workspace.pk)
    assert made.count() % len(HEAVY_RUNS) == 0 and made.count() >= 2 * len(HEAVY_RUNS)
    assert Slot.objects.filter(workspace_id=heavy_workspace.pk).count() == made.count() * SLOTS


def test_the_planning_job_has_a_queue_and_a_thread_of_its_own() -> None:
    """Celery routes the planning task to its own queue (the Procfile's `planner` worker takes
    it; the sweep's `worker` never does), and the embedded scheduler gives that queue its own
    thread: the structure the test above relies on, as production deploys it."""
    route = app.amqp.router.route({}, "schedules.plan")
    sweep = app.amqp.router.route({}, "fleet.sweep_leases")
    assert route["queue"].name == settings.GC_PLAN_QUEUE
    assert sweep["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE != settings.GC_PLAN_QUEUE
    queues = {job.name: job.queue for job in embedded.jobs_from_settings()}
    assert queues["plan-schedules"] == settings.GC_PLAN_QUEUE
    assert {queue for name, queue in queues.items() if name != "plan-schedules"} == {
        settings.CELERY_TASK_DEFAULT_QUEUE
    }
