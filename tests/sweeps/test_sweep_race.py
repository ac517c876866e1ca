"""Two sweeps at once on PostgreSQL (two workers, or two beats): each transition recorded once."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime

import pytest
from django.db import connection

from fleet import jobs
from fleet.attempts import services as attempt_services
from fleet.models import Attempt
from leases import clock
from leases import services as leases
from leases.models import Event, Lease
from ops import jobs as ops_jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("quiet_notifications"),
]

SLOTS = 60
RESOURCES = 90


def race(sweeps: int = 2, batch: int = 7) -> list[jobs.SweepResult]:
    """Run `sweeps` sweeps at the same instant, each in its own thread and connection."""
    barrier = threading.Barrier(sweeps)
    results: list[jobs.SweepResult] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(ops_jobs.leases_sweep(batch=batch))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(sweeps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def test_two_sweeps_racing_record_each_transition_exactly_once(
    owner, make_run, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=100, grace_s=60, slots=SLOTS)
    for i in range(SLOTS):
        attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id=f"host:{i}")
    for i in range(RESOURCES):
        leases.lease_acquire(
            workspace_id=run.workspace_id,
            resource=f"src/{i}",
            holder="b",
            process_id="p",
            ttl_s=100,
        )

    clock.advance(101)  # every slot late, every resource lease expired
    results = race()
    # Between them every due row was claimed once. How they shared the rows is the scheduler's
    # choice (alone on a machine, one thread has taken all 22 batches before the other's first),
    # so it is not asserted; that each transition is recorded once is, below.
    assert sum(r.processed for r in results) == SLOTS + RESOURCES
    clock.advance(30)  # every slot stalled
    race()
    clock.advance(30)  # every slot lost
    race()
    race()  # and once more with nothing left to do

    per_attempt = Counter(
        Event.objects.filter(kind__in=["late", "stalled", "lost"]).values_list("attempt_id", "kind")
    )
    attempts = list(Attempt.objects.filter(run=run).values_list("pk", flat=True))
    assert len(attempts) == SLOTS
    assert per_attempt == Counter(
        {(pk, kind): 1 for pk in attempts for kind in ("late", "stalled", "lost")}
    )
    expired = Counter(Event.objects.filter(kind="lease_expired").values_list("resource", flat=True))
    assert expired == Counter({f"src/{i}": 1 for i in range(RESOURCES)})
    assert set(Attempt.objects.filter(run=run).values_list("end", flat=True)) == {"lost"}
    assert not Lease.objects.filter(status="held", next_check_at__isnull=False).exists()
