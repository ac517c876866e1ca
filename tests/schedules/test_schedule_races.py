"""The beat job raced and killed, on PostgreSQL: beats at once, each on its own thread and
connection, make one package and one set of runs per period; so do tries that get past the
schedule's statement together (the package's unique key decides); and a process killed between
the package and its runs leaves nothing, so the next tick makes all of it. A GitHub delivery
and its redeliveries at once make one package too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import psycopg
import pytest
from django.db import connection

from fleet.models import Run, WorkPackage
from leases import clock
from schedules import github, jobs
from schedules import services as schedule_services
from schedules.models import GitHubDelivery, Schedule, ScheduleTry
from tests.reliability import live
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SIX = datetime(2030, 1, 2, 6, 0, tzinfo=UTC)
THREADS = 8
RUNS = [{"title": "Walk", "slots": 3}, {"title": "Check"}]


@pytest.fixture
def schedule(lane) -> Schedule:
    clock.freeze(START)
    return schedule_services.schedule_create(
        lane=lane,
        cron="0 6 * * *",
        key_pattern="daily-{date}",
        title_pattern="Rewalk {date}",
        runs=RUNS,
        actor="boss",
    )


def assert_one_period_made() -> None:
    package = WorkPackage.objects.get()
    assert package.key == "daily-2030-01-02"
    assert sorted(Run.objects.filter(work_package=package).values_list("title", flat=True)) == [
        "Check",
        "Walk",
    ]
    assert Run.objects.count() == 2


def test_beats_at_once_make_one_package_and_one_set_of_runs(schedule) -> None:
    clock.freeze(SIX)
    results: list[jobs.PlanResult] = []
    crashes = together([lambda: results.append(jobs.schedules_run()) for _ in range(THREADS)])
    assert crashes == []
    assert_one_period_made()
    assert sum(r.created for r in results) == 1
    assert sum(r.failed for r in results) == 0
    assert list(ScheduleTry.objects.values_list("outcome", flat=True)) == ["created"]


def test_tries_past_the_schedules_statement_together_still_make_one(schedule) -> None:
    """Without the schedule's statement to queue on (as if it let every beat through), the
    package's unique key decides: one try makes it and its runs, the others find it."""
    clock.freeze(SIX)
    with mock.patch.object(jobs, "_advance", return_value=True):
        crashes = together(
            [lambda: jobs.period_try(schedule=schedule, period=SIX, at=SIX) for _ in range(THREADS)]
        )
    assert crashes == []
    assert_one_period_made()
    outcomes = sorted(ScheduleTry.objects.values_list("outcome", flat=True))
    assert outcomes == ["created"] + ["existing"] * (THREADS - 1)


KILLED = textwrap.dedent(
    """
    import os, signal
    from datetime import datetime, UTC
    import django
    django.setup()
    from leases import clock
    from fleet.plan import services as plan
    from schedules import jobs

    real = plan.run_create
    made = []

    def run_create(**kwargs):
        made.append(real(**kwargs))
        if len(made) == 1:
            # Killed between the package (and its first run) and the rest.
            os.kill(os.getpid(), signal.SIGKILL)
        return made[-1]

    plan.run_create = run_create
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    jobs.schedules_run()
    """
)


def test_a_process_killed_between_the_steps_leaves_nothing_and_the_next_tick_makes_it(
    schedule,
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": OUTSIDE_URL(),
        "DJANGO_SETTINGS_MODULE": "groundcontrol.settings",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'client'}",
    }
    done = subprocess.run(
        [sys.executable, "-c", KILLED], cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    assert not WorkPackage.objects.exists()
    assert not Run.objects.exists()
    assert not ScheduleTry.objects.exists()
    schedule.refresh_from_db()
    assert schedule.periods_after == START
    clock.freeze(SIX)
    assert jobs.schedules_run().created == 1
    assert_one_period_made()


def firsts_of(answers: list, delivery: str) -> str:  # noqa: ANN001
    [first] = [a.outcome for a in answers if a.delivery_id == delivery and not a.duplicate]
    return first


ISSUE = json.loads((ROOT / "tests" / "fixtures" / "github" / "issues-opened.json").read_text())


def test_one_delivery_and_its_redeliveries_at_once_make_one_package(lane) -> None:
    integration = github.integration_create(
        lane=lane, repository="Codertocat/Hello-World", actor="boss"
    ).integration
    answers: list[github.DeliveryAnswer] = []

    def receive(delivery: str) -> None:
        answers.append(
            github.delivery_receive(
                integration=integration, delivery_id=delivery, event="issues", payload=ISSUE
            )
        )

    # Half the threads redeliver one delivery, half deliver the same issue as others.
    bodies = [lambda i=i: receive("same" if i % 2 else f"other-{i}") for i in range(THREADS)]
    assert together(bodies) == []
    assert WorkPackage.objects.count() == 1
    assert GitHubDelivery.objects.count() == THREADS // 2 + 1
    # A redelivery answers with its first's outcome: among the first answers, one created.
    firsts = [a.outcome for a in answers if not a.duplicate]
    assert sorted(firsts) == ["created"] + ["existing"] * (THREADS // 2)
    assert [a for a in answers if a.duplicate and a.outcome != firsts_of(answers, "same")] == []
    assert {a.work_package.pk for a in answers} == {WorkPackage.objects.get().pk}


def test_a_connection_lost_mid_period_is_recorded_and_retried_on_the_next_tick(
    schedule,
) -> None:
    """A real loss of the job's connection (its backend terminated from outside while the
    period's transaction is open): the period is not made; Django drops the dead connection
    when its rollback fails, so the failed try is written at once on a new one (the database
    itself is up); the next tick makes the period."""
    from fleet.plan import services as plan_services

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [(pid,)] = cursor.fetchall()
    real = plan_services.run_create

    def cut_then_create(**kwargs):  # noqa: ANN003, ANN202
        with psycopg.connect(OUTSIDE_URL(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
        return real(**kwargs)

    clock.freeze(SIX)
    with mock.patch.object(plan_services, "run_create", cut_then_create):
        result = jobs.schedules_run()
    assert result.failed == 1
    assert jobs._unrecorded == []
    assert not WorkPackage.objects.exists()
    assert not Run.objects.exists()
    assert list(ScheduleTry.objects.values_list("outcome", flat=True)) == ["failed"]
    clock.freeze(SIX.replace(minute=1))
    assert jobs.schedules_run().created == 1
    assert_one_period_made()
    failed, created = ScheduleTry.objects.order_by("id")
    assert (failed.outcome, failed.at, created.outcome) == ("failed", SIX, "created")
    assert "OperationalError" in failed.error or "InterfaceError" in failed.error


def OUTSIDE_URL() -> str:  # noqa: N802 - read at call time: the test database's name
    return live.database_url(connection.settings_dict)
