"""A claim that meets a slot row locked for a moment (a sweep recording its loss, another claim)
waits for the lock instead of answering no_open_slot for a slot that is open."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from fleet.attempts import services as attempt_services
from fleet.plan import services as plan_services
from leases.models import Lease

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def test_it_waits_for_a_locked_open_slot_instead_of_refusing(workspace, lane, owner) -> None:  # noqa: ANN001
    package, _ = plan_services.work_package_create(lane=lane, key="lock", title="Lock")
    run = plan_services.run_create(work_package=package, title="one slot", slots=1)
    slot_lease = Lease.objects.get(resource=f"run/{run.pk}/slot/0")
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Lease.objects.select_for_update().get(pk=slot_lease.pk)
                locked.set()
                release.wait(5)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    assert locked.wait(5)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="host:1")
    waited = time.monotonic() - started
    holder.join(5)
    assert view.lease.fence == 1
    assert waited >= 0.4  # it queued behind the lock rather than skipping the slot
