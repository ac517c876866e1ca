"""The hot path (fleet/hotpath.py): a plain renew, acquire or report answers exactly as the full
DRF view does, a call it hands over is counted once, and a heartbeat costs what a renewal does."""

from __future__ import annotations

import copy
from datetime import datetime

import pytest
from django.test import override_settings

from fleet.models import Report
from leases import clock
from tests.api.conftest import API, Api, error_of
from tests.api.test_hand_calls import claim, report

pytestmark = pytest.mark.django_db

# A query string is not plain (it may carry DRF's ?format=): it sends the call to the full view.
FULL = "?via=full"
VOLATILE = {"X-Request-ID", "Content-Length"}


def both(api: Api, path: str, first: dict, second: dict) -> tuple:
    fast = api.post(path, first)
    full = api.post(path + FULL, second)
    return fast, full


def same_answer(fast, full) -> None:  # noqa: ANN001
    assert fast.status_code == full.status_code, (fast.content, full.content)
    headers = {k: v for k, v in fast.headers.items() if k not in VOLATILE}
    assert headers == {k: v for k, v in full.headers.items() if k not in VOLATILE}
    fast_body, full_body = copy.deepcopy(fast.json()), copy.deepcopy(full.json())
    if "error" in fast_body:  # each answer names its own request
        assert fast_body["error"].pop("request_id") == fast["X-Request-ID"]
        assert full_body["error"].pop("request_id") == full["X-Request-ID"]
    assert fast_body == full_body


def test_a_plain_renew_and_acquire_answer_as_the_full_view(
    api_a: Api, frozen_clock: datetime
) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    same_answer(*both(api_a, "/leases/acquire", body, body))
    renew = {"resource": "src/", "fence": 1, "process_id": "p1"}
    same_answer(*both(api_a, "/leases/renew", renew, renew))


def test_a_plain_report_answers_as_the_full_view(api_a: Api, run, frozen_clock: datetime) -> None:
    attempt = claim(api_a, run)
    body = {
        "fence": attempt["fence"],
        "process_id": "host-a:1",
        "kind": "progress",
        "message": "half",
        "percent": 50,
        "details": {"step": 2},
    }
    same_answer(*both(api_a, f"/attempts/{attempt['id']}/reports", body, body))
    fast, full = Report.objects.order_by("id")
    assert (fast.kind, fast.message, fast.percent, fast.details, fast.renewed) == (
        full.kind,
        full.message,
        full.percent,
        full.details,
        full.renewed,
    )
    assert fast.at == full.at == frozen_clock


def test_a_refusal_on_the_fast_path_answers_as_the_full_view(
    api_a: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    body = {"resource": "src/", "ttl_s": 60, "process_id": "p1"}
    api_a.post("/leases/acquire", body)
    fast, full = both(api_b, "/leases/acquire", body, body)
    same_answer(fast, full)
    error_of(fast, 409, "lease_held")
    stale = {"resource": "src/", "fence": 7, "process_id": "p1"}
    same_answer(*both(api_a, "/leases/renew", stale, stale))
    attempt = claim(api_a, run)
    clock.advance(run.heartbeat_interval_s + run.grace_s + 1)
    lost = {"fence": attempt["fence"], "process_id": "host-a:1", "kind": "heartbeat"}
    same_answer(*both(api_a, f"/attempts/{attempt['id']}/reports", lost, lost))


@override_settings(GC_RATE_LIMIT_PER_MINUTE=3)
def test_a_call_handed_to_the_full_view_is_counted_once(api_a: Api) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 60, "process_id": "p1"})
    # A process id with surrounding spaces is not plain: the serializer trims it, on the full view.
    body = {"resource": "src/", "fence": 1, "process_id": " p1 "}
    assert api_a.post("/leases/renew", body).status_code == 200
    assert api_a.post("/leases/renew", body).status_code == 200
    error_of(api_a.post("/leases/renew", body), 429, "rate_limited")


@pytest.mark.postgres
def test_a_heartbeat_is_the_key_lookup_and_one_statement(
    api_a: Api, run, django_assert_num_queries
) -> None:
    attempt = claim(api_a, run)
    report(api_a, attempt)  # last_used_at is fresh for the minute
    # The key joined with its hand, workspace and lane; the renewal, the report and the
    # attempt's stamp in one statement.
    with django_assert_num_queries(2):
        answer = report(api_a, attempt)
    assert answer.status_code == 200 and answer.json()["renewed"] is True
    assert Report.objects.filter(attempt_id=attempt["id"], renewed=True).count() == 2


def test_the_hot_path_serves_only_posts_to_its_endpoints(api_a: Api) -> None:
    assert api_a.client.get(API + "/leases/renew").status_code in (401, 405)
