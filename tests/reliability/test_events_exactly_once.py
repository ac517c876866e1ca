"""Regressions the history harness found: every state change of a resource lease has exactly one
event, on the real clock.

1. On PostgreSQL the engine reads `clock_timestamp()` once per column, so a new tenure's
   `acquired_at` and `renewed_at` may differ by microseconds; the acquire used to take that for a
   renewal and write no `lease_acquired` event.
2. A tenure that expired and was taken over before any sweep saw it used to end without an
   event: the sweep then finds the new tenure, and nobody records the old one's expiry.
"""

from __future__ import annotations

from collections import Counter

import pytest

from leases import clock
from leases import services as leases
from leases.errors import LeaseHeld
from leases.models import Event
from ops.jobs import leases_sweep

pytestmark = pytest.mark.django_db


def test_it_records_one_grant_event_for_every_new_tenure_on_the_real_clock(workspace) -> None:
    for n in range(150):
        leases.lease_acquire(
            workspace_id=workspace.pk, resource=f"r/{n}", holder="a", process_id="p", ttl_s=60
        )
    counts = Counter(Event.objects.filter(kind="lease_acquired").values_list("resource", flat=True))
    assert len(counts) == 150 and set(counts.values()) == {1}


def test_a_second_acquire_by_the_holder_renews_without_an_event(workspace) -> None:
    first = leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder="a", process_id="p", ttl_s=60
    )
    again = leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder="a", process_id="p", ttl_s=90
    )
    assert again.fence == first.fence and again.process_id == "p" and again.interval_s == 90
    assert again.deadline > first.deadline
    # The hand's other process is another holder (DESIGN rule 6): refused, and no event either.
    with pytest.raises(LeaseHeld):
        leases.lease_acquire(
            workspace_id=workspace.pk, resource="r", holder="a", process_id="q", ttl_s=90
        )
    assert Event.objects.filter(kind="lease_acquired").count() == 1


@pytest.mark.parametrize("taker", ["b", "a"])
def test_a_takeover_before_any_sweep_records_the_expiry_once(workspace, taker: str) -> None:
    first = leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder="a", process_id="p", ttl_s=1
    )
    with clock.travel(5):
        second = leases.lease_acquire(
            workspace_id=workspace.pk, resource="r", holder=taker, process_id="p", ttl_s=60
        )
        leases_sweep()  # finds nothing left to record for fence 1
    assert second.fence == first.fence + 1
    kinds = list(Event.objects.order_by("id").values_list("kind", "fence", "hand"))
    assert kinds == [
        ("lease_acquired", 1, "a"),
        ("lease_expired", 1, "a"),
        ("lease_acquired", 2, taker),
    ]
    expired = Event.objects.get(kind="lease_expired")
    assert expired.actor == "system"
    assert expired.data["since"] == first.deadline.isoformat()


def test_the_sweep_and_a_later_acquire_never_both_record_an_expiry(workspace) -> None:
    leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder="a", process_id="p", ttl_s=1
    )
    with clock.travel(5):
        leases_sweep()
        leases.lease_acquire(
            workspace_id=workspace.pk, resource="r", holder="b", process_id="p", ttl_s=60
        )
    assert Event.objects.filter(kind="lease_expired").count() == 1


def test_a_tenure_that_runs_out_between_expire_and_take_still_records_its_end(
    workspace, monkeypatch
) -> None:
    """The clock crosses the deadline between the acquire's two statements: the take must not
    grab the lost row unrecorded; the next try records the expiry, then takes."""
    from leases import nodes

    leases.lease_acquire(
        workspace_id=workspace.pk, resource="r", holder="a", process_id="p", ttl_s=1
    )
    # The acquire's expiry step (every lost tenure on the resource's line of the tree).
    real_expire = nodes.expire_tree
    calls: list[int] = []

    def expire_too_early(**kwargs: object):  # noqa: ANN202
        calls.append(1)
        if len(calls) == 1:
            return []  # as if its clock read came a moment before the deadline
        return real_expire(**kwargs)

    monkeypatch.setattr(nodes, "expire_tree", expire_too_early)
    with clock.travel(5):
        second = leases.lease_acquire(
            workspace_id=workspace.pk, resource="r", holder="b", process_id="p", ttl_s=60
        )
    assert second.fence == 2 and len(calls) == 2
    assert list(Event.objects.order_by("id").values_list("kind", "fence")) == [
        ("lease_acquired", 1),
        ("lease_expired", 1),
        ("lease_acquired", 2),
    ]
