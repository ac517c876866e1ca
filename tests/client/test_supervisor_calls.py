"""A supervisor's calls through the Python client against the live server: a lane's schedules
(created with an Idempotency-Key that survives the client's own retry, listed, changed,
deleted), the beat job's tries, and GitHub integrations whose secret is in the first answer
only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from groundcontrol_client import (
    Client,
    GitHubIntegration,
    NotFound,
    RetryPolicy,
    Schedule,
    ScheduleTry,
    ScopeDenied,
    ValidationFailed,
    run_plan,
)
from groundcontrol_client.core.errors import GroundControlError

from fleet.models import WorkPackage
from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import clock
from schedules import jobs
from schedules.models import GitHubIntegration as IntegrationRecord
from schedules.models import Schedule as ScheduleRecord
from tests.client.conftest import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAILY: dict[str, Any] = {
    "cron": "0 6 * * *",
    "key_pattern": "daily-{date}",
    "title_pattern": "Rewalk of {date}",
    "runs": [run_plan(title="Walk", slots=2)],
}


@pytest.fixture(autouse=True)
def _frozen() -> Any:
    # The live server runs in this process: its database clock is frozen too.
    clock.freeze(START)
    yield
    clock.unfreeze()


@pytest.fixture
def boss(gc: Fleet, owner: Hand, lane: Any) -> Client:
    # `attest` for the GitHub integrations, whose secret attests CI's grade.
    client = Client(gc.url, mint(owner, ["plan", "attest"]))
    yield client
    client.close()


class LosesFirstAnswer(httpx.BaseTransport):
    """Sends every request to the server, but loses the answer to the first POST: the server
    acted, the client heard nothing (a read timeout), as when a proxy drops a connection."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.posts: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST":
            self.posts.append(request)
            if len(self.posts) == 1:
                response.read()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_it_creates_lists_changes_and_deletes_a_schedule(boss: Client) -> None:
    made = boss.schedule_create("rewalk", **DAILY)
    assert isinstance(made, Schedule)
    assert (made.lane, made.cron, made.active, made.created_by) == (
        "rewalk",
        "0 6 * * *",
        True,
        "hand-a",
    )
    assert made.planned[:2] == [
        datetime(2030, 1, 2, 6, 0, tzinfo=UTC),
        datetime(2030, 1, 3, 6, 0, tzinfo=UTC),
    ]
    assert made.runs[0]["slots"] == 2
    record = ScheduleRecord.objects.get()
    assert (record.pk, record.key_pattern, record.runs[0]["title"]) == (
        made.id,
        "daily-{date}",
        "Walk",
    )

    assert [s.id for s in boss.schedules("rewalk")] == [made.id]
    assert boss.schedule("rewalk", made.id).title_pattern == "Rewalk of {date}"

    off = boss.schedule_update("rewalk", made.id, active=False)
    assert (off.active, off.planned) == (False, [])
    record.refresh_from_db()
    assert record.active is False
    # Only what is given changes: the patterns stay.
    assert (record.key_pattern, record.cron) == ("daily-{date}", "0 6 * * *")

    hourly = boss.schedule_update(
        "rewalk", made.id, cron="0 * * * *", key_pattern="hourly-{date}-{time}", active=True
    )
    assert hourly.planned[0] == datetime(2030, 1, 1, 13, 0, tzinfo=UTC)
    assert hourly.title_pattern == "Rewalk of {date}"

    boss.schedule_delete("rewalk", made.id)
    assert not ScheduleRecord.objects.exists()
    with pytest.raises(NotFound):
        boss.schedule_delete("rewalk", made.id)


def losing_client(
    gc: Fleet, owner: Hand, scopes: tuple[str, ...] = ("plan",)
) -> tuple[Client, LosesFirstAnswer]:
    transport = LosesFirstAnswer()
    client = Client(
        gc.url,
        mint(owner, list(scopes)),
        transport=transport,
        retry=RetryPolicy(retries=2),
        sleep=lambda _: None,
    )
    return client, transport


def test_a_create_whose_answer_was_lost_is_retried_with_the_same_key_and_makes_one(
    gc: Fleet, owner: Hand, lane: Any
) -> None:
    client, transport = losing_client(gc, owner)
    made = client.schedule_create("rewalk", **DAILY)
    assert len(transport.posts) == 2
    keys = {post.headers["Idempotency-Key"] for post in transport.posts}
    assert len(keys) == 1 and keys.pop().startswith("gc-")
    assert ScheduleRecord.objects.get().pk == made.id

    # Each call sends a key of its own: a second create makes a second schedule.
    client.schedule_create("rewalk", **{**DAILY, "key_pattern": "other-{date}"})
    assert ScheduleRecord.objects.count() == 2
    assert len({post.headers["Idempotency-Key"] for post in transport.posts}) == 2
    client.close()


def test_an_integration_whose_answer_was_lost_is_made_once_and_its_replay_has_no_secret(
    gc: Fleet, owner: Hand, lane: Any
) -> None:
    # An integration's secret attests: making one takes `attest`.
    client, transport = losing_client(gc, owner, ("plan", "attest"))
    issued = client.github_integration_create("rewalk", repository="acme/app", label="agent")
    assert len(transport.posts) == 2
    assert IntegrationRecord.objects.get().pk == issued.id
    # The secret was in the lost answer only: the way on is to delete it and make another.
    assert issued.secret is None
    client.close()


def test_a_given_idempotency_key_replays_and_refuses_another_body(boss: Client) -> None:
    first = boss.schedule_create("rewalk", **DAILY, idempotency_key="plan-1")
    again = boss.schedule_create("rewalk", **DAILY, idempotency_key="plan-1")
    assert again.id == first.id
    assert ScheduleRecord.objects.count() == 1
    with pytest.raises(GroundControlError) as refused:
        boss.schedule_create("rewalk", **{**DAILY, "cron": "0 7 * * *"}, idempotency_key="plan-1")
    assert refused.value.code == "idempotency_conflict"
    assert ScheduleRecord.objects.count() == 1


def test_a_bad_run_is_refused_naming_it_and_nothing_is_written(boss: Client) -> None:
    with pytest.raises(ValidationFailed) as refused:
        boss.schedule_create("rewalk", **{**DAILY, "runs": [{"title": "ok"}, {"slots": 1}]})
    assert "runs[1].title" in refused.value.fields["fields"]
    with pytest.raises(ValidationFailed):
        boss.schedule_create("rewalk", **{**DAILY, "cron": "61 * * * *"})
    assert not ScheduleRecord.objects.exists()


def test_the_tries_are_the_beat_jobs_newest_first(boss: Client) -> None:
    made = boss.schedule_create("rewalk", **DAILY)
    assert boss.schedule_tries("rewalk", made.id) == []
    assert boss.schedule_latest_try("rewalk", made.id) is None
    clock.freeze(datetime(2030, 1, 2, 6, 0, tzinfo=UTC))
    jobs.schedules_run()
    clock.freeze(datetime(2030, 1, 3, 6, 0, tzinfo=UTC))
    jobs.schedules_run()

    tries = boss.schedule_tries("rewalk", made.id)
    assert all(isinstance(row, ScheduleTry) for row in tries)
    assert [(row.date_key, row.outcome) for row in tries] == [
        ("2030-01-03T06:00Z", "created"),
        ("2030-01-02T06:00Z", "created"),
    ]
    package = WorkPackage.objects.get(key="daily-2030-01-03")
    assert tries[0].work_package == package.pk
    assert tries[0].error is None
    latest = boss.schedule_latest_try("rewalk", made.id)
    assert latest is not None and latest.id == tries[0].id


def test_an_integrations_secret_is_in_the_first_answer_only(boss: Client) -> None:
    issued = boss.github_integration_create(
        "rewalk", repository="acme/app", label="agent", idempotency_key="gh-1"
    )
    assert isinstance(issued, GitHubIntegration)
    record = IntegrationRecord.objects.get()
    assert issued.secret == record.secret and issued.secret.startswith("ghsec_")
    assert (issued.repository, issued.label, issued.delivery_path) == (
        "acme/app",
        "agent",
        f"/api/v1/integrations/github/{record.pk}",
    )
    replayed = boss.github_integration_create(
        "rewalk", repository="acme/app", label="agent", idempotency_key="gh-1"
    )
    assert (replayed.id, replayed.secret) == (issued.id, None)

    (listed,) = boss.github_integrations("rewalk")
    assert (listed.id, listed.secret, listed.active) == (issued.id, None, True)
    unlabelled = boss.github_integration_create("rewalk", repository="acme/app")
    assert unlabelled.label is None and unlabelled.secret

    boss.github_integration_delete("rewalk", issued.id)
    assert list(IntegrationRecord.objects.values_list("pk", flat=True)) == [unlabelled.id]
    with pytest.raises(NotFound):
        boss.github_integration_delete("rewalk", issued.id)


def test_a_hands_key_and_another_workspaces_lane_are_refused(
    gc: Fleet, boss: Client, outsider_workspace: Workspace
) -> None:
    worker = Client(gc.url, gc.key_a)  # work and leases only
    with pytest.raises(ScopeDenied):
        worker.schedule_create("rewalk", **DAILY)
    with pytest.raises(ScopeDenied):
        worker.github_integrations("rewalk")
    worker.close()
    hand_services.lane_create(workspace=outsider_workspace, slug="theirs", name="Theirs")
    with pytest.raises(NotFound):
        boss.schedule_create("theirs", **DAILY)
    with pytest.raises(NotFound):
        boss.github_integration_create("theirs", repository="acme/app")
    assert not ScheduleRecord.objects.exists() and not IntegrationRecord.objects.exists()
