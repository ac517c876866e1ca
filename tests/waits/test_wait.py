"""wait_s on acquire, and a database that refuses connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, connections

from leases import engine
from leases.models import Event, Lease, Refusal
from tests.support.api import Api, acquire, error_of, refusals


@contextmanager
def counting_takes() -> Iterator[list[int]]:
    """Count the engine's take statements (each try of an acquire runs one)."""
    calls: list[int] = []
    original = engine.take

    def take(**kwargs: object):
        calls.append(1)
        return original(**kwargs)

    engine.take = take  # type: ignore[assignment]
    try:
        yield calls
    finally:
        engine.take = original  # type: ignore[assignment]


@pytest.mark.django_db
def test_a_waiter_gets_a_lease_that_expires_meanwhile_with_a_fresh_deadline(
    api_a: Api, api_b: Api
) -> None:
    acquire(api_a, ttl=1)
    started = time.monotonic()
    with counting_takes() as takes:
        response = acquire(api_b, ttl=5, wait_s=5)
    waited = time.monotonic() - started
    assert response.status_code == 201, response.content
    lease = response.json()
    assert (lease["holder"], lease["fence"]) == ("hand-b", 2)
    # Granted by the statement that computed its deadline: never an already-expired lease.
    assert 4.9 <= lease["expires_in_s"] <= 5
    assert 0.5 <= waited < 3
    # It slept until the holder's time ran out, rather than asking over and over.
    assert len(takes) <= 8
    assert not Refusal.objects.exists()


@pytest.mark.django_db
def test_a_wait_that_ends_answers_lease_held_once(api_a: Api, api_b: Api) -> None:
    acquire(api_a, ttl=60)
    started = time.monotonic()
    with counting_takes() as takes:
        error = error_of(acquire(api_b, wait_s=1), 409, "lease_held")
    assert 1 <= time.monotonic() - started < 2.5
    assert error["holder"] == "hand-a"
    assert len(takes) <= 8
    assert len(refusals("lease_held")) == 1
    assert Lease.objects.get(resource="dev-server").holder == "hand-a"


@pytest.mark.django_db(transaction=True)
def test_a_release_wakes_a_waiter_at_once_through_listen_notify(api_a: Api, api_b: Api) -> None:
    first = acquire(api_a, ttl=60).json()
    answer: dict = {}

    def wait() -> None:
        try:
            with counting_takes() as takes:
                started = time.monotonic()
                response = acquire(api_b, wait_s=30)
                answer.update(
                    status=response.status_code,
                    body=response.json(),
                    waited=time.monotonic() - started,
                    takes=len(takes),
                )
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    released = api_a.post("/leases/release", {"resource": "dev-server", "fence": first["fence"]})
    assert released.status_code == 200
    waiter.join(10)
    assert answer["status"] == 201
    assert (answer["body"]["holder"], answer["body"]["fence"]) == ("hand-b", 2)
    # Woken by the NOTIFY (the holder had 60 s left), after one try before and one after.
    assert 0.4 <= answer["waited"] < 3
    assert answer["takes"] <= 3
    assert not Refusal.objects.filter(code="lease_held").exists()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.django_db(transaction=True)
def test_a_database_that_refuses_connections_answers_503_and_nothing_is_written(
    api_a: Api, run
) -> None:
    counts = (Lease.objects.count(), Event.objects.count(), Refusal.objects.count())
    db = connections["default"]
    saved = dict(db.settings_dict)
    db.close()
    db.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        responses = [
            acquire(api_a, resource="src/"),
            api_a.post(f"/runs/{run.pk}/claim", {"process_id": "a"}),
            api_a.get("/me"),
        ]
    finally:
        db.close()
        db.settings_dict.clear()
        db.settings_dict.update(saved)
    for response in responses:
        error = error_of(response, 503, "dependency_unavailable")
        assert "nothing was written" in error["message"]
    assert (Lease.objects.count(), Event.objects.count(), Refusal.objects.count()) == counts
    assert acquire(api_a, resource="src/").status_code == 201
