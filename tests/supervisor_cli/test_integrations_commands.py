"""gctl's commands for a lane's schedules and GitHub integrations that the client's calls had
without a command: `gctl schedule show|update` and `gctl integrations list|create|delete`, as
sentences and as the server's JSON, with their exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from hands.models import Hand, Lane
from leases import clock
from schedules.models import GitHubIntegration, Schedule
from tests.support.live import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_AUTH = 0, 1, 2, 5
DAILY = ("--cron", "0 6 * * *", "--key", "daily-{date}", "--title", "Rewalk of {date}")


@pytest.fixture(autouse=True)
def _frozen() -> Iterator[None]:
    # The live server runs in this process: its database clock is frozen too.
    clock.freeze(START)
    yield
    clock.unfreeze()


@pytest.fixture
def plan_key(owner: Hand, lane: Lane) -> str:
    return mint(owner, ["plan", "attest"])


def test_gctl_shows_and_updates_a_schedule(gc: Fleet, plan_key: str) -> None:
    made = gc.gctl("schedule", "create", "rewalk", *DAILY, "--run", "Walk", key=plan_key)
    assert made.returncode == EXIT_OK, made.stderr
    schedule = Schedule.objects.get()
    shown = gc.gctl("schedule", "show", "rewalk", str(schedule.pk), key=plan_key)
    assert shown.stdout.splitlines()[0] == (
        f"schedule {schedule.pk}: 0 6 * * * (UTC) makes daily-{{date}} 'Rewalk of {{date}}' "
        "with 1 run"
    )
    assert shown.stdout.splitlines()[1].startswith("  next (UTC): 2030-01-02 06:00, ")
    assert (
        json.loads(
            gc.gctl("--json", "schedule", "show", "rewalk", str(schedule.pk), key=plan_key).stdout
        )["latest_try"]
        is None
    )

    off = gc.gctl(
        "schedule", "update", "rewalk", str(schedule.pk), "--off", "--run", "Walk", "--run",
        "Review", key=plan_key,
    )  # fmt: skip
    assert off.returncode == EXIT_OK, off.stderr
    assert off.stdout.splitlines() == [
        f"changed schedule {schedule.pk}: 0 6 * * * (UTC) makes daily-{{date}} "
        "'Rewalk of {date}' with 2 runs (off)",
        "  next (UTC): none while off; last try: none yet",
    ]
    schedule.refresh_from_db()
    assert (schedule.active, [run["title"] for run in schedule.runs]) == (
        False,
        ["Walk", "Review"],
    )
    on = gc.gctl(
        "--json", "schedule", "update", "rewalk", str(schedule.pk), "--on", "--cron", "0 7 * * *",
        key=plan_key,
    )  # fmt: skip
    assert (json.loads(on.stdout)["cron"], json.loads(on.stdout)["active"]) == ("0 7 * * *", True)
    nothing = gc.gctl("schedule", "update", "rewalk", str(schedule.pk), key=plan_key)
    assert nothing.returncode == EXIT_USAGE
    both = gc.gctl("schedule", "update", "rewalk", str(schedule.pk), "--on", "--off")
    assert both.returncode == EXIT_USAGE
    bad = gc.gctl(
        "schedule", "update", "rewalk", str(schedule.pk), "--cron", "every day", key=plan_key
    )
    assert (bad.returncode, "(validation_error)" in bad.stderr) == (EXIT_ERROR, True)
    missing = gc.gctl("schedule", "show", "rewalk", "999999", key=plan_key)
    assert (missing.returncode, "(not_found)" in missing.stderr) == (EXIT_ERROR, True)


def test_gctl_creates_lists_and_deletes_a_github_integration(gc: Fleet, plan_key: str) -> None:
    made = gc.gctl(
        "integrations", "create", "rewalk", "--repository", "acme/app", "--label", "agent",
        key=plan_key,
    )  # fmt: skip
    assert made.returncode == EXIT_OK, made.stderr
    integration = GitHubIntegration.objects.get()
    path = f"/api/v1/integrations/github/{integration.pk}"
    head, instructions = made.stdout.strip().split("\n")
    assert head == (
        f"created GitHub integration {integration.pk} (acme/app): {path}, issues labelled agent"
    )
    assert instructions.startswith(
        f"in acme/app's settings, add a webhook: payload URL <server>{path}, content type "
        "application/json, secret (shown once): "
    )
    secret = instructions.rsplit(" ", 1)[1]
    listed = gc.gctl("integrations", "list", "rewalk", key=plan_key)
    assert listed.stdout.strip() == head.removeprefix("created ")
    assert secret not in listed.stdout
    body = json.loads(gc.gctl("integrations", "list", "rewalk", "--json", key=plan_key).stdout)
    assert [(item["id"], item.get("secret")) for item in body] == [(integration.pk, None)]

    deleted = gc.gctl("integrations", "delete", "rewalk", str(integration.pk), key=plan_key)
    assert deleted.stdout.strip() == (
        f"deleted GitHub integration {integration.pk} of lane rewalk: GitHub's deliveries to "
        "it are refused from now on"
    )
    assert not GitHubIntegration.objects.exists()
    empty = gc.gctl("integrations", "list", "rewalk", key=plan_key)
    assert empty.stdout.strip() == "lane rewalk has no GitHub integrations"
    # A plan key without attest makes no integration.
    refused = gc.gctl(
        "integrations", "create", "rewalk", "--repository", "acme/app",
        key=mint(Hand.objects.get(name="hand-a"), ["plan"]),
    )  # fmt: skip
    assert (refused.returncode, "(scope_denied)" in refused.stderr) == (EXIT_AUTH, True)
