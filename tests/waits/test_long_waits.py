"""A wait longer than the server's limit for one call is several calls, each from the place in
line the last one kept: a client waiting that way is served before a request that came after it
started waiting, as one long wait would be."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from groundcontrol_client import Client, Lease, LeaseHeld
from groundcontrol_client.core.errors import describe
from groundcontrol_client.core.limits import LIMITS

from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_long_wait_keeps_its_place_across_calls(
    gc: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Calls of 2 s: B's wait of 30 s is many calls, its second from 2 s to 4 s.
    monkeypatch.setitem(LIMITS, "wait_s", 2.0)
    with Client(gc.url, gc.key_a) as a, Client(gc.url, gc.key_b) as b:
        held = a.lease_acquire("src/", ttl_s=60, process_id="a:1")
        got: dict[str, Any] = {}

        def wait(name: str, client: Client, process_id: str, wait_s: float) -> None:
            try:
                got[name] = client.lease_acquire(
                    "src/", ttl_s=30, process_id=process_id, wait_s=wait_s
                )
            except LeaseHeld as denied:
                got[name] = denied

        first = threading.Thread(target=wait, args=("b", b, "b:1", 30))
        first.start()
        time.sleep(2.5)  # B was denied once and came back with its ticket: its second call
        # A later arrival, from A's hand's other process, waits too, joining after B.
        later = threading.Thread(target=wait, args=("a2", a, "a:2", 6))
        later.start()
        time.sleep(0.5)  # the middle of B's second call: both wait now
        a.lease_release("src/", fence=held.fence, process_id="a:1")
        first.join(timeout=40)
        later.join(timeout=40)
    # B, in line first and coming back to its place call after call, is served first.
    assert isinstance(got["b"], Lease) and got["b"].holder == "hand-b", got
    assert got["b"].raw["queued_at"] is not None  # it was served from its place
    assert isinstance(got["a2"], LeaseHeld), got


def test_a_denial_that_kept_a_place_says_how_to_keep_it() -> None:
    denied = LeaseHeld(
        "src/ is held by hand 'a' (fence 1)",
        fields={
            "holder": "a",
            "fence": 1,
            "expires_in_s": 40,
            "resource": "src/",
            "ticket": 7,
            "ticket_kept_s": 30.0,
        },
    )
    said = describe(denied, subject="src/")
    assert said.endswith(
        "Your place in line is kept for 30 s: asking again within that time, with the "
        "denial's ticket, keeps it."
    )
