"""The fair queue (issue 20, item 3): waiters are served first come, first served on each line of
the tree; nobody passes a waiter it conflicts with; a waiter whose process died stops counting
within its TTL; a denial says where the request stands."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from django.db import connection

from leases import clock, queue
from leases import services as leases
from leases.errors import LeaseHeld
from leases.models import Waiter
from leases.waiting import lease_acquire_waiting

pytestmark = pytest.mark.django_db
WS = 1


def acquire(resource: str, holder: str, *, mode: str = "exclusive", ticket=None, ttl=60):  # noqa: ANN001
    return leases.lease_acquire(
        workspace_id=WS,
        resource=resource,
        holder=holder,
        process_id=f"p-{holder}",
        ttl_s=ttl,
        mode=mode,
        ticket=ticket,
    )


def join(resource: str, holder: str, mode: str = "exclusive") -> queue.Ticket:
    return queue.join(
        workspace_id=WS, resource=resource, holder=holder, process_id=f"p-{holder}", mode=mode
    )


def release(resource: str, holder: str, fence: int) -> None:
    leases.lease_release(workspace_id=WS, resource=resource, holder=holder, fence=fence)


def test_a_newcomer_does_not_pass_a_waiter(frozen_clock: datetime) -> None:
    held = acquire("tests", "a")
    first = join("tests", "b")
    release("tests", "a", held.fence)
    with pytest.raises(LeaseHeld) as refused:
        acquire("tests", "c")
    assert refused.value.fields["position"] == 2
    assert refused.value.fields["ahead"] == ["b"]
    assert "nothing held stands in the way of tests, but 1 waiting request came first" in (
        refused.value.message
    )
    granted = acquire("tests", "b", ticket=first)
    assert (granted.holder, granted.queued_at) == ("b", first.queued_at)
    assert not Waiter.objects.exists()


def test_waiters_are_served_in_the_order_they_joined(frozen_clock: datetime) -> None:
    held = acquire("tests", "a")
    tickets = [join("tests", hand) for hand in ("b", "c", "d")]
    release("tests", "a", held.fence)
    with pytest.raises(LeaseHeld) as refused:
        acquire("tests", "d", ticket=tickets[2])
    assert (refused.value.fields["position"], refused.value.fields["ahead"]) == (3, ["b", "c"])
    with pytest.raises(LeaseHeld):
        acquire("tests", "c", ticket=tickets[1])
    lease = acquire("tests", "b", ticket=tickets[0])
    with pytest.raises(LeaseHeld) as behind:
        acquire("tests", "c", ticket=tickets[1])
    assert behind.value.fields["holder"] == "b"
    assert behind.value.fields["position"] == 1
    release("tests", "b", lease.fence)
    assert acquire("tests", "c", ticket=tickets[1]).holder == "c"


def test_a_stream_of_shared_requests_does_not_starve_an_exclusive_waiter(
    frozen_clock: datetime,
) -> None:
    reader = acquire("docs/", "a", mode="shared")
    writer = join("docs/", "w")
    # Compatible with the shared holder, but the exclusive waiter came first.
    with pytest.raises(LeaseHeld) as refused:
        acquire("docs/", "r2", mode="shared")
    # In line behind the waiter, and what it waits for.
    assert (refused.value.fields["ahead"], refused.value.fields["position"]) == (["a", "w"], 2)
    release("docs/", "a", reader.fence)
    assert acquire("docs/", "w", ticket=writer).holder == "w"


def test_only_waiters_the_request_conflicts_with_are_in_its_way(frozen_clock: datetime) -> None:
    acquire("src/auth/", "a")
    join("src/auth/", "b")
    assert acquire("src/web/", "c").holder == "c"  # another line of the tree
    join("db/", "r1", mode="shared")
    assert acquire("db/", "r2", mode="shared").holder == "r2"  # shared waiters do not conflict
    with pytest.raises(LeaseHeld):
        acquire("src/", "d")  # covers src/auth/, whose waiter came first


def test_a_waiter_whose_process_died_stops_counting_within_its_ttl(
    frozen_clock: datetime,
) -> None:
    join("tests", "ghost")  # and never comes back to keep its place
    with pytest.raises(LeaseHeld):
        acquire("tests", "c")
    clock.advance(queue.WAITER_TTL_S + 0.1)
    assert acquire("tests", "c").holder == "c"


def test_a_waiter_that_keeps_its_place_keeps_counting(frozen_clock: datetime) -> None:
    ticket = join("tests", "b")
    for _ in range(3):
        clock.advance(queue.WAITER_TTL_S - 1)
        queue.stay(ticket)
    with pytest.raises(LeaseHeld):
        acquire("tests", "c")


def test_the_estimate_counts_the_holders_window_and_a_tenure_per_waiter_ahead(
    frozen_clock: datetime,
) -> None:
    # Two tenures of 100 s on record: tenures of `tests` last about that long.
    for hand in ("x", "y"):
        lease = acquire("tests", hand, ttl=300)
        clock.advance(100)
        release("tests", hand, lease.fence)
    acquire("tests", "a", ttl=30)
    clock.advance(30)  # held 30 s: its window ends now, but tenures here last about 100 s
    join("tests", "b")
    with pytest.raises(LeaseHeld) as refused:
        acquire("tests", "c")
    fields = refused.value.fields
    assert fields["position"] == 2
    assert fields["ahead"] == ["a", "b"]
    # a holds on for about 100 - 30 = 70 s more, then b's tenure, about 100 s.
    assert fields["estimated_wait_s"] == pytest.approx(170, abs=1)


def test_the_queue_lists_its_waiters_in_order(frozen_clock: datetime) -> None:
    join("tests", "b")
    join("tests", "c", mode="shared")
    join("docs/", "d")
    line = queue.line(workspace_id=WS, resource="tests")
    assert [(w["holder"], w["position"], w["mode"]) for w in line] == [
        ("b", 1, "exclusive"),
        ("c", 2, "shared"),
    ]
    assert len(queue.line(workspace_id=WS)) == 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_waiters_are_woken_and_served_first_come_first_served(workspace) -> None:  # noqa: ANN001
    ws = workspace.id
    first = leases.lease_acquire(
        workspace_id=ws, resource="suite", holder="h0", process_id="p0", ttl_s=30
    )
    order: list[str] = []
    crashes: list[BaseException] = []

    def wait(hand: str) -> None:
        try:
            lease = lease_acquire_waiting(
                workspace_id=ws,
                resource="suite",
                holder=hand,
                process_id=f"p-{hand}",
                ttl_s=30,
                wait_s=20,
            )
            order.append(hand)
            time.sleep(0.05)
            leases.lease_release(workspace_id=ws, resource="suite", holder=hand, fence=lease.fence)
        except BaseException as crash:  # noqa: BLE001
            crashes.append(crash)
        finally:
            connection.close()

    hands = [f"h{i}" for i in range(1, 6)]
    threads = []
    for hand in hands:
        thread = threading.Thread(target=wait, args=(hand,))
        thread.start()
        threads.append(thread)
        # Each has joined the queue before the next one asks.
        deadline = time.monotonic() + 5
        while Waiter.objects.filter(holder=hand).count() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    started = time.monotonic()
    leases.lease_release(workspace_id=ws, resource="suite", holder="h0", fence=first.fence)
    for thread in threads:
        thread.join(timeout=30)
    assert not crashes, crashes
    assert order == hands
    # Woken by each release, not by polling: five hand-overs in well under a poll interval each.
    assert time.monotonic() - started < 2.0
    assert not Waiter.objects.exists()
