"""Handoffs under contention on PostgreSQL, each thread with its own connection, through Django:

- a release racing a decline of the same request: exactly one answer wins, the other is a
  clear 409 (handoff_answered), and the lease row's count ends at 0;
- many askers at once for one tenure: bounded, one request each, the count equal to the rows;
- renewals racing new asks (hot path): the count is never lost; every request is seen by the
  holder on the renewal that raced it or the next one."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from django.db import connection
from django.test import Client

from hands import services as hand_services
from leases.handoffs import MAX_OPEN_PER_TENURE
from leases.models import Event, HandoffRequest, Lease
from tests.support.api import mint

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def _post(key: str, path: str, payload: dict) -> tuple[int, dict]:
    response = Client().post(
        "/api/v1" + path,
        data=json.dumps(payload),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    return response.status_code, response.json()


def _at_once(calls: list[Callable[[], tuple[int, dict]]]) -> list[tuple[int, dict]]:
    start = threading.Barrier(len(calls))
    answers: list[tuple[int, dict] | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            start.wait()
            answers[index] = calls[index]()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(answer is not None for answer in answers)
    return answers  # type: ignore[return-value]


def _hand(workspace, name: str) -> str:  # noqa: ANN001
    hand, _ = hand_services.hand_create(workspace=workspace, name=name)
    return mint(hand, ["leases"])


def _take(key: str, resource: str) -> dict:
    status, body = _post(
        key, "/leases/acquire", {"resource": resource, "ttl_s": 60, "process_id": "p"}
    )
    assert status == 201, body
    return body


def test_a_release_racing_a_decline_gets_exactly_one_answer(workspace) -> None:
    holder, asker = _hand(workspace, "holder"), _hand(workspace, "asker")
    for round_number in range(8):
        resource = f"src/{round_number}/"
        lease = _take(holder, resource)
        status, asked = _post(asker, "/leases/handoff", {"resource": resource, "reason": "need"})
        assert status == 201, asked
        release_body = {"resource": resource, "fence": lease["fence"]}
        decline_path = f"/leases/handoff/{asked['id']}/decline"
        release, decline = _at_once(
            [
                lambda body=release_body: _post(holder, "/leases/release", body),
                lambda path=decline_path: _post(holder, path, {"reason": "busy"}),
            ]
        )
        assert release[0] == 200, release  # a release is never refused for a request
        request = HandoffRequest.objects.get(pk=asked["id"])
        if decline[0] == 200:
            assert request.status == "declined"
        else:
            assert decline[0] == 409 and decline[1]["error"]["code"] == "handoff_answered"
            assert (request.status, request.ended_by) == ("released", "released")
        answers = Event.objects.filter(
            kind__in=["handoff_declined", "handoff_released"], data__handoff=asked["id"]
        )
        assert answers.count() == 1
        assert Lease.objects.get(resource=resource).handoff_open == 0


def test_many_askers_at_once_are_bounded_with_no_duplicates(workspace) -> None:
    holder = _hand(workspace, "holder")
    lease = _take(holder, "src/auth/")
    askers = [_hand(workspace, f"asker-{i}") for i in range(MAX_OPEN_PER_TENURE + 4)]
    body = {"resource": "src/auth/", "reason": "need"}
    # Each asker twice, all at once.
    answers = _at_once(
        [lambda key=key: _post(key, "/leases/handoff", body) for key in askers for _ in range(2)]
    )
    assert {status for status, _ in answers} <= {200, 201, 409}, answers
    refused = [b for s, b in answers if s == 409]
    assert all(b["error"]["code"] == "handoff_limit" for b in refused), refused
    rows = HandoffRequest.objects.filter(lease__resource="src/auth/", status="open")
    assert rows.count() == MAX_OPEN_PER_TENURE
    assert len(set(rows.values_list("asker", flat=True))) == MAX_OPEN_PER_TENURE
    assert Lease.objects.get(resource="src/auth/").handoff_open == MAX_OPEN_PER_TENURE
    # A repeated ask answered the same request as its twin's.
    by_id: dict[int, int] = {}
    for status, body in answers:
        if status in (200, 201):
            by_id[body["id"]] = by_id.get(body["id"], 0) + 1
    assert set(by_id) == set(rows.values_list("id", flat=True))
    assert Event.objects.filter(kind="handoff_requested").count() == MAX_OPEN_PER_TENURE
    assert lease["fence"] == 1


def test_a_renewal_racing_an_ask_never_loses_the_request(workspace) -> None:
    holder = _hand(workspace, "holder")
    lease = _take(holder, "src/auth/")
    renew = {"resource": "src/auth/", "fence": lease["fence"], "process_id": "p"}
    seen: set[int] = set()
    for round_number in range(10):
        asker = _hand(workspace, f"asker-{round_number}")
        raced, asked = _at_once(
            [
                lambda: _post(holder, "/leases/renew", renew),
                lambda asker=asker: _post(
                    asker, "/leases/handoff", {"resource": "src/auth/", "reason": "need"}
                ),
            ]
        )
        assert raced[0] == 200 and asked[0] == 201, (raced, asked)
        seen |= {p["id"] for p in raced[1]["handoff_requests"]}
        status, after = _post(holder, "/leases/renew", renew)
        assert status == 200
        now_seen = {p["id"] for p in after["handoff_requests"]}
        assert asked[1]["id"] in now_seen  # on the next renewal at the latest
        seen |= now_seen
    assert len(seen) == 10
    assert Lease.objects.get(resource="src/auth/").handoff_open == 10
