"""The idle sweep (fleet/attempts/idle_sweep.py): a hand that heartbeats but reports no progress
for its run's progress_timeout_s is flagged once per idle spell, with its `idle` event (a webhook
kind) and the directive its run names, never weakening a stop."""

from __future__ import annotations

import json
import threading
from collections import Counter
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings

from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from fleet.attempts.idle_sweep import attempts_flag_idle
from fleet.models import Attempt
from leases import clock
from leases.models import Event
from ops import jobs as ops_jobs
from ops.models import JobRun
from webhooks import services as webhooks

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


def beat(hand, view, **body):  # noqa: ANN001, ANN201
    """A report from the claim's process (renewing), a bare heartbeat unless `body` says more."""
    return report_services.attempt_report(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        kind=body.pop("kind", "heartbeat"),
        process_id="host:1",
        **body,
    )[1]


def idle_events(**filters) -> list[Event]:  # noqa: ANN003
    return list(Event.objects.filter(kind="idle", **filters).order_by("id"))


def test_it_flags_a_heartbeating_hand_exactly_past_its_timeout_once(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=300)
    view = claim(owner, run)
    for _ in range(3):
        clock.advance(100)
        beat(owner, view)  # alive, saying nothing
    assert attempts_flag_idle().flagged == 0  # exactly at the bound: not yet
    clock.advance(0.001)
    result = attempts_flag_idle()
    assert (result.flagged, result.directives, result.events) == (1, 0, 1)
    attempt = Attempt.objects.get(pk=view.attempt.pk)
    assert attempt.idle_since == frozen_clock + timedelta(seconds=300.001)
    assert attempt.directive == "continue"  # the run names none
    [event] = idle_events()
    assert (event.attempt_id, event.hand, event.actor, event.fence) == (
        attempt.pk,
        "hand-a",
        "system",
        1,
    )
    assert event.data == {
        "run": run.pk,
        "progress_timeout_s": 300,
        "last_progress_at": None,
        "directive": "continue",
    }
    assert event.resource == f"run/{run.pk}/slot/0"
    # Again, and later while it stays idle: nothing more.
    assert attempts_flag_idle().flagged == 0
    clock.advance(50)
    beat(owner, view)
    assert attempts_flag_idle().flagged == 0
    assert len(idle_events()) == 1


def test_progress_clears_the_flag_and_a_later_spell_fires_again(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    view = claim(owner, run)
    clock.advance(61)
    assert attempts_flag_idle().flagged == 1
    answered = beat(owner, view, kind="note", message="reading the code")
    attempt = Attempt.objects.get(pk=view.attempt.pk)
    assert attempt.idle_since is None
    assert attempt.last_progress_at == frozen_clock + timedelta(seconds=61)
    assert answered.attempt.last_progress_at == attempt.last_progress_at
    clock.advance(60)
    assert attempts_flag_idle().flagged == 0  # exactly a timeout after the progress
    clock.advance(0.001)
    assert attempts_flag_idle().flagged == 1
    assert len(idle_events(attempt_id=attempt.pk)) == 2


def test_a_costed_heartbeat_is_no_progress(owner, make_run, claim, frozen_clock) -> None:  # noqa: ANN001
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    view = claim(owner, run)
    clock.advance(30)
    beat(owner, view, tokens_in=10)
    clock.advance(30.001)
    assert attempts_flag_idle().flagged == 1


def test_the_run_s_directive_is_set_but_never_weakens_a_stop(
    owner, teammate, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(
        slots=2, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60, idle_directive="pause"
    )
    paused = claim(owner, run)
    stopped = claim(teammate, run, process="host:2")
    attempt_services.attempt_set_directive(
        workspace_id=run.workspace_id, attempt_id=stopped.attempt.pk, directive="stop", actor="boss"
    )
    clock.advance(61)
    result = attempts_flag_idle()
    assert (result.flagged, result.directives, result.events) == (2, 1, 3)
    assert Attempt.objects.get(pk=paused.attempt.pk).directive == "pause"
    assert Attempt.objects.get(pk=stopped.attempt.pk).directive == "stop"
    [set_by_idle] = Event.objects.filter(kind="directive_set", actor="idle")
    assert (set_by_idle.attempt_id, set_by_idle.data) == (
        paused.attempt.pk,
        {"directive": "pause", "reason": "idle"},
    )


def test_a_stop_directive_stops_even_a_paused_attempt(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(
        slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60, idle_directive="stop"
    )
    view = claim(owner, run)
    attempt_services.attempt_set_directive(
        workspace_id=run.workspace_id, attempt_id=view.attempt.pk, directive="pause", actor="boss"
    )
    clock.advance(61)
    attempts_flag_idle()
    assert Attempt.objects.get(pk=view.attempt.pk).directive == "stop"


def test_a_late_hand_is_missing_not_idle(owner, make_run, claim, frozen_clock) -> None:  # noqa: ANN001
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    claim(owner, run)
    clock.advance(100.001)  # past the deadline: late
    assert attempts_flag_idle().flagged == 0


def test_a_run_without_a_timeout_is_never_idle(owner, make_run, claim, frozen_clock) -> None:  # noqa: ANN001
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60)
    claim(owner, run)
    clock.advance(99)
    assert attempts_flag_idle().flagged == 0


def test_the_timeout_is_the_run_s_at_the_claim(owner, make_run, claim, frozen_clock) -> None:  # noqa: ANN001
    from fleet.plan import services as plan_services

    run = make_run(slots=2, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    first = claim(owner, run)
    plan_services.run_set_idle(
        workspace_id=run.workspace_id, run_id=run.pk, progress_timeout_s=None
    )
    claim(owner, run, process="host:2")
    clock.advance(61)
    assert attempts_flag_idle().flagged == 1
    assert idle_events()[0].attempt_id == first.attempt.pk


@override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"])
def test_the_job_records_its_run_and_the_idle_webhook_fires(
    workspace, owner, make_run, claim, receiver, frozen_clock: datetime
) -> None:
    webhooks.webhook_create(workspace=workspace, url=receiver.url, kinds=["idle"], actor="boss")
    run = make_run(slots=1, heartbeat_interval_s=100, grace_s=60, progress_timeout_s=60)
    view = claim(owner, run)
    clock.advance(61)
    assert ops_jobs.idle_flag().flagged == 1
    assert JobRun.objects.get(name="flag_idle").last_processed == 1
    assert webhooks.webhooks_run()["delivered"] == 1
    [(headers, body)] = receiver.received
    assert headers["x-groundcontrol-event"] == "idle"
    assert json.loads(body)["attempt"] == view.attempt.pk


@pytest.mark.django_db(transaction=True)
def test_two_idle_sweeps_at_once_flag_each_attempt_once(
    owner, make_run, frozen_clock: datetime
) -> None:
    slots = 40
    run = make_run(
        slots=slots,
        heartbeat_interval_s=100,
        grace_s=60,
        progress_timeout_s=60,
        idle_directive="pause",
    )
    for i in range(slots):
        attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id=f"host:{i}")
    clock.advance(61)
    barrier = threading.Barrier(2)
    results, errors = [], []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(attempts_flag_idle(batch=3))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sum(r.flagged for r in results) == slots
    per_attempt = Counter(idle.attempt_id for idle in idle_events())
    assert sorted(per_attempt.values()) == [1] * slots
    assert Counter(
        Event.objects.filter(kind="directive_set").values_list("attempt_id", flat=True)
    ) == dict.fromkeys(per_attempt, 1)
    assert set(Attempt.objects.filter(run=run).values_list("directive", flat=True)) == {"pause"}
