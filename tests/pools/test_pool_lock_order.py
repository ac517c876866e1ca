"""Statements that can meet on the same `leases_lease` rows take their locks in one order (the
tree's advisory locks first, then rows in id order: docs/design.md, "Lock order"), so no two
calls ever wait for each other in a cycle and PostgreSQL never has to abort one.

The calls here run WITHOUT the conflict retry (`apikit.retries`): a deadlock would surface as
an error instead of being run again, so each test proves the order itself, not the retry.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import pytest
from django.db import connection, transaction

from apikit.errors import GroundControlError
from fleet.attempts import services as attempt_services
from hands import services as hand_services
from leases import engine, tree
from leases import services as leases
from leases.models import Event
from pools import services as pools
from tests.support.locks import backend_pid, unretried, waiting_on_a_lock

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def test_a_lane_limited_break_meets_an_acquire_without_a_deadlock(workspace, lane) -> None:  # noqa: ANN001
    """The acquire holds the node's advisory lock and then writes its row; the lane-limited break
    checks the lease's lane under its row lock. Taken row first, the break waited for the
    acquire's advisory lock while the acquire waited for the row: PostgreSQL aborted one."""
    hand, _ = hand_services.hand_create(workspace=workspace, name="laned", lane=lane)
    held = leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder=hand.name, process_id="pa", ttl_s=30
    )
    acquirer_holds_the_node = threading.Event()
    breaker_pid: list[int] = []
    errors: list[BaseException] = []

    def acquirer() -> None:
        try:
            with transaction.atomic():
                tree.lock_tree(workspace_id=workspace.pk, resource="r")
                acquirer_holds_the_node.set()
                give_up = time.monotonic() + 20
                while not (breaker_pid and waiting_on_a_lock(breaker_pid[0])):
                    assert time.monotonic() < give_up, "the break never waited"
                    time.sleep(0.01)
                # The holder acquiring again, as `lease_acquire` does after `lock_tree`.
                renewed = engine.renew_holder(
                    workspace_id=workspace.pk,
                    resource="r",
                    holder=hand.name,
                    process_id="pa",
                    interval_s=30,
                    grace_s=0,
                )
                assert renewed is not None and renewed.fence == held.fence
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
        finally:
            connection.close()

    def breaker() -> None:
        try:
            breaker_pid.append(backend_pid())
            acquirer_holds_the_node.wait(20)
            unretried(attempt_services.lease_break)(
                workspace_id=workspace.pk,
                resource="r",
                actor="lead",
                reason="reassigning",
                lane_id=lane.pk,
            )
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=acquirer), threading.Thread(target=breaker)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    broken = Event.objects.filter(workspace_id=workspace.pk, kind="lease_broken", resource="r")
    assert list(broken.values_list("fence", flat=True)) == [held.fence + 1]


THREADS = 12
DURATION_S = 5.0
TTL_S = 1.0


def test_concurrent_takes_renewals_releases_and_breaks_never_deadlock(workspace) -> None:  # noqa: ANN001
    """Twelve threads on one pool of four: take (sometimes two members from two processes),
    renew all, release, and a supervisor's break, none retried. No call fails with a database
    error (a deadlock would), and each member's grants have rising, distinct fences."""
    pools.pool_create(workspace=workspace, name="ports", members=["p1", "p2", "p3", "p4"])
    take = unretried(pools.pool_acquire)
    renew_all = unretried(leases.lease_renew_all)
    release = unretried(leases.lease_release)
    break_ = unretried(leases.lease_break)
    grants: dict[str, list[int]] = defaultdict(list)
    crashes: list[BaseException] = []
    calls = {"taken": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + DURATION_S

    def worker(index: int) -> None:
        rng = random.Random(index)
        holder = f"hand-{index % 6}"
        try:
            while time.monotonic() < stop_at:
                mine = []
                for process in (f"host:{index}:a", f"host:{index}:b")[: rng.randint(1, 2)]:
                    try:
                        _, lease = take(
                            workspace_id=workspace.pk,
                            name="ports",
                            holder=holder,
                            process_id=process,
                            ttl_s=TTL_S,
                        )
                    except GroundControlError as error:
                        assert error.code == "lease_held", error.body()
                        continue
                    with lock:
                        calls["taken"] += 1
                    mine.append((process, lease))
                time.sleep(rng.uniform(0, TTL_S / 4))
                for process, _ in mine:
                    renew_all(workspace_id=workspace.pk, holder=holder, process_id=process)
                if index == 0 and mine and rng.random() < 0.5:
                    try:
                        break_(
                            workspace_id=workspace.pk,
                            resource=mine[0][1].resource,
                            actor="lead",
                            reason="drill",
                        )
                    except GroundControlError:
                        pass
                for _, lease in mine:
                    if rng.random() < 0.8:
                        try:
                            release(
                                workspace_id=workspace.pk,
                                resource=lease.resource,
                                holder=holder,
                                fence=lease.fence,
                            )
                        except GroundControlError:
                            pass  # broken, or lost and taken over
        except BaseException as error:  # noqa: BLE001 - reported by the test
            crashes.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DURATION_S + 60)
    assert crashes == []
    assert calls["taken"] > 0
    events = Event.objects.filter(
        workspace_id=workspace.pk, resource__startswith="pool/ports/"
    ).order_by("id")
    for kind, resource, fence in events.values_list("kind", "resource", "fence"):
        if kind == "lease_acquired":
            grants[resource].append(fence)
    for resource, fences in grants.items():
        assert fences == sorted(fences) and len(set(fences)) == len(fences), resource
