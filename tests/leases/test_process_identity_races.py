"""Many threads, each with its own PostgreSQL connection, act as processes of one hand (and of a
second hand) on a small tree: they acquire, take over (`take_over: true`), renew and release. A
checker over the event log (the database's times) asserts that a tenure is held by one process:

1. no two tenures of different processes (of one hand or not) on one line of the tree ever
   overlapped; a process's own tenures on a line may;
2. fences only increase per node, in grant order, and each take-over ended the tenure current
   at that moment, of the taker's own hand, and started the next one at the next fence;
3. every grant and renewal answered was of a tenure its own process started, and none
   succeeded after its tenure ended (by release or by being taken over).
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from leases import names
from leases import services as leases
from leases.models import Event

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKSPACE = 7
THREADS_A = 8
THREADS_B = 2
DURATION_S = 4.0
TREE = ["src/", "src/a.py", "src/b.py", "docs/guide.md"]
TTL_S = 60  # nothing expires: every end is a release or a take-over


@dataclass(frozen=True)
class Renewal:
    """A call that answered the tenure `fence` of `resource` as `process`'s, at `at`: a grant,
    an acquire that renewed it, or a renewal."""

    resource: str
    fence: int
    process: str
    at: datetime


def worker(hand: str, process: str, seed: int, renewals: list, crashes: list) -> None:
    rng = random.Random(seed)
    stop_at = time.monotonic() + DURATION_S
    mine: dict[str, int] = {}
    try:
        while time.monotonic() < stop_at:
            resource = rng.choice(TREE)
            try:
                lease = leases.lease_acquire(
                    workspace_id=WORKSPACE,
                    resource=resource,
                    holder=hand,
                    process_id=process,
                    ttl_s=TTL_S,
                    take_over=rng.random() < 0.5,
                )
                mine[resource] = lease.fence
                renewals.append(Renewal(resource, lease.fence, process, lease.server_time))
            except GroundControlError as denied:
                assert denied.code == "lease_held", denied.body()
            for held, fence in list(mine.items()):
                time.sleep(rng.uniform(0, 0.01))
                try:
                    if rng.random() < 0.7:
                        renewed = leases.lease_renew(
                            workspace_id=WORKSPACE,
                            resource=held,
                            holder=hand,
                            fence=fence,
                            process_id=process,
                        )
                        renewals.append(Renewal(held, fence, process, renewed.server_time))
                    else:
                        leases.lease_release(
                            workspace_id=WORKSPACE, resource=held, holder=hand, fence=fence
                        )
                        del mine[held]
                except GroundControlError as refused:
                    # Taken over by another process of the hand: lost, said as such.
                    assert refused.code in ("lease_lost", "stale_fence"), refused.body()
                    del mine[held]
    except BaseException as crash:  # noqa: BLE001 - any crash fails the test
        crashes.append(crash)
    finally:
        connection.close()


@dataclass
class Tenure:
    node: str
    fence: int
    hand: str
    process: str
    start: datetime
    end: datetime | None = None


def history() -> tuple[list[Tenure], list[Event]]:
    """Every tenure from the event log: started by `lease_acquired`, ended by `lease_released`
    or `lease_taken_over` (whose `taken_resource` and `taken_fence` name the tenure it ended)."""
    events = list(Event.objects.filter(workspace_id=WORKSPACE).order_by("id"))
    tenures: dict[tuple[str, int], Tenure] = {}
    for event in events:
        node = names.node_of(event.resource)
        if event.kind == "lease_acquired":
            tenures[node, event.fence] = Tenure(
                node, event.fence, event.hand, event.data["process_id"], event.at
            )
        elif event.kind == "lease_released":
            tenures[node, event.fence].end = event.at
        elif event.kind == "lease_taken_over":
            taken = names.node_of(event.data["taken_resource"])
            tenures[taken, event.data["taken_fence"]].end = event.at
    return list(tenures.values()), events


def test_one_holder_process_per_line_at_every_moment_and_fences_only_increase() -> None:
    renewals: list[Renewal] = []
    crashes: list[BaseException] = []
    threads = [
        threading.Thread(target=worker, args=("hand-a", f"session-{i}", i, renewals, crashes))
        for i in range(THREADS_A)
    ] + [
        threading.Thread(target=worker, args=("hand-b", f"b-{i}", 100 + i, renewals, crashes))
        for i in range(THREADS_B)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not crashes, crashes
    tenures, events = history()
    taken_overs = [event for event in events if event.kind == "lease_taken_over"]
    assert taken_overs, "the race took nothing over: it proves nothing"
    assert any(event.kind == "lease_released" for event in events)

    # 2. Fences rise per node in grant order; a take-over ends the current tenure, of its own
    # hand, from another process, and the next grant takes the next fence.
    by_node: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in sorted(tenures, key=lambda t: (t.node, t.start)):
        by_node[tenure.node].append(tenure)
    for node, line in by_node.items():
        fences = [t.fence for t in line]
        assert fences == sorted(set(fences)), (node, fences)
    index = {(t.node, t.fence): t for t in tenures}
    for event in taken_overs:
        # The event is the new tenure's; it names the one it ended, on its node or elsewhere on
        # its line (a take-over of a file takes the other process's directory above it too).
        taken, node = names.node_of(event.data["taken_resource"]), names.node_of(event.resource)
        ended, started = index[taken, event.data["taken_fence"]], index[node, event.fence]
        assert ended.hand == started.hand == event.hand, "a take-over crossed hands"
        assert ended.process == event.data["from_process_id"] != started.process
        assert names.overlaps(taken, node)
        if taken == node:
            assert started.fence > ended.fence
        assert ended.end is not None and ended.end <= started.start

    # 1. No two tenures of different processes on one line of the tree overlapped.
    for i, one in enumerate(tenures):
        for other in tenures[i + 1 :]:
            if (one.hand, one.process) == (other.hand, other.process):
                continue
            if not names.overlaps(one.node, other.node):
                continue
            one_end = one.end or datetime.max.replace(tzinfo=one.start.tzinfo)
            other_end = other.end or datetime.max.replace(tzinfo=other.start.tzinfo)
            assert one_end <= other.start or other_end <= one.start, (one, other)

    # 3. Every grant and renewal fell within its tenure, which is its process's: a tenure never
    # moved to another process without a take-over (a new fence, on record).
    for renewal in renewals:
        tenure = index[names.node_of(renewal.resource), renewal.fence]
        assert tenure.process == renewal.process, (renewal, tenure)
        assert tenure.start <= renewal.at
        assert tenure.end is None or renewal.at <= tenure.end, (renewal, tenure)
