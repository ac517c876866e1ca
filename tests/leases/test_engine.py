"""The resource lease engine, on whichever database the suite runs on, at exact boundaries."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from apikit.errors import NotFound, ValidationFailed
from leases import clock
from leases import services as leases
from leases.errors import LeaseHeld, LeaseLost, NotHolder, StaleFence
from leases.models import Event, Lease, LeaseState, Refusal

pytestmark = pytest.mark.django_db
WS = 1


def acquire(holder: str = "a", resource: str = "src/auth/", ttl: float = 60, process: str = "p1"):
    return leases.lease_acquire(
        workspace_id=WS, resource=resource, holder=holder, process_id=process, ttl_s=ttl
    )


def test_it_grants_a_free_resource_at_fence_one(frozen_clock: datetime) -> None:
    lease = acquire()
    assert (lease.holder, lease.fence, lease.state) == ("a", 1, LeaseState.LIVE)
    assert lease.server_time == frozen_clock
    assert lease.deadline == frozen_clock + timedelta(seconds=60)
    assert lease.expires_in_s == 60
    assert Event.objects.filter(kind="lease_acquired", resource="src/auth/", fence=1).count() == 1


def test_it_denies_with_holder_fence_state_and_time_left(frozen_clock: datetime) -> None:
    acquire("a")
    clock.advance(20)
    with pytest.raises(LeaseHeld) as denied:
        acquire("b")
    assert denied.value.fields == {
        "holder": "a",
        "fence": 1,
        "expires_in_s": 40,
        "lost_in_s": 40,
        "state": "live",
        "resource": "src/auth/",
        "mode": "exclusive",
        "others": 0,
        "requested": "src/auth/",
        "position": 1,
        "ahead": ["a"],
        "estimated_wait_s": 40,
    }
    assert "src/auth/ is held by hand 'a' (fence 1), renewing; its current window ends in 40 s" in (
        denied.value.message
    )
    row = Lease.objects.get(resource="src/auth/")
    assert (row.holder, row.fence) == ("a", 1)
    refusal = Refusal.objects.get()
    assert (refusal.code, refusal.hand, refusal.workspace_id) == ("lease_held", "b", WS)


def test_it_keeps_the_holder_exactly_at_the_deadline_and_frees_it_just_after(
    frozen_clock: datetime,
) -> None:
    acquire("a", ttl=10)
    clock.advance(10)
    with pytest.raises(LeaseHeld):
        acquire("b")
    clock.advance(0.001)
    lease = acquire("b")
    assert (lease.holder, lease.fence) == ("b", 2)


def test_a_second_acquire_by_the_holder_renews_and_keeps_the_fence(frozen_clock: datetime) -> None:
    acquire("a", ttl=10)
    clock.advance(5)
    lease = acquire("a", ttl=10)
    assert lease.fence == 1
    assert lease.deadline == frozen_clock + timedelta(seconds=15)
    assert Event.objects.filter(kind="lease_acquired").count() == 1


def test_renew_pushes_the_deadline_for_the_current_fence_only(frozen_clock: datetime) -> None:
    acquire("a", ttl=30)
    clock.advance(29)
    lease = leases.lease_renew(
        workspace_id=WS, resource="src/auth/", holder="a", fence=1, process_id="p1"
    )
    assert lease.deadline == frozen_clock + timedelta(seconds=59)
    with pytest.raises(StaleFence) as stale:
        leases.lease_renew(
            workspace_id=WS, resource="src/auth/", holder="a", fence=7, process_id="p1"
        )
    assert stale.value.fields["current_fence"] == 1


def test_lost_is_final_a_renewal_after_the_deadline_is_refused(frozen_clock: datetime) -> None:
    acquire("a", ttl=10)
    clock.advance(10.001)
    with pytest.raises(LeaseLost):
        leases.lease_renew(
            workspace_id=WS, resource="src/auth/", holder="a", fence=1, process_id="p1"
        )
    # Still refused later, though nobody else took it in between.
    clock.advance(100)
    with pytest.raises(LeaseLost):
        leases.lease_renew(
            workspace_id=WS, resource="src/auth/", holder="a", fence=1, process_id="p1"
        )
    with pytest.raises(LeaseLost):
        leases.lease_check(workspace_id=WS, resource="src/auth/", fence=1)


def test_fences_strictly_increase_across_acquire_release_break_and_reacquire(
    frozen_clock: datetime,
) -> None:
    seen = [acquire("a").fence]
    leases.lease_release(workspace_id=WS, resource="src/auth/", holder="a", fence=seen[-1])
    seen.append(acquire("b").fence)
    broken = leases.lease_break(workspace_id=WS, resource="src/auth/", actor="boss", reason="stuck")
    seen.append(broken.fence)
    seen.append(acquire("a").fence)
    clock.advance(61)  # a is lost
    seen.append(acquire("c").fence)
    leases.lease_release(workspace_id=WS, resource="src/auth/", holder="c", fence=seen[-1])
    seen.append(acquire("c").fence)
    assert seen == sorted(set(seen)), seen
    assert seen == [1, 2, 3, 4, 5, 6]


def test_release_frees_at_once_and_a_retry_answers_the_same(frozen_clock: datetime) -> None:
    acquire("a")
    first = leases.lease_release(workspace_id=WS, resource="src/auth/", holder="a", fence=1)
    again = leases.lease_release(workspace_id=WS, resource="src/auth/", holder="a", fence=1)
    assert first.state == again.state == LeaseState.FREE
    assert Event.objects.filter(kind="lease_released").count() == 1
    assert acquire("b").fence == 2


def test_release_by_another_hand_is_refused(frozen_clock: datetime) -> None:
    acquire("a")
    with pytest.raises(NotHolder):
        leases.lease_release(workspace_id=WS, resource="src/auth/", holder="b", fence=1)


def test_a_stale_fence_is_refused_everywhere_it_is_carried(frozen_clock: datetime) -> None:
    acquire("a")
    leases.lease_break(workspace_id=WS, resource="src/auth/", actor="boss", reason="r")
    acquire("b")  # fence 3
    calls = [
        lambda: leases.lease_renew(
            workspace_id=WS, resource="src/auth/", holder="a", fence=1, process_id="p1"
        ),
        lambda: leases.lease_release(workspace_id=WS, resource="src/auth/", holder="a", fence=1),
        lambda: leases.lease_check(workspace_id=WS, resource="src/auth/", fence=1),
        lambda: leases.lease_check(workspace_id=WS, resource="src/auth/", fence=99),
    ]
    for call in calls:
        with pytest.raises(StaleFence) as stale:
            call()
        assert stale.value.fields["current_fence"] == 3


def test_check_accepts_the_current_fence(frozen_clock: datetime) -> None:
    acquire("a")
    assert leases.lease_check(workspace_id=WS, resource="src/auth/", fence=1).holder == "a"


def test_break_of_a_free_resource_is_not_found(frozen_clock: datetime) -> None:
    with pytest.raises(NotFound):
        leases.lease_break(workspace_id=WS, resource="nothing", actor="boss", reason="r")


def test_workspaces_do_not_share_resources(frozen_clock: datetime) -> None:
    acquire("a")
    other = leases.lease_acquire(
        workspace_id=WS + 1, resource="src/auth/", holder="b", process_id="p", ttl_s=5
    )
    assert other.fence == 1


@pytest.mark.parametrize("resource", ["", "x" * 513, "bad\x00name", "tab\tname", "run/1/slot/0"])
def test_it_refuses_bad_resource_names(resource: str) -> None:
    with pytest.raises(ValidationFailed):
        acquire(resource=resource)
    assert not Lease.objects.exists()


@pytest.mark.parametrize("ttl", [0, -5, 86_401, "10", None, True, float("nan")])
def test_it_refuses_bad_ttls(ttl: object) -> None:
    with pytest.raises(ValidationFailed):
        acquire(ttl=ttl)  # type: ignore[arg-type]


def test_it_uses_the_database_clock_not_the_web_workers(time_machine) -> None:  # noqa: ANN001
    # The web worker's clock is a year off; the lease still lasts its ttl by the database's.
    time_machine.move_to("2001-01-01T00:00:00Z")
    lease = acquire(ttl=60)
    assert lease.server_time.year >= 2026
    assert lease.expires_in_s == pytest.approx(60, abs=1)
