"""Retention: reports, events, refusals, fence verifications, finished deliveries, the
schedules' tries and GitHub's deliveries past their age, in batches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from fleet.models import Report
from harnesses.models import HookSession
from leases.clock import db_now
from leases.models import Event, FenceReceipt, FenceVerification, Refusal
from ops import jobs as ops_jobs
from schedules import github
from schedules import services as schedule_services
from schedules.models import GitHubDelivery, ScheduleTry
from webhooks.models import Webhook, WebhookDelivery

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

AGES = (5, 15, 25, 35)  # days


def aged(model, ages=AGES, per_age: int = 3, **fields) -> None:  # noqa: ANN001
    now = db_now()
    for days in ages:
        for _ in range(per_age):
            row = model.objects.create(**fields)
            model.objects.filter(pk=row.pk).update(at=now - timedelta(days=days))


def ages_left(model) -> list[int]:  # noqa: ANN001
    now = db_now()
    return sorted(
        {
            round((now - at).total_seconds() / 86_400)
            for at in model.objects.values_list("at", flat=True)
        }
    )


@override_settings(
    GC_RETENTION_REPORTS_DAYS=10, GC_RETENTION_EVENTS_DAYS=20, GC_RETENTION_REFUSALS_DAYS=30
)
def test_it_prunes_each_record_past_its_own_age_in_batches(owner, make_run, claim, lane) -> None:
    view = claim(owner, make_run())
    schedule = schedule_services.schedule_create(
        lane=lane, cron="0 6 * * *", key_pattern="d-{date}", title_pattern="D", actor="t"
    )
    aged(
        ScheduleTry,
        workspace_id=lane.workspace_id,
        schedule=schedule,
        date_key="k",
        at=db_now(),
        outcome="created",
    )
    integration = github.integration_create(lane=lane, repository="acme/app", actor="t").integration
    for days in AGES:
        delivery = GitHubDelivery.objects.create(
            workspace_id=lane.workspace_id,
            integration=integration,
            delivery_id=f"d{days}",
            event="ping",
            outcome="pong",
        )
        GitHubDelivery.objects.filter(pk=delivery.pk).update(
            received_at=db_now() - timedelta(days=days)
        )
    aged(Report, workspace_id=lane.workspace_id, attempt=view.attempt, kind="heartbeat")
    Event.objects.all().delete()
    aged(Event, workspace_id=1, kind="late")
    aged(Refusal, code="lease_held")
    aged(FenceVerification, workspace_id=1, resource="src/", fence=1, status="current")
    result = ops_jobs.records_prune(batch=2)
    assert ages_left(Report) == [5]
    assert ages_left(Event) == [5, 15]
    assert ages_left(Refusal) == [5, 15, 25]
    assert ages_left(FenceVerification) == [5, 15]  # kept as long as the events
    assert ages_left(ScheduleTry) == [5, 15]  # so are the schedules' tries
    assert sorted(GitHubDelivery.objects.values_list("delivery_id", flat=True)) == ["d15", "d5"]
    assert result.deleted == {
        "reports": 9,
        "events": 6,
        "refusals": 3,
        "address_refusals": 0,
        "fence_verifications": 6,
        "key_refusal_tallies": 0,
        "key_verification_tallies": 0,
        "handoff_requests": 0,
        "waiters": 0,
        "schedule_tries": 6,
        "github_deliveries": 2,
        "fence_receipts": 0,
        "hook_sessions": 0,
        "webhook_deliveries": 0,
    }
    assert result.processed == 32
    assert ops_jobs.records_prune(batch=2).processed == 0


@override_settings(GC_RETENTION_EVENTS_DAYS=20)
def test_it_keeps_deliveries_still_being_retried(workspace) -> None:
    webhook = Webhook.objects.create(
        workspace=workspace, url="http://127.0.0.1:9/", kinds=["late"], secret="s" * 20
    )
    old = db_now() - timedelta(days=30)
    for event_id, status in enumerate(["pending", "delivered", "failed"]):
        delivery = WebhookDelivery.objects.create(
            workspace=workspace,
            webhook=webhook,
            event_id=event_id,
            kind="late",
            body="{}",
            status=status,
        )
        WebhookDelivery.objects.filter(pk=delivery.pk).update(created_at=old)
    WebhookDelivery.objects.create(
        workspace=workspace,
        webhook=webhook,
        event_id=99,
        kind="late",
        body="{}",
        status="delivered",
    )
    assert ops_jobs.records_prune().deleted["webhook_deliveries"] == 2
    assert sorted(WebhookDelivery.objects.values_list("event_id", "status")) == [
        (0, "pending"),
        (99, "delivered"),
    ]


@override_settings(GC_RETENTION_EVENTS_DAYS=20)
def test_it_prunes_handoff_requests_as_old_as_the_events(owner, teammate) -> None:
    from leases.handoffs import handoff_ask_resource
    from leases.models import HandoffRequest
    from leases.services import lease_acquire

    now = db_now()
    for days in AGES:
        resource = f"src/{days}/"
        lease_acquire(
            workspace_id=owner.workspace_id,
            resource=resource,
            holder=owner.name,
            process_id="p",
            ttl_s=60,
        )
        view, _ = handoff_ask_resource(
            workspace_id=owner.workspace_id, holder=teammate.name, resource=resource, reason="x"
        )
        HandoffRequest.objects.filter(pk=view.request.pk).update(
            asked_at=now - timedelta(days=days)
        )
    assert ops_jobs.records_prune(batch=1).deleted["handoff_requests"] == 2
    left = HandoffRequest.objects.values_list("resource", flat=True)
    assert sorted(left) == ["src/15/", "src/5/"]


@override_settings(GC_RETENTION_EVENTS_DAYS=20)
def test_it_prunes_push_receipts_and_harness_sessions_as_old_as_the_events(owner) -> None:
    now = db_now()
    for days in AGES:
        FenceReceipt.objects.create(
            workspace_id=owner.workspace_id,
            repository="example.com/acme/app",
            sha=f"{days:040d}",
            accepted=True,
            at=now - timedelta(days=days),
            hand=owner.name,
            signature="0" * 64,
        )
        session = HookSession.objects.create(
            workspace_id=owner.workspace_id,
            hand=owner,
            harness="claude-code",
            session_id=f"s{days}",
            process_id=f"claude-code:s{days}",
            ttl_s=300,
        )
        HookSession.objects.filter(pk=session.pk).update(last_event_at=now - timedelta(days=days))
    result = ops_jobs.records_prune(batch=1)
    assert (result.deleted["fence_receipts"], result.deleted["hook_sessions"]) == (2, 2)
    assert sorted(FenceReceipt.objects.values_list("sha", flat=True)) == [
        f"{5:040d}",
        f"{15:040d}",
    ]
    assert sorted(HookSession.objects.values_list("session_id", flat=True)) == ["s15", "s5"]
