"""The hot calls and handoff requests (PostgreSQL): a renewal, a renew-all and a heartbeat show
the tenure's open requests (`handoff_requests`), and read them only when the lease row counts
some: the common renewal is still one statement and no query."""

from __future__ import annotations

from datetime import datetime
from unittest import mock

import pytest

from leasing import hot
from tests.support.api import Api, claim, report

pytestmark = pytest.mark.django_db

RENEW = {"resource": "src/auth/", "fence": 1, "process_id": "p1"}


@pytest.fixture
def holder(api_a: Api) -> Api:
    return api_a


def _ask(api: Api, **body) -> dict:  # noqa: ANN003
    answer = api.post("/leases/handoff", {"reason": "the login bug", **body})
    assert answer.status_code == 201, answer.content
    return answer.json()


def _asking(requests: list[dict]) -> list[str]:
    return [request["from"] for request in requests]


def test_a_renewal_and_a_renew_all_show_the_requests_on_each_tenure(
    holder: Api, api_b: Api, boss: Api, frozen_clock: datetime
) -> None:
    holder.post("/leases/acquire", {"resource": "src/auth/", "ttl_s": 60, "process_id": "p1"})
    holder.post("/leases/acquire", {"resource": "docs/", "ttl_s": 60, "process_id": "p1"})
    expected: list[str] = []
    for step in ("none", "one", "two"):
        if step != "none":
            asker = api_b if step == "one" else boss
            asked = _ask(asker, resource="src/auth/x")
            expected.append(asker.hand.name)
        renewed = holder.post("/leases/renew", RENEW)
        assert renewed.status_code == 200, renewed.content
        assert _asking(renewed.json()["handoff_requests"]) == expected, step
        everything = holder.post("/leases/renew-all", {"process_id": "p1"})
        assert everything.status_code == 200, everything.content
        by_name = {lease["resource"]: lease for lease in everything.json()["renewed"]}
        assert by_name["src/auth/"]["handoff_requests"] == renewed.json()["handoff_requests"]
        assert by_name["docs/"]["handoff_requests"] == []
    assert asked["id"] == renewed.json()["handoff_requests"][-1]["id"]
    assert expected == ["hand-b", "boss"]


def test_a_heartbeat_and_a_report_show_the_requests_on_the_slot(
    holder: Api, api_b: Api, run, frozen_clock: datetime
) -> None:
    attempt = claim(holder, run)
    for asked in (False, True):
        if asked:
            _ask(api_b, run=run.pk, slot=0)
        for body in ({}, {"message": "half", "percent": 50}):
            answer = report(holder, attempt, **body)
            assert answer.status_code == 200, answer.content
            assert _asking(answer.json()["handoff_requests"]) == (["hand-b"] if asked else [])


def test_a_renewal_with_a_pending_request_costs_one_query_more(
    holder: Api, api_b: Api, run, django_assert_num_queries
) -> None:
    attempt = claim(holder, run)
    holder.post("/leases/acquire", {"resource": "src/auth/", "ttl_s": 60, "process_id": "p1"})
    report(holder, attempt)  # the minute's record, and the lane's slug, are behind us
    # Nothing pending: the statement alone, as in test_hot_path.py.
    with (
        mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements,
        django_assert_num_queries(0),
    ):
        assert holder.post("/leases/renew", RENEW).json()["handoff_requests"] == []
        assert report(holder, attempt).json()["handoff_requests"] == []
    assert statements.call_count == 2
    _ask(api_b, resource="src/auth/")
    _ask(api_b, run=run.pk, slot=0)
    # A pending request: the statement, then one read of the tenure's open requests.
    with (
        mock.patch.object(hot, "run_statement", wraps=hot.run_statement) as statements,
        django_assert_num_queries(2),
    ):
        renewed = holder.post("/leases/renew", RENEW)
        beat = report(holder, attempt)
    assert statements.call_count == 2
    assert len(renewed.json()["handoff_requests"]) == len(beat.json()["handoff_requests"]) == 1


def test_a_failing_read_of_the_requests_still_answers_the_applied_renewal(
    holder: Api, api_b: Api, run
) -> None:
    from django.db import DatabaseError

    from leases import handoffs
    from leases.models import Lease

    attempt = claim(holder, run)
    holder.post("/leases/acquire", {"resource": "src/auth/", "ttl_s": 60, "process_id": "p1"})
    _ask(api_b, resource="src/auth/")
    _ask(api_b, run=run.pk, slot=0)
    with mock.patch.object(handoffs, "pending", side_effect=DatabaseError("injected")):
        renewed = holder.post("/leases/renew", RENEW)
        beat = report(holder, attempt)
    assert renewed.status_code == beat.status_code == 200
    assert renewed.json()["handoff_requests"] == beat.json()["handoff_requests"] == []
    # The count stays: the next renewal shows them.
    assert Lease.objects.get(resource="src/auth/").handoff_open == 1
    assert len(holder.post("/leases/renew", RENEW).json()["handoff_requests"]) == 1
