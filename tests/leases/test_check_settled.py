"""`check` is what storage trusts before it applies a write: a check that meets a break (or a
grant) still in flight waits for its commit and answers with the new fence, never "current" for
a fence the event log already shows superseded."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from leases import services as leases
from leases.errors import StaleFence

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def test_a_check_waits_for_a_break_in_flight_and_calls_the_old_fence_stale() -> None:
    lease = leases.lease_acquire(
        workspace_id=1, resource="migrations", holder="a", process_id="p", ttl_s=60
    )
    broken, finish = threading.Event(), threading.Event()

    def break_slowly() -> None:
        try:
            with transaction.atomic():
                leases.lease_break(workspace_id=1, resource="migrations", actor="boss", reason="r")
                broken.set()
                finish.wait(5)  # the break's transaction is still open here
        finally:
            connection.close()

    supervisor = threading.Thread(target=break_slowly)
    supervisor.start()
    assert broken.wait(5)
    threading.Timer(0.5, finish.set).start()
    started = time.monotonic()
    with pytest.raises(StaleFence) as stale:
        leases.lease_check(workspace_id=1, resource="migrations", fence=lease.fence)
    supervisor.join(5)
    assert stale.value.fields["current_fence"] == lease.fence + 1
    assert time.monotonic() - started >= 0.4  # it waited for the commit instead of answering
