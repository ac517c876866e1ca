"""/healthz, /readyz and /metrics."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import OperationalError
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from evidence.services import attempt_finish
from fleet.attempts import reports as report_services
from fleet.attempts import services as attempt_services
from leases import clock
from leases import services as leases
from leases.errors import LeaseHeld
from ops import jobs as ops_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


@pytest.fixture(autouse=True)
def metrics_open(settings) -> None:  # noqa: ANN001
    """These tests scrape as a private network's Prometheus would (GC_METRICS_OPEN)."""
    settings.GC_METRICS_OPEN = True


def scrape(client, **headers) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:  # noqa: ANN001
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_healthz_answers_while_the_process_is_up(client) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_is_ready_when_database_and_redis_answer(client, settings) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    expected_redis = "ok" if settings.REDIS_URL else "not configured"
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": expected_redis},
    }


@override_settings(REDIS_URL="redis://127.0.0.1:1/0")
def test_readyz_is_unavailable_when_redis_is_down(client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unavailable")


def test_readyz_is_unavailable_when_the_database_is_down(client, monkeypatch) -> None:
    class Down:
        def cursor(self) -> None:
            raise OperationalError("connection refused")

    monkeypatch.setattr("ops.views.connection", Down())
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unavailable (OperationalError)"


def test_metrics_count_attempts_and_leases_by_state_refusals_and_sweep_lag(
    client, owner, teammate, make_run, frozen_clock: datetime
) -> None:
    def claim(run, process: str, hand=owner):  # noqa: ANN001, ANN202
        return attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=process)

    steady = make_run(heartbeat_interval_s=1000, grace_s=60, slots=3)
    live, done, given_back = (claim(steady, f"s:{i}") for i in range(3))
    late = claim(make_run(heartbeat_interval_s=100, grace_s=60, slots=1), "late")
    stalled = claim(make_run(heartbeat_interval_s=100, grace_s=20, slots=1), "stalled")
    claim(make_run(heartbeat_interval_s=50, grace_s=10, slots=1), "lost")
    attempt_finish(hand=owner, attempt_id=done.attempt.pk, fence=1, process_id="s:1", evidence=[])
    attempt_services.attempt_release(
        hand=owner, attempt_id=given_back.attempt.pk, fence=1, process_id="s:2", reason="no"
    )
    report_services.attempt_report(
        hand=owner, attempt_id=live.attempt.pk, fence=1, kind="note", message="hi"
    )
    leases.lease_acquire(workspace_id=1, resource="db", holder="a", process_id="p", ttl_s=30)
    leases.lease_acquire(workspace_id=1, resource="port", holder="a", process_id="p", ttl_s=900)
    for _ in range(2):
        with pytest.raises(LeaseHeld):
            leases.lease_acquire(
                workspace_id=1, resource="port", holder="b", process_id="q", ttl_s=9
            )
    assert (late.state, stalled.state) == ("live", "live")
    clock.advance(115)

    samples = scrape(client)
    attempts = {
        state: samples[("gc_attempts", (("state", state),))]
        for state in ("live", "late", "stalled", "lost", "finished", "released")
    }
    assert attempts == {"live": 1, "late": 1, "stalled": 1, "lost": 1, "finished": 1, "released": 1}
    assert samples[("gc_leases", (("kind", "resource"), ("state", "live")))] == 1
    assert samples[("gc_leases", (("kind", "resource"), ("state", "lost")))] == 1
    assert samples[("gc_leases", (("kind", "slot"), ("state", "free")))] == 2
    assert samples[("gc_refusals", (("code", "lease_held"),))] == 2
    assert samples[("gc_reports_total", ())] >= 1
    # The expired resource lease has waited longest: its deadline was 85 seconds ago.
    assert samples[("gc_sweep_lag_seconds", ())] == pytest.approx(85)

    ops_jobs.leases_sweep()
    samples = scrape(client)
    assert samples[("gc_sweep_lag_seconds", ())] == 0
    assert samples[("gc_leases", (("kind", "resource"), ("state", "free")))] == 1
    assert samples[("gc_job_runs_total", (("job", "sweep_leases"),))] == 1
    assert samples[("gc_job_last_processed", (("job", "sweep_leases"),))] == 4
    assert samples[("gc_job_last_lag_seconds", (("job", "sweep_leases"),))] == pytest.approx(85)
    assert ("gc_sweep_duration_seconds", ()) in samples


@override_settings(GC_METRICS_TOKEN="s3cret-token")
def test_metrics_can_require_a_bearer_token(client) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")[("gc_reports_total", ())] == 0


@override_settings(GC_METRICS_TOKEN="", GC_METRICS_OPEN=False)
def test_metrics_are_closed_without_a_token_unless_opened(client) -> None:
    """Production-safe by default (issue 18, item 7): no token and not opened, no metrics."""
    answer = client.get("/metrics")
    assert answer.status_code == 401 and b"GC_METRICS_OPEN" in answer.content
