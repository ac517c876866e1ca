"""A wait longer than the server's limit for one call is several calls, each from the place in
line the last one kept: a client waiting that way is served before a request that came after it
started waiting, as one long wait would be."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from groundcontrol_client import Client, LeaseHeld
from groundcontrol_client.errors import describe
from groundcontrol_client.limits import LIMITS

from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_long_wait_keeps_its_place_across_calls(
    gc: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(LIMITS, "wait_s", 0.5)  # so a 4 s wait is eight calls
    with Client(gc.url, gc.key_a) as a, Client(gc.url, gc.key_b) as b:
        held = a.lease_acquire("src/", ttl_s=60, process_id="a:1")
        got: dict[str, Any] = {}

        def wait() -> None:
            got["lease"] = b.lease_acquire("src/", ttl_s=30, process_id="b:1", wait_s=8)
            got["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(1.5)  # B has been denied at least twice, and came back with its ticket
        # A later arrival from A's hand, another process: it waits too, behind B.
        with pytest.raises(LeaseHeld) as later:
            a.lease_acquire("src/", ttl_s=30, process_id="a:2", wait_s=0.3)
        assert later.value.get("ahead") == ["hand-a", "hand-b"]
        a.lease_release("src/", fence=held.fence, process_id="a:1")
        waiter.join(timeout=15)
        assert got["lease"].holder == "hand-b"
        assert got["lease"].raw["queued_at"] is not None  # it was served from its place


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
