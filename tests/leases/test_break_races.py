"""A break of a node while a shared grant of that node is in flight, on PostgreSQL: the grant
has taken the node's next fence and written its tenure's row, not yet committed, when the break
starts. A break ends every tenure of the node and moves its fence past them (issue 20), so
whichever way the two are ordered, no tenure with a fence below the break's may stand after it.
Found by the proof's review: the break's UPDATEs could not see the grant's uncommitted row. Fixed:
a break takes the node's lock first (`leases.tree.lock_tree`), after any grant in flight.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from leases import services as leases
from leases.models import Event, EventKind

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run(target: Any, results: dict[str, Any], name: str) -> threading.Thread:
    def body() -> None:
        try:
            results[name] = target()
        except (GroundControlError, AssertionError) as error:
            results[name] = error
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_a_break_ends_a_shared_tenure_granted_while_it_started(workspace) -> None:  # noqa: ANN001
    ws = workspace.pk

    def acquire(holder: str) -> Any:
        return leases.lease_acquire(
            workspace_id=ws,
            resource="docs/",
            holder=holder,
            process_id=holder,
            ttl_s=60,
            mode="shared",
        )

    first = acquire("a")
    granted, go = threading.Event(), threading.Event()
    real = leases.record_event

    def record_event(**fields: Any) -> Any:
        # b's grant has taken its fence and written its row: hold its transaction open here.
        if fields["kind"] == EventKind.LEASE_ACQUIRED and fields["hand"] == "b":
            granted.set()
            assert go.wait(10)
        return real(**fields)

    results: dict[str, Any] = {}
    with mock.patch.object(leases, "record_event", record_event):
        grant = run(lambda: acquire("b"), results, "grant")
        assert granted.wait(10)
        brk = run(
            lambda: leases.lease_break(
                workspace_id=ws, resource="docs/", actor="boss", reason="race"
            ),
            results,
            "break",
        )
        time.sleep(0.5)  # the break is under way, waiting for the grant's lock
        go.set()
        grant.join(10)
        brk.join(10)
    second, broken = results["grant"], results["break"]
    assert not isinstance(second, Exception) and not isinstance(broken, Exception), results
    assert second.fence == first.fence + 1 and broken.fence > second.fence
    ended = sorted(
        e.data["broken_fence"]
        for e in Event.objects.filter(kind="lease_broken", fence=broken.fence)
    )
    with pytest.raises(GroundControlError):  # stale or lost: the break ended it
        leases.lease_check(workspace_id=ws, resource="docs/", fence=second.fence)
    assert ended == [first.fence, second.fence]
