from datetime import UTC, datetime, timedelta

import pytest

from leases.models import LeaseState
from leases.state import lease_state, next_threshold

DEADLINE = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return DEADLINE + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (-1, LeaseState.LIVE),
        (0, LeaseState.LIVE),  # exactly at the deadline: still live
        (0.001, LeaseState.LATE),
        (50, LeaseState.LATE),  # exactly deadline + grace/2: still late
        (50.001, LeaseState.STALLED),
        (100, LeaseState.STALLED),  # exactly deadline + grace: still stalled
        (100.001, LeaseState.LOST),
    ],
)
def test_it_computes_every_boundary(offset: float, expected: LeaseState) -> None:
    assert lease_state(status="held", deadline=DEADLINE, grace_s=100, now=at(offset)) == expected


def test_it_goes_straight_from_live_to_lost_with_no_grace() -> None:
    assert lease_state(status="held", deadline=DEADLINE, grace_s=0, now=at(0)) == LeaseState.LIVE
    assert (
        lease_state(status="held", deadline=DEADLINE, grace_s=0, now=at(0.001)) == LeaseState.LOST
    )


def test_it_calls_a_lease_nobody_holds_free() -> None:
    assert lease_state(status="free", deadline=DEADLINE, grace_s=10, now=at(-5)) == LeaseState.FREE


def test_it_names_the_next_threshold() -> None:
    assert next_threshold(deadline=DEADLINE, grace_s=100, now=at(-5)) == DEADLINE
    assert next_threshold(deadline=DEADLINE, grace_s=100, now=at(10)) == at(50)
    assert next_threshold(deadline=DEADLINE, grace_s=100, now=at(60)) == at(100)
    assert next_threshold(deadline=DEADLINE, grace_s=100, now=at(101)) is None
