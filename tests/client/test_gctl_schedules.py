"""A supervisor's schedules through gctl against the live server: `gctl schedule create` (runs
from --run titles or a --run-json file), `gctl schedules` with each one's next planned periods
and latest try, `gctl schedule tries` and `delete`; refusals with their exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.models import WorkPackage
from hands.models import Hand
from leases import clock
from schedules import jobs
from schedules.models import Schedule
from tests.client.conftest import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXIT_ERROR, EXIT_USAGE, EXIT_AUTH = 1, 2, 5
DAILY = ("--cron", "0 6 * * *", "--key", "daily-{date}", "--title", "Rewalk of {date}")


@pytest.fixture(autouse=True)
def _frozen() -> Any:
    # The live server runs in this process: its database clock is frozen too.
    clock.freeze(START)
    yield
    clock.unfreeze()


@pytest.fixture
def plan_key(gc: Fleet, owner: Hand, lane: Any) -> str:
    return mint(owner, ["plan"])


def test_gctl_creates_a_schedule_with_a_run_per_title(gc: Fleet, plan_key: str) -> None:
    made = gc.gctl(
        "schedule", "create", "rewalk", *DAILY, "--run", "Walk", "--run", "Review", key=plan_key
    )
    assert made.returncode == 0, made.stderr
    schedule = Schedule.objects.get()
    assert made.stdout.splitlines() == [
        f"created schedule {schedule.pk}: 0 6 * * * (UTC) makes daily-{{date}} "
        "'Rewalk of {date}' with 2 runs",
        "  next (UTC): 2030-01-02 06:00, 2030-01-03 06:00, 2030-01-04 06:00, 2030-01-05 06:00, "
        "2030-01-06 06:00; last try: none yet",
    ]
    assert [run["title"] for run in schedule.runs] == ["Walk", "Review"]
    assert (schedule.created_by, schedule.active) == ("hand-a", True)


def test_gctl_takes_the_runs_from_a_json_file_and_answers_json(
    gc: Fleet, plan_key: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([{"title": "Walk", "slots": 3, "evidence_required": ["pr"]}]))
    made = gc.gctl(
        "--json",
        "schedule",
        "create",
        "rewalk",
        *DAILY,
        "--run-json",
        str(runs),
        "--off",
        key=plan_key,
    )
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    schedule = Schedule.objects.get()
    assert (body["id"], body["active"], body["planned"]) == (schedule.pk, False, [])
    assert schedule.runs[0]["slots"] == 3
    assert schedule.runs[0]["evidence_required"] == ["pr"]


def test_gctl_schedules_shows_the_next_periods_and_the_latest_try(gc: Fleet, plan_key: str) -> None:
    assert gc.gctl("schedules", "rewalk", key=plan_key).stdout == ("lane rewalk has no schedules\n")
    gc.gctl("schedule", "create", "rewalk", *DAILY, "--run", "Walk", key=plan_key)
    schedule = Schedule.objects.get()
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    jobs.schedules_run()
    package = WorkPackage.objects.get(key="daily-2030-01-02")

    listed = gc.gctl("schedules", "rewalk", key=plan_key)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1] == (
        "  next (UTC): 2030-01-03 06:00, 2030-01-04 06:00, 2030-01-05 06:00, 2030-01-06 06:00, "
        f"2030-01-07 06:00; last try: 2030-01-02T06:00Z: created work package {package.pk}"
    )
    (row,) = json.loads(gc.gctl("--json", "schedules", "rewalk", key=plan_key).stdout)
    assert row["id"] == schedule.pk
    assert row["latest_try"]["outcome"] == "created"
    assert row["latest_try"]["work_package"] == package.pk

    tries = gc.gctl("schedule", "tries", "rewalk", str(schedule.pk), key=plan_key)
    assert tries.returncode == 0, tries.stderr
    assert tries.stdout == f"2030-01-02T06:00Z: created work package {package.pk}\n"

    deleted = gc.gctl("schedule", "delete", "rewalk", str(schedule.pk), key=plan_key)
    assert deleted.returncode == 0, deleted.stderr
    assert not Schedule.objects.exists()
    assert WorkPackage.objects.filter(pk=package.pk).exists()  # the packages it made stay
    gone = gc.gctl("schedule", "tries", "rewalk", str(schedule.pk), key=plan_key)
    assert gone.returncode == EXIT_ERROR
    assert gone.stderr.rstrip().endswith("(not_found)")


def test_a_bad_schedule_is_refused_with_its_reason_and_nothing_is_made(
    gc: Fleet, plan_key: str, tmp_path: Path
) -> None:
    bad_cron = gc.gctl(
        "schedule",
        "create",
        "rewalk",
        "--cron",
        "61 * * * *",
        "--key",
        "k-{date}",
        "--title",
        "t",
        key=plan_key,
    )
    assert bad_cron.returncode == EXIT_ERROR
    assert bad_cron.stderr.rstrip().endswith("(validation_error)")
    assert "cron" in bad_cron.stderr

    untitled = tmp_path / "runs.json"
    untitled.write_text(json.dumps([{"slots": 1}]))
    bad_run = gc.gctl(
        "schedule", "create", "rewalk", *DAILY, "--run-json", str(untitled), key=plan_key
    )
    assert bad_run.returncode == EXIT_ERROR
    assert "runs[0].title" in bad_run.stderr

    not_a_list = tmp_path / "one.json"
    not_a_list.write_text(json.dumps({"title": "Walk"}))
    for options in (
        ("--run-json", str(not_a_list)),
        ("--run-json", str(tmp_path / "missing.json")),
        ("--run-json", str(untitled), "--run", "Walk"),
    ):
        usage = gc.gctl("schedule", "create", "rewalk", *DAILY, *options, key=plan_key)
        assert usage.returncode == EXIT_USAGE, usage.stderr
        assert "--run" in usage.stderr
    assert not Schedule.objects.exists()


def test_a_hands_work_key_is_denied(gc: Fleet, plan_key: str) -> None:
    denied = gc.gctl("schedule", "create", "rewalk", *DAILY, "--run", "Walk")  # work, leases
    assert denied.returncode == EXIT_AUTH
    assert denied.stderr.rstrip().endswith("(scope_denied)")
    assert gc.gctl("schedules", "rewalk").returncode == EXIT_AUTH
    assert not Schedule.objects.exists()
