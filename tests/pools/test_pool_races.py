"""Sixteen threads, each with its own PostgreSQL connection, hammer one pool of four members:
acquire, hold a while (one pause in four outlasting the TTL, so tenures are lost and retaken),
renew, release. Every grant and end is recorded with the database's time; a checker over the
history then asserts the pool's promises:

1. no member was held by two tenures at once (by the database's clock: a tenure lasts from its
   grant to its release, or to the end of its last accepted window);
2. fences only increase, per member, in the order tenures were granted;
3. every tenure that was taken over after it was lost has exactly one `lease_expired` event,
   written before the next `lease_acquired` of the member.

And a waiter on a full pool is woken by a release (LISTEN/NOTIFY on the pool's node), not by
the holder's window running out.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from hands import services as hand_services
from leases import services as leases
from leases.models import Event
from pools import services as pools
from tests.waking import pauses_recorded

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

THREADS = 16
DURATION_S = 6.0
TTL_S = 1.0


@dataclass
class Tenure:
    thread: int
    resource: str
    fence: int
    start: datetime
    end: datetime  # released_at, or the last accepted window's end
    released: bool = False


@dataclass
class History:
    tenures: list[Tenure] = field(default_factory=list)
    crashes: list[BaseException] = field(default_factory=list)
    denied: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, tenure: Tenure) -> None:
        with self.lock:
            self.tenures.append(tenure)


def worker(index: int, workspace_id: int, history: History, stop_at: float) -> None:
    rng = random.Random(index)
    holder, process = f"hand-{index % 8}", f"host:{index}"
    try:
        while time.monotonic() < stop_at:
            try:
                _, lease = pools.pool_acquire(
                    workspace_id=workspace_id,
                    name="ports",
                    holder=holder,
                    process_id=process,
                    ttl_s=TTL_S,
                )
            except GroundControlError as error:
                assert error.code == "lease_held", error.body()
                with history.lock:
                    history.denied += 1
                time.sleep(rng.uniform(0, 0.03))
                continue
            tenure = Tenure(index, lease.resource, lease.fence, lease.server_time, lease.deadline)
            for _ in range(rng.randint(0, 2)):
                time.sleep(
                    rng.uniform(TTL_S * 1.05, TTL_S * 1.4)
                    if rng.random() < 0.25
                    else rng.uniform(0, TTL_S / 3)
                )
                try:
                    renewed = leases.lease_renew(
                        workspace_id=workspace_id,
                        resource=lease.resource,
                        holder=holder,
                        fence=lease.fence,
                        process_id=process,
                    )
                except GroundControlError:
                    break  # lost (and perhaps retaken): the tenure ended at its last window
                tenure.end = renewed.deadline
            else:
                try:
                    released = leases.lease_release(
                        workspace_id=workspace_id,
                        resource=lease.resource,
                        holder=holder,
                        fence=lease.fence,
                    )
                    tenure.end, tenure.released = released.released_at, True
                except GroundControlError:
                    pass
            history.add(tenure)
    except BaseException as error:  # noqa: BLE001 - reported by the test
        history.crashes.append(error)
    finally:
        connection.close()


def test_no_member_is_ever_held_twice_and_fences_only_increase() -> None:
    workspace = hand_services.workspace_get_or_create(name="race")
    pools.pool_create(workspace=workspace, name="ports", members=["p1", "p2", "p3", "p4"])
    history = History()
    stop_at = time.monotonic() + DURATION_S
    threads = [
        threading.Thread(target=worker, args=(i, workspace.pk, history, stop_at))
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DURATION_S + 30)
    assert history.crashes == []
    # Progress, and contention (16 threads on 4 members), never a count of tenures: how many a
    # run gets is throughput, which a loaded machine lowers.
    assert history.tenures and history.denied > 0

    by_member: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in history.tenures:
        by_member[tenure.resource].append(tenure)
    assert set(by_member) == {f"pool/ports/p{n}" for n in range(1, 5)}
    for resource, tenures in by_member.items():
        tenures.sort(key=lambda t: t.start)
        fences = [t.fence for t in tenures]
        assert fences == sorted(fences) and len(set(fences)) == len(fences), resource
        for earlier, later in zip(tenures, tenures[1:], strict=False):
            assert earlier.end <= later.start, (resource, earlier, later)

    # Each tenure that was taken over without a release ended by expiry, recorded once, and
    # before the member's next grant.
    events = list(
        Event.objects.filter(workspace_id=workspace.pk, resource__startswith="pool/ports/")
        .order_by("id")
        .values_list("kind", "resource", "fence")
    )
    expired = [(r, f) for k, r, f in events if k == "lease_expired"]
    assert len(expired) == len(set(expired))
    for resource, tenures in by_member.items():
        ended = {f for r, f in expired if r == resource}
        for earlier, _later in zip(tenures, tenures[1:], strict=False):
            if not earlier.released:
                assert earlier.fence in ended, (resource, earlier)
        grants = [f for k, r, f in events if r == resource and k == "lease_acquired"]
        assert grants == sorted(grants) == [t.fence for t in tenures]


def test_a_release_wakes_a_waiter_on_a_full_pool_at_once() -> None:
    workspace = hand_services.workspace_get_or_create(name="wake")
    pools.pool_create(workspace=workspace, name="one", members=["only"])
    _, held = pools.pool_acquire(
        workspace_id=workspace.pk, name="one", holder="a", process_id="pa", ttl_s=30
    )
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(
                pools.pool_acquire_waiting(
                    workspace_id=workspace.pk,
                    name="one",
                    holder="b",
                    process_id="pb",
                    ttl_s=30,
                    wait_s=20,
                )[1]
            )
        except BaseException as error:  # noqa: BLE001
            got.append(error)
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    with pauses_recorded() as pauses:
        waiter.start()
        assert pauses.began.wait(timeout=20)
        leases.lease_release(
            workspace_id=workspace.pk, resource=held.resource, holder="a", fence=held.fence
        )
        waiter.join(30)
    assert len(got) == 1 and not isinstance(got[0], BaseException), got
    assert got[0].holder == "b" and got[0].fence == held.fence + 1  # type: ignore[attr-defined]
    # Its one pause was ended by the release's notification, not by its own time running out.
    assert pauses.woken == [True], pauses.woken
