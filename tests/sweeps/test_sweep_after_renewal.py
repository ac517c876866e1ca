"""A renewal leaves the sweep's threshold behind (so PostgreSQL can update the row in place);
the sweep meets the row at its old threshold, records nothing, and moves the threshold on."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from leases import clock
from leases import services as leases
from leases.models import Event, Lease
from ops import jobs as ops_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


def test_a_renewed_lease_is_met_at_its_old_threshold_and_moved_on_quietly(
    frozen_clock: datetime,
) -> None:
    lease = leases.lease_acquire(
        workspace_id=1, resource="src/auth/", holder="a", process_id="p", ttl_s=10
    )
    for _ in range(3):
        clock.advance(8)
        leases.lease_renew(
            workspace_id=1, resource="src/auth/", holder="a", fence=lease.fence, process_id="p"
        )
    row = Lease.objects.get(resource="src/auth/")
    assert row.next_check_at == frozen_clock + timedelta(seconds=10)  # the first deadline
    assert row.deadline == frozen_clock + timedelta(seconds=34)

    result = ops_jobs.leases_sweep()
    row.refresh_from_db()
    assert result.processed == 1
    assert result.events == 0
    assert (row.noticed_state, row.next_check_at) == ("live", row.deadline)
    assert not Event.objects.exclude(kind="lease_acquired").exists()

    # Quiet from here: the expiry is recorded once, at the deadline the renewals promised.
    clock.advance(10)
    assert ops_jobs.leases_sweep().events == 0
    clock.advance(0.001)
    assert ops_jobs.leases_sweep().events == 1
    assert list(Event.objects.exclude(kind="lease_acquired").values_list("kind", flat=True)) == [
        "lease_expired"
    ]
