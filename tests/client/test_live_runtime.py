"""The client and its runtime against the real API on a live server."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from groundcontrol_client import (
    ClaimedAttempt,
    Client,
    Hand,
    LeaseHeld,
    NoOpenSlot,
    StaleFence,
    TenureLost,
)
from groundcontrol_client import Evidence as GcEvidence
from groundcontrol_client.core.errors import describe_denial

from evidence.models import Evidence
from fleet.attempts import services as attempt_services
from fleet.models import AttemptEnd
from tests.client.conftest import (
    GRACE_S,
    INTERVAL_S,
    PR_URL,
    Fleet,
    assert_heartbeats_kept_the_claim,
    attempts_of,
    wait_for,
)

AGENT = str(Path(__file__).with_name("agent.py"))

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
    assert record.process_id == "host-a:1:1"
    assert_heartbeats_kept_the_claim(record, for_s=1.5 * INTERVAL_S)


def test_it_detects_and_reports_a_lease_the_server_took_away(gc: Fleet) -> None:
    run = gc.run()
    hand = hand_for(gc, gc.key_a)
    with pytest.raises(TenureLost), hand.claim(run.pk) as attempt:
        attempt_services.lease_break(
            workspace_id=run.workspace_id,
            resource=f"run/{run.pk}/slot/0",
            actor="boss",
            reason="reassigning",
        )
        # The next heartbeat is refused, and the runtime stops renewing at once.
        wait_for(lambda: attempt.lost, timeout=3 * INTERVAL_S)
        assert attempt.lost_error is not None and attempt.lost_error.status == 409
        attempt.attach("pull_request", PR_URL)
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.LOST
    assert not Evidence.objects.filter(attempt=record).exists()


def test_it_completes_a_slot_from_a_subprocess_that_knows_only_url_key_and_run(gc: Fleet) -> None:
    run = gc.run()
    done = subprocess.run(
        [sys.executable, AGENT, str(run.pk), str(2.5 * INTERVAL_S)],
        env=gc.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (record,) = attempts_of(run)
    assert done.stdout.splitlines() == [f"claimed attempt {record.pk}", "finished"]
    assert record.end == AttemptEnd.FINISHED and record.hand.name == "hand-a"
    assert Evidence.objects.filter(attempt=record, kind="pull_request").count() == 1


def test_it_reclaims_a_killed_agents_slot_for_another_hand(gc: Fleet) -> None:
    run = gc.run()
    agent = subprocess.Popen(
        [sys.executable, AGENT, str(run.pk), "60"],
        env=gc.env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().startswith("claimed attempt ")
        agent.kill()
        agent.wait(10)
    finally:
        if agent.poll() is None:
            agent.kill()
    killed_at = time.monotonic()
    other = hand_for(gc, gc.key_b, process_id="host-b:2:2")
    with pytest.raises(NoOpenSlot):
        other.claim(run.pk).open()

    def claim() -> ClaimedAttempt | None:
        try:
            return other.claim(run.pk).open()
        except NoOpenSlot:
            return None

    attempt = wait_for(claim, timeout=10 * INTERVAL_S, step=0.2)
    # Not before the dead agent's interval and grace had run out.
    assert time.monotonic() - killed_at >= (INTERVAL_S + GRACE_S) * 0.5
    attempt.finish([GcEvidence("pull_request", PR_URL)])
    first, second = attempts_of(run)
    assert (first.hand.name, first.end) == ("hand-a", AttemptEnd.LOST)
    assert (second.hand.name, second.end) == ("hand-b", AttemptEnd.FINISHED)
    assert second.fence == first.fence + 1


def test_it_holds_a_resource_lease_and_another_hand_hears_who_holds_it(gc: Fleet) -> None:
    hand = hand_for(gc, gc.key_a)
    other = hand_for(gc, gc.key_b, process_id="host-b:2:2")
    with hand.lease("src/auth/", ttl=INTERVAL_S) as lease:
        time.sleep(2.5 * INTERVAL_S)  # past the ttl: the renewals keep it
        assert lease.check().fence == lease.fence
        with pytest.raises(LeaseHeld) as raised:
            other.lease("src/auth/", ttl=60).open()
        denial = raised.value
        assert (denial.get("holder"), denial.get("fence")) == ("hand-a", lease.fence)
        assert 0 < denial.get("expires_in_s") <= INTERVAL_S
        # Issue 17 (4): the denial says the holder is renewing, not that it is free in N s.
        assert describe_denial(denial).startswith(
            f"src/auth/ is held by hand hand-a (fence {lease.fence}), renewing; "
            "its current window ends in "
        )
    with other.lease("src/auth/", ttl=60) as taken:
        assert taken.fence == lease.fence + 1
        with pytest.raises(StaleFence):
            hand.client.lease_check("src/auth/", fence=lease.fence)


def test_one_call_renews_every_lease_of_a_process_sync_and_async(gc: Fleet) -> None:
    import asyncio

    from groundcontrol_client import AsyncClient, RenewedAll

    client = Client(gc.url, gc.key_a)
    for n in range(5):
        client.lease_acquire(f"src/f{n}.py", ttl_s=30, process_id="p:1")
    client.lease_acquire("elsewhere", ttl_s=30, process_id="p:2")
    done = client.lease_renew_all(process_id="p:1")
    assert isinstance(done, RenewedAll)
    assert done.resources() == [f"src/f{n}.py" for n in range(5)]
    assert done.not_renewed == []
    assert all(lease.expires_in_s and lease.expires_in_s > 29 for lease in done.renewed)

    async def renew_async() -> RenewedAll:
        async with AsyncClient(gc.url, gc.key_a) as aclient:
            return await aclient.lease_renew_all(process_id="p:2")

    assert asyncio.run(renew_async()).resources() == ["elsewhere"]
