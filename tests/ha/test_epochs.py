"""A new primary's epoch (leases/epochs.py): the first connection that finds a new (system
identifier, timeline) records it and shifts every held lease so that it keeps the time it had
left at the old primary's last promise; once, whoever else races for it; never for the first
epoch; never a state change. On the main PostgreSQL server: its timeline does not change, so the
tests name a new timeline themselves, and an outage is staged by moving the stamps back (as if
the old primary's last promise had been that long ago)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, connections
from django.db.backends.signals import connection_created

from leases import clock, epochs
from leases import services as leases
from leases.models import ClockEpoch, Lease, LeaseState, Waiter
from leases.state import lease_state

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = 4242


@pytest.fixture(autouse=True)
def _no_hook() -> Iterator[None]:
    """The tests name their own epochs: connections they open (the race's threads) must not
    record the server's real one meanwhile. The last test puts the hook back on purpose."""
    connection_created.disconnect(dispatch_uid="leases.epochs")
    ClockEpoch.objects.all().delete()
    yield
    connection_created.connect(epochs.on_connection_created, dispatch_uid="leases.epochs")


def record(timeline: int, system: int = SYSTEM) -> tuple[bool, float]:
    with connection.cursor() as cursor:
        return epochs.record_epoch(cursor, system_identifier=system, timeline=timeline)


def outage(seconds: float) -> None:
    """The old primary's stamps, `seconds` ago: as if it had died then, unanswered since."""
    step = timedelta(seconds=seconds)
    for lease in Lease.objects.filter(status="held"):
        Lease.objects.filter(pk=lease.pk).update(
            acquired_at=lease.acquired_at - step,
            renewed_at=lease.renewed_at - step,
            deadline=lease.deadline - step,
            next_check_at=lease.next_check_at - step if lease.next_check_at else None,
        )


def state(lease: Lease) -> LeaseState:
    return lease_state(
        status=lease.status, deadline=lease.deadline, grace_s=lease.grace_s, now=clock.db_now()
    )


@pytest.fixture
def first_epoch(workspace) -> None:  # noqa: ANN001
    assert record(timeline=1) == (True, 0.0)


def acquire(workspace, resource: str, ttl_s: float, holder: str = "hand-a"):  # noqa: ANN001, ANN201
    return leases.lease_acquire(
        workspace_id=workspace.id, resource=resource, holder=holder, process_id="p", ttl_s=ttl_s
    )


def test_it_records_the_first_epoch_without_shifting_anything(workspace) -> None:  # noqa: ANN001
    acquire(workspace, "a", 30)
    before = Lease.objects.get(resource="a")
    assert record(timeline=1) == (True, 0.0)
    epoch = ClockEpoch.objects.get()
    assert (epoch.timeline, epoch.last_promise_at, epoch.shift_s) == (1, None, 0.0)
    after = Lease.objects.get(resource="a")
    assert (after.deadline, after.renewed_at) == (before.deadline, before.renewed_at)


def test_it_gives_every_held_lease_back_the_time_it_had_left(workspace, first_epoch) -> None:  # noqa: ANN001
    live = acquire(workspace, "live", 10)  # 10 s left at the last promise
    acquire(workspace, "gone", 1)
    # `gone` was lost before the old primary's last promise: it stays lost (rule 4).
    Lease.objects.filter(resource="gone").update(
        deadline=live.server_time - timedelta(seconds=5),
        renewed_at=live.server_time - timedelta(seconds=6),
        acquired_at=live.server_time - timedelta(seconds=6),
    )
    acquire(workspace, "free", 10)
    leases.lease_release(workspace_id=workspace.id, resource="free", holder="hand-a", fence=1)
    free_before = Lease.objects.get(resource="free")
    Waiter.objects.create(
        workspace_id=workspace.id,
        resource="live",
        holder="hand-b",
        queued_at=live.server_time,
        expires_at=live.server_time + timedelta(seconds=3),
    )
    # `recorded` was recorded lost by the sweep after the last promise: it stays lost.
    acquire(workspace, "recorded", 10)
    Lease.objects.filter(resource="recorded").update(
        noticed_state=LeaseState.LOST, renewed_at=live.server_time, acquired_at=live.server_time
    )
    outage(30)  # longer than any TTL here: without the shift every lease is lost
    recorded_before = Lease.objects.get(resource="recorded")
    live_before = Lease.objects.get(resource="live")
    assert state(live_before) == LeaseState.LOST
    promised = live_before.renewed_at

    recorded, shift = record(timeline=2)

    assert recorded and 30 <= shift < 32
    epoch = ClockEpoch.objects.get(timeline=2)
    assert epoch.last_promise_at == promised and epoch.leases_shifted == 2
    assert abs((epoch.started_at - epoch.last_promise_at).total_seconds() - shift) < 1e-6
    lease = Lease.objects.get(resource="live")
    # Exactly the time it had left at the last promise, to the microsecond. (About 10 s: the
    # grant reads the clock once for renewed_at and again for its deadline, so a loaded machine
    # may put a few microseconds between them.)
    had_left = live_before.deadline - promised
    assert lease.deadline - epoch.started_at == had_left and state(lease) == LeaseState.LIVE
    assert 9.9 <= had_left.total_seconds() < 10.1
    assert lease.renewed_at == promised + timedelta(seconds=shift)
    assert state(Lease.objects.get(resource="gone")) == LeaseState.LOST
    assert Lease.objects.get(resource="recorded").deadline == recorded_before.deadline
    free = Lease.objects.get(resource="free")
    assert (free.deadline, free.released_at) == (free_before.deadline, free_before.released_at)
    waiter = Waiter.objects.get()
    assert waiter.expires_at - waiter.queued_at == timedelta(seconds=3)
    assert waiter.queued_at == live.server_time + timedelta(seconds=shift)  # it was not staged
    # The holder renews on the new primary, with the fence it had.
    renewed = leases.lease_renew(
        workspace_id=workspace.id, resource="live", holder="hand-a", fence=1, process_id="p"
    )
    assert renewed.fence == 1


def test_it_shifts_once_per_epoch(workspace, first_epoch) -> None:  # noqa: ANN001
    acquire(workspace, "a", 10)
    outage(20)
    assert record(timeline=2)[0] is True
    deadline = Lease.objects.get(resource="a").deadline
    assert record(timeline=2) == (False, 0.0)
    assert Lease.objects.get(resource="a").deadline == deadline
    # Another cluster's timeline 2 is another epoch.
    assert record(timeline=2, system=SYSTEM + 1)[0] is True


def test_it_moves_deadlines_back_for_a_clock_that_runs_behind(workspace, first_epoch) -> None:  # noqa: ANN001
    """The old primary's clock 60 s ahead of the new one's: its stamps are in the new clock's
    future, and the shift brings them back, so the lease still has its 10 s, not 70."""
    acquire(workspace, "a", 10)
    outage(-60)
    recorded, shift = record(timeline=2)
    assert recorded and -60 < shift < -59
    lease = Lease.objects.get(resource="a")
    assert 9 <= (lease.deadline - clock.db_now()).total_seconds() <= 10


def test_it_shifts_once_when_many_connections_find_the_new_primary_at_once(
    workspace, first_epoch
) -> None:  # noqa: ANN001
    acquire(workspace, "a", 10)
    outage(20)
    results: list[tuple[bool, float]] = []
    barrier = threading.Barrier(8)

    def race() -> None:
        try:
            barrier.wait()
            results.append(record(timeline=2))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r[0] for r in results) == [False] * 7 + [True]
    shift = next(s for ok, s in results if ok)
    assert ClockEpoch.objects.filter(timeline=2).count() == 1
    lease = Lease.objects.get(resource="a")
    assert 9 <= (lease.deadline - clock.db_now()).total_seconds() <= 10
    assert 20 <= shift < 22


def test_a_new_connection_records_its_primarys_epoch_before_it_serves(workspace) -> None:  # noqa: ANN001
    connection_created.connect(epochs.on_connection_created, dispatch_uid="leases.epochs")
    connection.close()
    Lease.objects.count()  # a new connection: `connection_created` ran the probe first
    epoch = ClockEpoch.objects.get()
    with connection.cursor() as cursor:
        cursor.execute("SELECT system_identifier FROM pg_control_system()")
        assert epoch.system_identifier == cursor.fetchone()[0]
    assert epoch.timeline >= 1 and epoch.shift_s == 0
    connection.close()
    Lease.objects.count()
    assert ClockEpoch.objects.count() == 1  # known: nothing more


def test_a_connection_whose_probe_fails_is_closed_not_served(workspace, monkeypatch) -> None:  # noqa: ANN001
    """A new primary's epoch that cannot be recorded (here: a probe that fails) must not leave a
    connection that serves calls with unmoved deadlines."""
    connection_created.connect(epochs.on_connection_created, dispatch_uid="leases.epochs")
    monkeypatch.setattr(epochs, "PROBE", "SELECT 1 / 0")
    connection.close()
    with pytest.raises(DatabaseError):
        Lease.objects.count()
    assert connection.connection is None or connection.connection.closed
    monkeypatch.undo()
    connection.close()
    assert Lease.objects.count() >= 0  # the next connection passes
