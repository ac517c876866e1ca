"""Key revocation: expired keys, and revoke-when-done keys once their hand's work is over."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from hands import services as hand_services
from hands.errors import KeyRevoked
from hands.models import HandKey
from leases import clock
from leases.models import Event
from ops import jobs as ops_jobs
from ops.models import JobRun

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quiet_notifications")]


def revoked_events() -> list[tuple[str, str, str, str]]:
    return [
        (e.actor, e.hand, e.data["prefix"], e.data["reason"])
        for e in Event.objects.filter(kind="key_revoked").order_by("id")
    ]


def test_it_revokes_a_key_at_its_expiry_with_the_system_as_actor(
    owner, teammate, frozen_clock: datetime
) -> None:
    issued = hand_services.key_issue(hand=owner, scopes=["work"], actor="boss", expires_in_s=60)
    other = hand_services.key_issue(hand=teammate, scopes=["work"], actor="boss", expires_in_s=600)
    clock.advance(59.999)
    assert ops_jobs.keys_revoke_due().processed == 0
    clock.advance(0.001)
    result = ops_jobs.keys_revoke_due()
    assert (result.expired, result.done) == (1, 0)
    key = HandKey.objects.get(pk=issued.key.pk)
    assert (key.revoked_by, key.revoke_reason) == ("system", "expired")
    assert key.revoked_at == frozen_clock + timedelta(seconds=60)
    assert revoked_events() == [("system", "hand-a", issued.key.prefix, "expired")]
    assert HandKey.objects.get(pk=other.key.pk).revoked_at is None
    assert ops_jobs.keys_revoke_due().processed == 0
    assert len(revoked_events()) == 1
    with pytest.raises(KeyRevoked):
        hand_services.key_authenticate(issued.plaintext)
    assert JobRun.objects.get(name="revoke_keys").runs == 3


@pytest.mark.parametrize("end", ["finished", "released", "lost"])
def test_it_revokes_a_revoke_when_done_key_once_its_hands_attempt_ends(
    end, owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=10, grace_s=10, slots=1)
    issued = hand_services.key_issue(
        hand=owner, scopes=["work"], actor="boss", revoke_when_done=True
    )
    plain = hand_services.key_issue(hand=owner, scopes=["work"], actor="boss")
    view = claim(owner, run)
    ops_jobs.keys_revoke_due()
    assert HandKey.objects.get(pk=issued.key.pk).revoked_at is None  # still working
    options = {"hand": owner, "attempt_id": view.attempt.pk, "fence": 1, "process_id": "host:1"}
    if end == "finished":
        attempt_finish(evidence=[], **options)
    elif end == "released":
        attempt_services.attempt_release(reason="blocked", **options)
    else:
        clock.advance(21)
        ops_jobs.leases_sweep()
    result = ops_jobs.keys_revoke_due()
    assert (result.done, result.expired) == (1, 0)
    reason = f"revoke when done: attempt {view.attempt.pk} {end}"
    key = HandKey.objects.get(pk=issued.key.pk)
    assert (key.revoked_by, key.revoke_reason) == ("system", reason)
    assert revoked_events() == [("system", "hand-a", issued.key.prefix, reason)]
    assert HandKey.objects.get(pk=plain.key.pk).revoked_at is None
    ops_jobs.keys_revoke_due()
    assert len(revoked_events()) == 1


def test_a_hand_still_working_another_slot_keeps_its_key_until_that_ends(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=100, grace_s=10, slots=2)
    issued = hand_services.key_issue(
        hand=owner, scopes=["work"], actor="boss", revoke_when_done=True
    )
    first = claim(owner, run, "host:1")
    second = claim(owner, run, "host:2")
    attempt_services.attempt_release(
        hand=owner, attempt_id=first.attempt.pk, fence=1, process_id="host:1", reason="done"
    )
    assert ops_jobs.keys_revoke_due().processed == 0
    attempt_services.attempt_release(
        hand=owner, attempt_id=second.attempt.pk, fence=1, process_id="host:2", reason="done"
    )
    assert ops_jobs.keys_revoke_due().done == 1
    assert HandKey.objects.get(pk=issued.key.pk).revoke_reason == (
        f"revoke when done: attempt {second.attempt.pk} released"
    )


def test_an_attempt_that_ended_before_the_key_was_issued_does_not_revoke_it(
    owner, make_run, claim
) -> None:
    # The real database clock throughout: the key's created_at is the database's own time.
    run = make_run(heartbeat_interval_s=100, grace_s=10, slots=1)
    view = claim(owner, run)
    attempt_services.attempt_release(
        hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", reason="done"
    )
    issued = hand_services.key_issue(
        hand=owner, scopes=["work"], actor="boss", revoke_when_done=True
    )
    assert ops_jobs.keys_revoke_due().processed == 0
    assert HandKey.objects.get(pk=issued.key.pk).revoked_at is None


def test_a_key_the_job_revokes_takes_every_key_it_issued_with_it(
    owner, teammate, make_run, claim, frozen_clock: datetime
) -> None:
    """Revoking a key revokes the keys it issued, whoever revokes it (issue 18, item 2): here the
    job revokes a revoke-when-done key whose hand's work ended, and the key it minted for a hand
    that never worked goes with it."""
    run = make_run(heartbeat_interval_s=10, grace_s=10, slots=1)
    # `supervise`: a key mints keys for another hand only with it (test_no_impersonation.py).
    parent = hand_services.key_issue(
        hand=owner, scopes=["hands", "work", "supervise"], actor="boss", revoke_when_done=True
    ).key
    parent = HandKey.objects.select_related("hand").get(pk=parent.pk)
    child = hand_services.key_issue_by(issuer=parent, hand=teammate, scopes=["work"]).key
    view = claim(owner, run)
    attempt_services.attempt_release(
        hand=owner, attempt_id=view.attempt.pk, fence=1, process_id="host:1", reason="blocked"
    )
    assert ops_jobs.keys_revoke_due().done == 1
    revoked = HandKey.objects.get(pk=child.pk)
    assert (revoked.revoked_by, revoked.revoke_reason) == (
        "system",
        f"its issuer {parent.prefix} was revoked",
    )
    assert ("system", "hand-b", child.prefix, revoked.revoke_reason) in revoked_events()
