"""A revocation and a grant by the same key take their locks in one order: the key's row, then
lease rows in id order (docs/design.md, "Lock order"). A grant that locked lease rows first (a
pool take locks its members) and then its key's row met a revocation holding the key's row and
waiting for those members: PostgreSQL aborted the revocation and the key stayed usable. And a
revocation that ended its tenures in heap order met a renew-all's id order in a cycle.

The calls run WITHOUT the conflict retry (`apikit.retries`), so a deadlock surfaces."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from hands import services as hand_services
from hands.models import HandKey, Workspace
from leases import services as leases
from leases.models import Lease, LeaseStatus
from pools import services as pools
from tests.support.api import mint
from tests.support.locks import backend_pid, unretried, waiting_on_a_lock

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def a_key(workspace: Workspace) -> HandKey:
    hand, _ = hand_services.hand_create(workspace=workspace, name="h")
    return HandKey.objects.get(prefix=mint(hand, ["leases"]).split("_")[1])


def guard(key: HandKey) -> Any:
    return hand_services.key_guard(HandKey.objects.get(pk=key.pk))


def revoke(workspace: Workspace, key: HandKey) -> None:
    unretried(hand_services.key_revoke)(
        workspace_id=workspace.pk, prefix=key.prefix, actor="admin", reason="gone"
    )


def in_thread(call: Callable[[], Any], out: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = call()
        except BaseException as error:  # noqa: BLE001 - the test reads it
            out[f"{name}_error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_until_waiting(pids: list[int]) -> None:
    give_up = time.monotonic() + 20
    while not (pids and waiting_on_a_lock(pids[0])):
        assert time.monotonic() < give_up, "the revocation never waited for a lock"
        time.sleep(0.01)


def test_a_pool_take_meets_its_keys_revocation_without_a_deadlock(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = a_key(workspace)
    pools.pool_create(workspace=workspace, name="ports", capacity=2)
    first = {"workspace_id": workspace.pk, "name": "ports", "holder": "h", "ttl_s": 600}
    pools.pool_acquire(**first, process_id="w1", guard=guard(key))
    revoker: list[int] = []
    members_locked = threading.Event()
    lock_members = pools.lock_members

    def lock_then_pause(pool: Any) -> None:
        lock_members(pool)  # the members' rows, w1's live tenure among them
        members_locked.set()
        wait_until_waiting(revoker)  # the revocation now waits on a lock this take holds

    monkeypatch.setattr(pools, "lock_members", lock_then_pause)
    out: dict[str, Any] = {}
    take = in_thread(
        lambda: unretried(pools.pool_acquire)(**first, process_id="w2", guard=guard(key)),
        out,
        "take",
    )

    def revocation() -> None:
        assert members_locked.wait(20)
        revoker.append(backend_pid())
        revoke(workspace, key)

    revoked = in_thread(revocation, out, "revoke")
    for thread in (take, revoked):
        thread.join(60)
    assert "revoke_error" not in out, out["revoke_error"]
    assert "take_error" not in out, out["take_error"]
    assert HandKey.objects.get(pk=key.pk).revoked_at is not None
    # The take committed first and the revocation then ended it with w1's: nothing of the key
    # is held.
    assert not Lease.objects.filter(key_id=key.pk, status=LeaseStatus.HELD).exists()


def test_a_revocation_ends_its_tenures_in_id_order(workspace: Workspace) -> None:
    """r1 re-acquired lies after r2 in the heap; the revocation locks r1 (the lower id) first,
    so while it waits for r1 it holds nothing a renew-all would want next."""
    key = a_key(workspace)
    options = {"workspace_id": workspace.pk, "holder": "h", "process_id": "p", "ttl_s": 600}
    r1 = leases.lease_acquire(resource="r1", **options, guard=guard(key))
    r2 = leases.lease_acquire(resource="r2", **options, guard=guard(key))
    assert r1.id < r2.id
    leases.lease_release(workspace_id=workspace.pk, resource="r1", holder="h", fence=r1.fence)
    leases.lease_acquire(resource="r1", **options, guard=guard(key))
    revoker: list[int] = []
    out: dict[str, Any] = {}
    with transaction.atomic():
        with connection.cursor() as cursor:  # a renew-all's first row, in id order
            cursor.execute("SELECT id FROM leases_lease WHERE id = %s FOR UPDATE", [r1.id])
        revoked = in_thread(
            lambda: revoker.append(backend_pid()) or revoke(workspace, key), out, "revoke"
        )
        wait_until_waiting(revoker)
        with connection.cursor() as cursor:  # its next row: not held by the waiting revocation
            try:
                cursor.execute(
                    "SELECT id FROM leases_lease WHERE id = %s FOR UPDATE NOWAIT", [r2.id]
                )
            except OperationalError as error:
                pytest.fail(f"the revocation locked r2 before r1: {error}")
    revoked.join(60)
    assert "revoke_error" not in out, out["revoke_error"]
    assert not Lease.objects.filter(key_id=key.pk, status=LeaseStatus.HELD).exists()
