"""The client and its runtime against the real API on a live server."""

from __future__ import annotations

import time

import pytest
from groundcontrol_client import Client, Hand

from evidence.models import Evidence
from fleet.models import AttemptEnd, Report
from tests.client.conftest import INTERVAL_S, PR_URL, Fleet, attempts_of

pytestmark = pytest.mark.django_db(transaction=True)


def hand_for(gc: Fleet, key: str, process_id: str = "host-a:1:1") -> Hand:
    return Hand(Client(gc.url, key), process_id=process_id)


def test_it_claims_heartbeats_through_long_work_and_finishes_with_evidence(gc: Fleet) -> None:
    run = gc.run()
    hand = hand_for(gc, gc.key_a)
    with hand.claim(run.pk) as attempt:
        assert attempt.attempt.lease.heartbeat_interval_s == INTERVAL_S
        # Longer than interval + grace: without the heartbeat thread the slot would be lost.
        time.sleep(3 * INTERVAL_S)
        assert not attempt.lost
        assert attempt.brief().evidence_required == ["pull_request"]
        attempt.report("halfway", percent=50)
        attempt.attach("pull_request", PR_URL)
        attempt.summary = "fixed the redirect"
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.FINISHED
    assert record.summary == "fixed the redirect"
    assert [(e.kind, e.url) for e in Evidence.objects.filter(attempt=record)] == [
        ("pull_request", PR_URL)
    ]
    heartbeats = Report.objects.filter(attempt=record, kind="heartbeat", renewed=True)
    assert heartbeats.count() >= 6
    assert set(heartbeats.values_list("process_id", flat=True)) == {"host-a:1:1"}
