"""Webhooks: signed deliveries to a real local HTTP server, after commit, retried with backoff."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from apikit.errors import ValidationFailed
from evidence.services import attempt_finish
from leases import clock
from leases.models import Event, Refusal
from ops import jobs as ops_jobs
from ops.models import JobRun
from webhooks import services as webhooks
from webhooks.models import Webhook, WebhookDelivery

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]

SECRET = "whsec_test_0123456789abcdef"


@pytest.fixture(autouse=True)
def _local_receivers() -> Iterator[None]:
    # The receivers here listen on 127.0.0.1, which webhooks refuse unless the operator allows
    # it (tests/webhooks/test_webhook_targets.py); so these tests allow it, as an operator would.
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"]):
        yield


@pytest.fixture
def run(make_run):  # noqa: ANN001, ANN201
    return make_run(heartbeat_interval_s=100, grace_s=60, slots=1)


def register(workspace, url: str, kinds: list[str]) -> Webhook:  # noqa: ANN001
    return webhooks.webhook_create(
        workspace=workspace, url=url, kinds=kinds, actor="boss", secret=SECRET
    ).webhook


def test_it_delivers_a_signed_event_the_sweep_recorded(
    workspace, owner, run, claim, receiver, frozen_clock: datetime
) -> None:
    webhook = register(workspace, receiver.url, ["late", "lost"])
    view = claim(owner, run)
    clock.advance(101)
    ops_jobs.leases_sweep()
    assert receiver.received == []  # recorded, not yet delivered
    assert webhooks.webhooks_run() == {"dispatched": 1, "delivered": 1, "retrying": 0, "failed": 0}

    [(headers, body)] = receiver.received
    assert webhooks.webhook_verify(
        secret=SECRET, header=headers["x-groundcontrol-signature"], body=body
    )
    assert not webhooks.webhook_verify(
        secret="another-secret-entirely", header=headers["x-groundcontrol-signature"], body=body
    )
    assert not webhooks.webhook_verify(
        secret=SECRET, header=headers["x-groundcontrol-signature"], body=body + b" "
    )
    assert headers["x-groundcontrol-event"] == "late"
    assert headers["content-type"] == "application/json"
    payload = json.loads(body)
    late = Event.objects.get(kind="late")
    assert payload == {
        "id": late.pk,
        "kind": "late",
        "at": (frozen_clock + timedelta(seconds=101)).isoformat(),
        "workspace": workspace.pk,
        "actor": "system",
        "actor_key": None,  # the sweep acts with no key
        "hand": "hand-a",
        "attempt": view.attempt.pk,
        "resource": f"run/{run.pk}/slot/0",
        "fence": 1,
        "data": late.data,
    }
    delivery = WebhookDelivery.objects.get()
    assert (delivery.webhook_id, delivery.event_id, delivery.status, delivery.attempts) == (
        webhook.pk,
        late.pk,
        "delivered",
        1,
    )
    assert headers["x-groundcontrol-delivery"] == str(delivery.pk)
    assert delivery.delivered_at == frozen_clock + timedelta(seconds=101)
    assert [(e["status_code"], e["response"], e["error"]) for e in delivery.log] == [
        (200, "thanks", "")
    ]
    assert not Event.objects.filter(dispatched_at=None).exists()
    assert webhooks.webhooks_run()["delivered"] == 0  # nothing twice


def test_it_sends_only_subscribed_kinds_of_the_webhooks_own_workspace(
    workspace, outsider_workspace, owner, run, claim, receiver, frozen_clock: datetime
) -> None:
    register(workspace, receiver.url, ["finished"])
    register(outsider_workspace, receiver.url, ["claimed", "finished", "late"])
    view = claim(owner, run)
    clock.advance(101)
    ops_jobs.leases_sweep()  # late: not subscribed in this workspace
    attempt_finish(
        hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", evidence=[]
    )
    webhooks.webhooks_run()
    assert [json.loads(body)["kind"] for _, body in receiver.received] == ["finished"]
    assert WebhookDelivery.objects.count() == 1


def test_it_retries_with_exponential_backoff_and_records_every_attempt(
    workspace, owner, run, claim, receiver, frozen_clock: datetime
) -> None:
    register(workspace, receiver.url, ["claimed"])
    receiver.statuses = [500, 503]
    claim(owner, run)
    webhooks.webhooks_run()
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, 500)
    assert delivery.next_attempt_at == frozen_clock + timedelta(seconds=10)

    steps = [(9.999, 1), (0.001, 2), (19.999, 2), (0.001, 3)]
    for seconds, attempts in steps:
        clock.advance(seconds)
        webhooks.webhooks_run()
        assert len(receiver.received) == attempts
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("delivered", 3, None)
    assert [(e["attempt"], e["status_code"], e["response"]) for e in delivery.log] == [
        (1, 500, "try later"),
        (2, 503, "try later"),
        (3, 200, "thanks"),
    ]
    # The same body every time, each signed afresh.
    bodies = {body for _, body in receiver.received}
    assert len(bodies) == 1
    for headers, body in receiver.received:
        assert webhooks.webhook_verify(
            secret=SECRET, header=headers["x-groundcontrol-signature"], body=body
        )


@override_settings(GC_WEBHOOK_MAX_ATTEMPTS=2, GC_WEBHOOK_BACKOFF_S=1)
def test_it_gives_up_after_the_last_attempt_and_records_why(
    workspace, owner, run, claim, frozen_clock: datetime
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    register(workspace, f"http://127.0.0.1:{port}/", ["claimed"])
    claim(owner, run)
    webhooks.webhooks_run()
    clock.advance(1)
    result = webhooks.webhooks_run()
    assert (result["failed"], result["retrying"]) == (1, 0)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("failed", 2, None)
    assert all(e["error"].startswith("ConnectError") for e in delivery.log)
    assert delivery.last_status_code is None
    clock.advance(3600)
    assert webhooks.webhooks_run()["failed"] == 0


def test_dispatching_an_event_again_never_makes_a_second_delivery(
    workspace, owner, run, claim, receiver
) -> None:
    register(workspace, receiver.url, ["claimed"])
    claim(owner, run)
    assert webhooks.events_dispatch() == 1
    assert webhooks.events_dispatch() == 0
    Event.objects.update(dispatched_at=None)  # as if a second dispatcher had raced the first
    webhooks.events_dispatch()
    assert WebhookDelivery.objects.count() == 1


def test_a_paused_webhook_gets_nothing(workspace, owner, run, claim, receiver) -> None:
    webhook = register(workspace, receiver.url, ["claimed"])
    webhooks.webhook_set_active(workspace_id=workspace.pk, webhook_id=webhook.pk, active=False)
    claim(owner, run)
    webhooks.webhooks_run()
    assert receiver.received == []
    assert WebhookDelivery.objects.count() == 0


def test_a_sweep_enqueues_delivery_only_after_its_commit(
    workspace,
    owner,
    run,
    claim,
    frozen_clock: datetime,
    monkeypatch,
    django_capture_on_commit_callbacks,
) -> None:
    from groundcontrol.celery import app

    sent: list[str] = []
    monkeypatch.setattr(app, "send_task", lambda name, **options: sent.append(name))
    claim(owner, run)
    clock.advance(101)
    with override_settings(GC_NOTIFY_ON_COMMIT=True):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            ops_jobs.leases_sweep()
        assert sent == []  # nothing is enqueued before the transaction commits
        for callback in callbacks:
            callback()
    assert sent == ["fleet.deliver_webhooks"]


def test_a_broker_that_is_down_only_delays_notifications(
    owner, run, claim, frozen_clock: datetime, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from groundcontrol.celery import app

    def down(name: str, **options: object) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(app, "send_task", down)
    claim(owner, run)
    clock.advance(101)
    with override_settings(GC_NOTIFY_ON_COMMIT=True):
        with django_capture_on_commit_callbacks(execute=True):
            result = ops_jobs.leases_sweep()
    assert result.events == 1
    assert Event.objects.filter(kind="late").count() == 1


def test_it_refuses_a_url_that_is_not_http_and_an_unknown_kind(workspace) -> None:
    with pytest.raises(ValidationFailed):
        webhooks.webhook_create(
            workspace=workspace, url="file:///etc/passwd", kinds=["late"], actor="boss"
        )
    with pytest.raises(ValidationFailed):
        webhooks.webhook_create(
            workspace=workspace, url="https://example.com/h", kinds=["late", "nope"], actor="boss"
        )
    assert Webhook.objects.count() == 0
    assert Refusal.objects.filter(code="validation_error").count() == 2


def test_the_command_registers_a_webhook_and_prints_its_secret_once(workspace) -> None:
    out = StringIO()
    call_command(
        "webhook_add",
        "--workspace",
        "acme",
        "--url",
        "https://hooks.example.com/gc",
        "--kind",
        "late",
        "--kind",
        "lost",
        "--json",
        stdout=out,
    )
    printed = json.loads(out.getvalue())
    webhook = Webhook.objects.get(pk=printed["id"])
    assert (webhook.workspace_id, webhook.url, webhook.kinds) == (
        workspace.pk,
        "https://hooks.example.com/gc",
        ["late", "lost"],
    )
    assert printed["secret"] == webhook.secret and webhook.secret.startswith("whsec_")
    with pytest.raises(CommandError, match="not_found"):
        call_command(
            "webhook_add", "--workspace", "nope", "--url", "https://x.example/", "--kind", "late"
        )


def test_a_receiver_refuses_an_old_signature() -> None:
    body = b'{"kind":"late"}'
    header = webhooks.webhook_signature(secret=SECRET, timestamp=1_000_000, body=body)
    assert webhooks.webhook_verify(secret=SECRET, header=header, body=body, now=1_000_100)
    assert not webhooks.webhook_verify(secret=SECRET, header=header, body=body, now=1_000_400)
    assert not webhooks.webhook_verify(secret=SECRET, header="garbage", body=body)
    assert time.time() > 1_000_400


def test_the_periodic_task_delivers_and_records_its_run(
    workspace, owner, run, claim, receiver
) -> None:
    from ops.tasks import deliver_webhooks

    register(workspace, receiver.url, ["claimed"])
    claim(owner, run)
    result = deliver_webhooks()  # a task called directly runs here, as the embedded timer does
    assert (result["dispatched"], result["delivered"], result["failed"]) == (1, 1, 0)
    assert len(receiver.received) == 1
    job = JobRun.objects.get(name="deliver_webhooks")
    assert (job.runs, job.last_processed) == (1, 1)


def test_a_run_done_webhook_hears_of_the_last_finish(
    workspace, owner, run, claim, receiver, frozen_clock: datetime
) -> None:
    register(workspace, receiver.url, ["run_done"])
    view = claim(owner, run)
    attempt_finish(
        hand=owner,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id=view.attempt.process_id,
        evidence=[],
    )
    assert webhooks.webhooks_run()["delivered"] == 1
    [(headers, body)] = receiver.received
    assert headers["x-groundcontrol-event"] == "run_done"
    payload = json.loads(body)
    assert (payload["kind"], payload["data"]) == ("run_done", {"run": run.pk})
