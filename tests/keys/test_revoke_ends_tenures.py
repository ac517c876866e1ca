"""Revoking a key ends what it holds: every tenure taken with it (resource leases, shared ones,
and slot leases with their attempts) ends in the revoking transaction, each with its event and
the reason `key revoked`, whichever path revokes it (the API, the dashboard, the admin, the
revoking job, or a revocation of its issuer). Before, a revoked key's hand kept its leases live
until their TTL, and nothing the revoked key sent afterwards (a session's end) released them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fleet.models import Attempt, Run
from hands import services as hand_services
from hands.models import Hand, HandKey, Role, Workspace
from leases import clock
from leases.models import Event, Lease, LeaseStatus
from ops import jobs as ops_jobs
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db

REASON = "key revoked"


def prefix(api: Api) -> str:
    assert api.key is not None
    return api.key.split("_")[1]


def holding(api: Api, run: Run) -> dict[str, Any]:
    """The hand behind `api` takes an exclusive lease, a shared one, and a slot of `run`."""
    for resource, mode in (("src/app.py", "exclusive"), ("docs/", "shared")):
        taken = api.post(
            "/leases/acquire",
            {"resource": resource, "ttl_s": 600, "process_id": "p", "mode": mode},
        )
        assert taken.status_code == 201, taken.json()
    claimed = api.post(f"/runs/{run.pk}/claim", {"process_id": "p"})
    assert claimed.status_code == 201, claimed.json()
    return claimed.json()


def assert_ended(api: Api, attempt: dict[str, Any], actor: str) -> None:
    """Nothing the key took is held any more, each end is on record with the reason, and what
    the revoked key sends afterwards (a release, a session's end) is refused and harmless."""
    key_id = HandKey.objects.get(prefix=prefix(api)).pk
    assert not Lease.objects.filter(key_id=key_id, status=LeaseStatus.HELD).exists()
    for resource in ("src/app.py", "docs/"):
        lease = Lease.objects.get(resource=resource, holder=api.hand.name)
        assert lease.status == LeaseStatus.FREE
        ended = Event.objects.get(kind="lease_released", resource=resource)
        assert (ended.actor, ended.hand, ended.data["reason"]) == (actor, api.hand.name, REASON)
        assert ended.fence == lease.fence
    row = Attempt.objects.get(pk=attempt["id"])
    assert (row.end, row.end_reason) == ("released", REASON)
    released = Event.objects.get(kind="released", attempt_id=row.pk)
    assert (released.actor, released.hand, released.data) == (
        actor,
        api.hand.name,
        {"reason": REASON},
    )
    assert Lease.objects.get(pk=row.lease_id).status == LeaseStatus.FREE
    # The slot is open again at once: another hand claims it.
    other, _ = hand_services.hand_create(workspace=row.hand.workspace, name="next")
    again = Api(mint(other, ["work"]), other).post(f"/runs/{row.run_id}/claim", {"process_id": "q"})
    assert again.status_code == 201 and again.json()["slot"] == attempt["slot"]
    # The revoked key's later calls change nothing.
    before = Event.objects.count()
    error_of(
        api.post(
            f"/attempts/{row.pk}/release",
            {"fence": attempt["fence"], "process_id": "p", "reason": "done"},
        ),
        401,
        "key_revoked",
    )
    error_of(api.post("/leases/renew-all", {"process_id": "p"}), 401, "key_revoked")
    assert Event.objects.count() == before
    assert Attempt.objects.get(pk=row.pk).end_reason == REASON


@pytest.fixture
def holder(owner: Hand) -> Api:
    return Api(mint(owner, ["work", "leases"]), owner)


@pytest.fixture
def slot_run(make_run: Callable[..., Run]) -> Run:
    return make_run(heartbeat_interval_s=600, grace_s=600, slots=1)


def test_it_ends_every_tenure_when_the_api_revokes_the_key(
    holder: Api, boss: Api, slot_run: Run
) -> None:
    attempt = holding(holder, slot_run)
    assert boss.post(f"/keys/{prefix(holder)}/revoke", {"reason": "leaked"}).status_code == 200
    assert_ended(holder, attempt, actor="boss")
    # The events name the key that revoked, beside its hand.
    ended = Event.objects.filter(data__reason=REASON)
    assert ended.count() == 3 and {e.actor_key for e in ended} == {prefix(boss)}


def test_it_ends_every_tenure_when_the_dashboard_revokes_the_key(
    holder: Api, slot_run: Run, workspace: Workspace
) -> None:
    attempt = holding(holder, slot_run)
    user = get_user_model().objects.create_user(username="ada", password="pw-ada")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    revoked = client.post(f"/keys/{prefix(holder)}/revoke/", {"reason": "leaked"})
    assert revoked.status_code == 302
    assert_ended(holder, attempt, actor="ada")


def test_it_ends_every_tenure_when_the_admin_revokes_the_key(holder: Api, slot_run: Run) -> None:
    attempt = holding(holder, slot_run)
    root = get_user_model().objects.create_superuser(username="root", password="pw-root")
    client = Client()
    client.force_login(root)
    key = HandKey.objects.get(prefix=prefix(holder))
    answer = client.post(
        "/admin/hands/handkey/", {"action": "revoke_keys", "_selected_action": [key.pk]}
    )
    assert answer.status_code == 302
    assert HandKey.objects.get(pk=key.pk).revoked_at is not None
    assert_ended(holder, attempt, actor="root")


def test_it_ends_every_tenure_when_the_job_revokes_an_expired_key(
    owner: Hand, slot_run: Run, frozen_clock: datetime
) -> None:
    holder = Api(mint(owner, ["work", "leases"], expires_in_s=60), owner)
    attempt = holding(holder, slot_run)
    clock.advance(60)
    assert ops_jobs.keys_revoke_due().expired == 1
    assert_ended(holder, attempt, actor="system")


def test_it_ends_the_tenures_of_keys_revoked_with_their_issuer(
    workspace: Workspace, boss: Api, slot_run: Run, owner: Hand
) -> None:
    issuer_hand, _ = hand_services.hand_create(workspace=workspace, name="issuer")
    issuer = Api(mint(issuer_hand, hand_services.ALL_SCOPES), issuer_hand)
    minted = issuer.post(f"/hands/{owner.name}/keys", {"scopes": ["work", "leases"]})
    assert minted.status_code == 201, minted.json()
    holder = Api(minted.json()["key"], owner)
    attempt = holding(holder, slot_run)
    assert boss.post(f"/keys/{prefix(issuer)}/revoke", {}).status_code == 200
    assert HandKey.objects.get(prefix=prefix(holder)).revoked_at is not None
    assert_ended(holder, attempt, actor="boss")


def test_it_leaves_the_tenures_of_the_hands_other_keys_alone(
    owner: Hand, boss: Api, slot_run: Run
) -> None:
    """Only what was taken with the revoked key ends: the same hand's other key keeps its own."""
    revoked = Api(mint(owner, ["work", "leases"]), owner)
    kept = Api(mint(owner, ["work", "leases"]), owner)
    taken = kept.post("/leases/acquire", {"resource": "kept.txt", "ttl_s": 600, "process_id": "k"})
    assert taken.status_code == 201
    holding(revoked, slot_run)
    assert boss.post(f"/keys/{prefix(revoked)}/revoke", {}).status_code == 200
    lease = Lease.objects.get(resource="kept.txt")
    assert lease.status == LeaseStatus.HELD
    assert lease.key_id == HandKey.objects.get(prefix=prefix(kept)).pk
    renewed = kept.post(
        "/leases/renew",
        {"resource": "kept.txt", "fence": lease.fence, "process_id": "k"},
    )
    assert renewed.status_code == 200, renewed.json()


def test_every_grant_records_the_key_it_was_taken_with(
    holder: Api, slot_run: Run, boss: Api
) -> None:
    attempt = holding(holder, slot_run)
    key_id = HandKey.objects.get(prefix=prefix(holder)).pk
    assert Lease.objects.get(resource="src/app.py").key_id == key_id
    assert Lease.objects.get(resource="docs/", shared_by=holder.hand.name).key_id == key_id
    assert Lease.objects.get(pk=Attempt.objects.get(pk=attempt["id"]).lease_id).key_id == key_id
    # And the events name it beside the hand.
    acquired = Event.objects.filter(kind__in=["lease_acquired", "claimed"])
    assert acquired.count() == 3 and {e.actor_key for e in acquired} == {prefix(holder)}
    listed = boss.get("/events", {"kind": "claimed"}).json()
    assert listed and listed[0]["actor_key"] == prefix(holder)
