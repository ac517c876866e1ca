"""The hot calls (leasing/hot.py) under contention, through Django as gunicorn calls it, each thread
with its own PostgreSQL connection:

- the one-statement acquire (the key check, `insert` and `take` on one snapshot, and the event):
  many callers ask for the same resource at the same instant; exactly one is granted each time,
  with the next fence and one event; every other caller's statement matches nothing and its
  service answers lease_held;
- a bare heartbeat's once-a-minute record (`fleet.attempts.reports.heartbeat_record`): many
  heartbeats of one attempt find it due at once; every one renews, and one report row is written."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from unittest import mock

import pytest
from django.db import connection
from django.test import Client

from fleet.attempts import services as attempt_services
from fleet.models import Report
from hands import services as hand_services
from leases import services as leases
from leases.models import Event, Lease
from leasing import hot
from tests.support.api import mint

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

THREADS = 12
ROUNDS = 4
_served = threading.local()


def _statement_noting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    matched = _real_statement(*args, **kwargs)
    _served.hot = bool(matched)
    return matched


_real_statement = hot.run_statement


@pytest.fixture(autouse=True)
def _note_who_answers() -> Iterator[None]:
    with mock.patch.object(hot, "run_statement", _statement_noting):
        yield


def _acquire(key: str, resource: str) -> tuple[int, dict, bool]:
    return _post(
        key, "/api/v1/leases/acquire", {"resource": resource, "ttl_s": 30, "process_id": "p"}
    )


def _post(key: str, path: str, payload: dict) -> tuple[int, dict, bool]:
    """One call through Django's WSGI handler: status, body, whether its hot statement matched."""
    _served.hot = False
    response = Client().post(
        path,
        data=json.dumps(payload),
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    return response.status_code, response.json(), _served.hot


def _race(
    keys: list[tuple[str, str]],
    resource: str,
    call: Callable[[str, str], tuple[int, dict, bool]] = _acquire,
) -> list[tuple[str, int, dict, bool]]:
    """Every key makes its call on `resource` at once, each thread on its own connection."""
    start = threading.Barrier(len(keys))
    answers: list[tuple[str, int, dict, bool]] = []
    lock = threading.Lock()

    def race(name: str, key: str) -> None:
        try:
            start.wait()
            status, body, hot = call(key, resource)
            with lock:
                answers.append((name, status, body, hot))
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=pair) for pair in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_one_caller_of_many_gets_a_free_resource_each_time(workspace) -> None:
    keys = []
    for i in range(THREADS):
        hand, _ = hand_services.hand_create(workspace=workspace, name=f"racer-{i}")
        keys.append((hand.name, mint(hand, ["leases"])))

    for round_number in range(ROUNDS):
        answers = _race(keys, "db/migrate")
        granted = [a for a in answers if a[1] == 201]
        assert len(answers) == THREADS
        assert len(granted) == 1, answers
        winner, _, lease, served_by_hot_path = granted[0]
        assert lease["fence"] == round_number + 1 and lease["holder"] == winner
        # The winner's statement granted; the losers' matched nothing, and each service said why.
        assert served_by_hot_path
        assert all(
            status == 409 and body["error"]["code"] == "lease_held"
            for _, status, body, _ in answers
            if status != 201
        ), answers
        events = Event.objects.filter(kind="lease_acquired", resource="db/migrate")
        assert list(events.values_list("fence", flat=True)) == list(range(1, round_number + 2))

        # The winner releases: the next round takes the free row (the `take` branch).
        row = Lease.objects.get(resource="db/migrate")
        assert (row.holder, row.fence) == (winner, round_number + 1)
        leases.lease_release(
            workspace_id=workspace.pk, resource="db/migrate", holder=winner, fence=row.fence
        )


def test_heartbeats_that_find_the_record_due_at_once_write_it_once(workspace, make_run) -> None:
    hand, _ = hand_services.hand_create(workspace=workspace, name="beater")
    key = mint(hand, ["work"])
    attempt = attempt_services.attempt_claim(
        hand=hand, run_id=make_run().pk, process_id="p"
    ).attempt
    path = f"/api/v1/attempts/{attempt.pk}/reports"
    beat = {"fence": attempt.fence, "process_id": "p", "kind": "heartbeat"}

    def heartbeat(key: str, path: str) -> tuple[int, dict, bool]:
        return _post(key, path, beat)

    for _ in range(2):  # due at first (never recorded), then not (recorded just now)
        answers = _race([(f"beat-{i}", key) for i in range(THREADS)], path, heartbeat)
        assert [(status, body["renewed"], hot) for _, status, body, hot in answers] == [
            (200, True, True)
        ] * THREADS, answers
        assert Report.objects.filter(attempt_id=attempt.pk).count() == 1
