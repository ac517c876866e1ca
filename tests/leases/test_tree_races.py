"""Many threads, each with its own PostgreSQL connection, take exclusive and shared leases on the
nodes of one small tree, renew, check and release them, and sometimes let them lapse. A checker
over the recorded history (the database's times) asserts the tree's promises (issue 20):

1. no exclusive tenure overlapped any other holder's tenure on its node, an ancestor or a
   descendant, and shared tenures overlapped only shared ones;
2. fences only increase per node, in grant order;
3. no renewal or check succeeded after its tenure ended.
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

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 12
DURATION_S = 6.0
TREE = [
    "repo",
    "repo/src/",
    "repo/src/auth/",
    "repo/src/auth/login.py",
    "repo/src/web.py",
    "repo/docs/",
    "repo/docs/guide.md",
    "other",
    "misc/a",
    "misc/b/",
]
TTL_S = 1


@dataclass
class Tenure:
    holder: str
    resource: str
    mode: str
    fence: int
    start: datetime
    end: datetime  # released, or the last deadline it was renewed to


def worker(index: int, workspace_id: int, tenures: list[Tenure], crashes: list) -> None:
    rng = random.Random(index)
    holder = f"hand-{index}"
    process = f"host:{index}"
    stop_at = time.monotonic() + DURATION_S
    try:
        while time.monotonic() < stop_at:
            resource = rng.choice(TREE)
            mode = rng.choice(["exclusive", "shared"])
            try:
                lease = leases.lease_acquire(
                    workspace_id=workspace_id,
                    resource=resource,
                    holder=holder,
                    process_id=process,
                    ttl_s=TTL_S,
                    mode=mode,
                )
            except GroundControlError:
                time.sleep(rng.uniform(0, 0.02))
                continue
            if lease.acquired_at != lease.renewed_at:
                continue  # it renewed a tenure already recorded
            tenure = Tenure(
                holder, resource, lease.mode, lease.fence, lease.acquired_at, lease.deadline
            )
            tenures.append(tenure)
            for _ in range(rng.randint(0, 3)):
                time.sleep(rng.choice([0.0, 0.05, 0.2, 0.6, 1.3]))
                try:
                    if rng.random() < 0.5:
                        renewed = leases.lease_renew(
                            workspace_id=workspace_id,
                            resource=resource,
                            holder=holder,
                            fence=lease.fence,
                            process_id=process,
                        )
                        assert renewed.server_time <= tenure.end, "renewed after it ended"
                        tenure.end = renewed.deadline
                    else:
                        checked = leases.lease_check(
                            workspace_id=workspace_id, resource=resource, fence=lease.fence
                        )
                        assert checked.server_time <= tenure.end, "checked after it ended"
                except GroundControlError:
                    break
            else:
                try:
                    released = leases.lease_release(
                        workspace_id=workspace_id,
                        resource=resource,
                        holder=holder,
                        fence=lease.fence,
                    )
                    assert released.released_at <= tenure.end
                    tenure.end = released.released_at
                except GroundControlError:
                    pass
    except BaseException as crash:  # noqa: BLE001 - any crash fails the test
        crashes.append(crash)
    finally:
        connection.close()


def check(tenures: list[Tenure]) -> None:
    by_node: dict[str, list[Tenure]] = defaultdict(list)
    for tenure in tenures:
        by_node[names.node_of(tenure.resource)].append(tenure)
    for node, own in by_node.items():
        own.sort(key=lambda t: t.start)
        fences = [t.fence for t in own]
        assert fences == sorted(set(fences)), f"fences of {node} not increasing: {fences}"
    for i, one in enumerate(tenures):
        for other in tenures[i + 1 :]:
            if one.holder == other.holder:
                continue
            if not names.overlaps(names.node_of(one.resource), names.node_of(other.resource)):
                continue
            if one.mode == "shared" and other.mode == "shared":
                continue
            assert one.end <= other.start or other.end <= one.start, f"{one} overlapped {other}"


def test_the_tree_keeps_its_promises_under_contention(workspace) -> None:  # noqa: ANN001
    tenures: list[Tenure] = []
    crashes: list[BaseException] = []
    threads = [
        threading.Thread(target=worker, args=(i, workspace.id, tenures, crashes))
        for i in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DURATION_S + 30)
        assert not thread.is_alive(), "a worker hung"
    assert not crashes, crashes
    check(tenures)
    modes = {t.mode for t in tenures}
    # Both modes happened; never a count of tenures (throughput, which a loaded machine lowers).
    assert tenures and modes == {"exclusive", "shared"}, (len(tenures), modes)


def test_the_checker_finds_an_overlap() -> None:
    """The checker can fail: an exclusive tenure of an ancestor overlapping a shared one."""
    at = datetime(2030, 1, 1)
    later = datetime(2030, 1, 2)
    with pytest.raises(AssertionError):
        check(
            [
                Tenure("a", "repo/", "exclusive", 1, at, later),
                Tenure("b", "repo/x", "shared", 1, at, later),
            ]
        )
