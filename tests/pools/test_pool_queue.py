"""A pool's waiters are served first come, first served like any resource's (issue 20, items 3
and 4): a newcomer does not take a member a waiter came for first, and a full pool's denial says
where the request stands."""

from __future__ import annotations

from datetime import datetime

import pytest

from hands import services as hand_services
from leases import clock, queue
from leases import services as leases
from leases.errors import LeaseHeld
from pools import services as pools

pytestmark = pytest.mark.django_db


def test_a_newcomer_does_not_take_the_member_a_waiter_came_for(frozen_clock: datetime) -> None:
    workspace = hand_services.workspace_get_or_create(name="acme")
    pools.pool_create(workspace=workspace, name="ports", members=["8001"])
    ws = workspace.pk

    def take(holder: str, ticket=None):  # noqa: ANN001, ANN202
        return pools.pool_acquire(
            workspace_id=ws,
            name="ports",
            holder=holder,
            process_id=holder,
            ttl_s=60,
            ticket=ticket,
        )[1]

    held = take("a")
    clock.advance(30)
    waiter = queue.join(
        workspace_id=ws, resource="pool/ports", holder="w", process_id="w", mode="exclusive"
    )
    with pytest.raises(LeaseHeld) as full:
        take("b")
    fields = full.value.fields
    assert (fields["position"], fields["ahead"]) == (2, ["a", "w"])
    assert fields["estimated_wait_s"] == pytest.approx(90, abs=1)  # a's 30 s left, then w's 60
    leases.lease_release(workspace_id=ws, resource=held.resource, holder="a", fence=held.fence)
    with pytest.raises(LeaseHeld) as queued:
        take("b")
    assert "1 free member(s), but 1 waiting request(s) came first" in queued.value.message
    granted = take("w", ticket=waiter)
    assert (granted.holder, granted.queued_at) == ("w", waiter.queued_at)
    assert queue.line(workspace_id=ws) == []
