"""Keys that live as long as their lease (issue 21, item 4): a key minted `bound_to` one tenure
works only while that tenure is live, and the very next call after it ends (released, lost,
broken, finished) answers `key_revoked`, on the hot calls (leasing/hot.py) and the other calls
alike, without any job having run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.db import connection

from hands import keys
from hands import services as hand_services
from hands.models import HandKey
from leases import clock
from leases.clock import now_expression, now_sql
from leases.services import lease_acquire, lease_release
from tests.support.api import Api, error_of

pytestmark = pytest.mark.django_db


def bound_key(boss: Api, hand: str, resource: str, fence: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"scopes": ["work", "leases"], "bound_to": {"resource": resource}}
    if fence is not None:
        body["bound_to"]["fence"] = fence
    answer = boss.post(f"/hands/{hand}/keys", body)
    assert answer.status_code == 201, answer.content
    return answer.json()


def held(api: Api, resource: str = "src/auth/", ttl: float = 30) -> dict[str, Any]:
    answer = api.post("/leases/acquire", {"resource": resource, "ttl_s": ttl, "process_id": "p:1"})
    assert answer.status_code == 201, answer.content
    return answer.json()


def calls(key: str, owner) -> dict[str, Any]:  # noqa: ANN001
    """One call of each kind with `key`: a DRF view's (`/me`) and a hot call's (a renew of the
    hand's lease on `other`)."""
    api = Api(key, owner)
    return {
        "drf": api.get("/me"),
        "hot": api.post("/leases/renew", {"resource": "other", "fence": 1, "process_id": "p:1"}),
    }


def assert_refused(key: str, owner) -> None:  # noqa: ANN001
    for path, answer in calls(key, owner).items():
        error = error_of(answer, 401, "key_revoked")
        assert "whose tenure has ended" in error["message"], (path, error)
        assert error["bound_to"]["resource"] == "src/auth/"


def assert_usable(key: str, owner) -> None:  # noqa: ANN001
    answers = calls(key, owner)
    assert answers["drf"].status_code == 200, answers["drf"].content
    # The hot renew of another lease of the hand's, held by the same process, goes through.
    assert answers["hot"].status_code == 200, answers["hot"].content


def test_a_bound_key_works_while_its_tenure_lives_and_not_after_release(
    api_a: Api, boss: Api, owner
) -> None:  # noqa: ANN001
    lease = held(api_a)
    minted = bound_key(boss, "hand-a", "src/auth/")
    assert minted["bound_to"] == {"resource": "src/auth/", "fence": lease["fence"]}
    held(api_a, "other")
    assert_usable(minted["key"], owner)
    api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    assert_refused(minted["key"], owner)
    # A new tenure of the same resource, even the same hand's, does not revive it.
    held(api_a)
    assert_refused(minted["key"], owner)
    listed = boss.get("/hands/hand-a/keys").json()
    assert [k["bound_to"] for k in listed if k["prefix"] == minted["prefix"]] == [
        {"resource": "src/auth/", "fence": lease["fence"]}
    ]


def test_it_is_refused_from_the_instant_its_lease_is_lost(
    api_a: Api, boss: Api, owner, frozen_clock: datetime
) -> None:  # noqa: ANN001
    held(api_a, ttl=10)
    held(api_a, "other", ttl=100)
    minted = bound_key(boss, "hand-a", "src/auth/")
    clock.advance(10)  # exactly at the deadline the tenure is still alive
    assert_usable(minted["key"], owner)
    clock.advance(0.001)
    assert_refused(minted["key"], owner)


def test_a_break_ends_it_too(api_a: Api, boss: Api, owner) -> None:  # noqa: ANN001
    held(api_a)
    held(api_a, "other")
    minted = bound_key(boss, "hand-a", "src/auth/")
    assert_usable(minted["key"], owner)
    boss.post("/leases/break", {"resource": "src/auth/", "reason": "test"})
    assert_refused(minted["key"], owner)


def test_a_key_bound_to_an_attempt_ends_with_its_finish(
    api_a: Api, boss: Api, owner, make_run
) -> None:  # noqa: ANN001
    run = make_run(slots=1, evidence_required=[])
    claim = api_a.post(f"/runs/{run.id}/claim", {"process_id": "p:1"}).json()
    resource = claim["lease"]["resource"]  # the attempt's slot lease, as its answer names it
    minted = boss.post(
        "/hands/hand-a/keys",
        {"scopes": ["work"], "bound_to": {"resource": resource, "fence": claim["fence"]}},
    )
    assert minted.status_code == 201, minted.content
    key = minted.json()["key"]
    child = Api(key, owner)
    assert child.get(f"/attempts/{claim['id']}").status_code == 200
    finished = api_a.post(
        f"/attempts/{claim['id']}/finish",
        {"fence": claim["fence"], "process_id": "p:1", "evidence": []},
    )
    assert finished.status_code == 200, finished.content
    error_of(child.get("/me"), 401, "key_revoked")


@pytest.mark.parametrize(
    "bound_to",
    [
        {"resource": "src/auth/", "fence": 99},  # not its tenure
        {"resource": "teammates"},  # another hand's lease
    ],
)
def test_it_binds_only_to_a_live_tenure_of_the_hand_it_is_for(
    api_a: Api, api_b: Api, boss: Api, bound_to: dict[str, Any]
) -> None:
    held(api_a)
    held(api_b, "teammates")
    answer = boss.post("/hands/hand-a/keys", {"scopes": ["work"], "bound_to": bound_to})
    error = error_of(answer, 400, "validation_error")
    assert "bound_to" in error["fields"]
    assert not HandKey.objects.filter(bound_lease__isnull=False).exists()


def test_a_lease_that_does_not_exist_is_not_found(boss: Api) -> None:
    answer = boss.post(
        "/hands/boss/keys", {"scopes": ["work"], "bound_to": {"resource": "nothing"}}
    )
    error_of(answer, 404, "not_found")


def test_every_form_of_the_rule_agrees_on_bound_keys(owner, frozen_clock: datetime) -> None:  # noqa: ANN001
    """The Python, SQL and ORM forms of a key's usability (hands/keys.py) on bound keys at the
    boundaries of their tenure: alive, at its deadline, just past it, released, a later
    tenure of the same lease. The deadlines are the engine's own (the clock moves, not rows)."""
    ttls = {
        "alive": 100,
        "at deadline": 10,
        "past deadline": 9.999,
        "released": 100,
        "later tenure": 100,
    }
    made: dict[str, HandKey] = {}
    for name, ttl in ttls.items():
        lease = lease_acquire(
            workspace_id=owner.workspace_id,
            resource=f"r/{name}",
            holder=owner.name,
            process_id="p",
            ttl_s=ttl,
        )
        made[name] = hand_services.key_issue(
            hand=owner, scopes=["work"], actor="t", bound_to=(lease.resource, lease.fence)
        ).key
    for name in ("released", "later tenure"):
        lease_release(
            workspace_id=owner.workspace_id, resource=f"r/{name}", holder=owner.name, fence=1
        )
    lease_acquire(
        workspace_id=owner.workspace_id,
        resource="r/later tenure",
        holder=owner.name,
        process_id="p",
        ttl_s=100,
    )
    unbound = hand_services.key_issue(hand=owner, scopes=["work"], actor="t").key
    clock.advance(10)
    expected = {
        "alive": True,
        "at deadline": True,
        "past deadline": False,
        "released": False,
        "later tenure": False,
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT k.id FROM {HandKey._meta.db_table} k WHERE {keys.usable_sql('k', now_sql())}",
            [],  # as the engine runs it: with parameters, so that `%%` is read as `%`
        )
        by_sql = {int(i) for (i,) in cursor.fetchall()}
    by_orm = set(
        HandKey.objects.filter(keys.usable_q(now_expression())).values_list("id", flat=True)
    )
    now = clock.db_now()
    for name, key in {**made, "not bound": unbound}.items():
        fresh = HandKey.objects.select_related("bound_lease").get(pk=key.pk)
        by_python = keys.key_refusal_of(fresh, now) is None
        want = expected.get(name, True)
        assert (by_python, key.pk in by_sql, key.pk in by_orm) == (want,) * 3, name


def test_a_bound_keys_children_live_by_its_tenure(api_a: Api, boss: Api, owner) -> None:  # noqa: ANN001
    """A key never outlives its issuer: one minted by a bound key is bound to the same tenure,
    and cannot be bound to another."""
    lease = held(api_a)
    held(api_a, "other")
    sibling = bound_key(boss, "hand-a", "src/auth/")
    # A bound key with the `hands` scope, so that it can mint.
    minted = boss.post(
        "/hands/hand-a/keys",
        {"scopes": ["work", "leases", "hands"], "bound_to": {"resource": "src/auth/"}},
    ).json()
    child = Api(minted["key"], owner).post("/hands/hand-a/keys", {"scopes": ["work", "leases"]})
    assert child.status_code == 201, child.content
    assert child.json()["bound_to"] == {"resource": "src/auth/", "fence": lease["fence"]}
    elsewhere = Api(minted["key"], owner).post(
        "/hands/hand-a/keys", {"scopes": ["work"], "bound_to": {"resource": "other"}}
    )
    assert error_of(elsewhere, 400, "validation_error")["fields"]["bound_to"]
    assert_usable(child.json()["key"], owner)
    api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    for key in (sibling["key"], minted["key"], child.json()["key"]):
        assert_refused(key, owner)


def test_the_revoking_job_records_what_the_key_check_already_refuses(api_a: Api, boss: Api) -> None:
    from ops import jobs as ops_jobs

    lease = held(api_a)
    minted = bound_key(boss, "hand-a", "src/auth/")
    assert ops_jobs.keys_revoke_due().processed == 0  # alive: nothing to record
    api_a.post("/leases/release", {"resource": "src/auth/", "fence": lease["fence"]})
    assert ops_jobs.keys_revoke_due().bound == 1
    key = HandKey.objects.get(prefix=minted["prefix"])
    assert key.revoked_at is not None and key.revoke_reason == "its bound tenure ended"
    assert ops_jobs.keys_revoke_due().processed == 0  # once


@pytest.mark.parametrize("with_fence", [False, True], ids=["current", "its_fence"])
def test_a_key_cannot_be_bound_to_its_hands_own_shared_tenure(
    api_a: Api, api_b: Api, boss: Api, with_fence: bool
) -> None:
    """Issue 33, item 9d: binding a key to a tenure the hand holds shared is a 400 that says so
    (it was refused as "does not hold the lease", which the hand does), and mints nothing; the
    same lease taken exclusive binds."""
    shared = {"resource": "docs/", "ttl_s": 30, "process_id": "p:1", "mode": "shared"}
    mine = api_a.post("/leases/acquire", shared)
    assert mine.status_code == 201, mine.content
    assert api_b.post("/leases/acquire", {**shared, "process_id": "q:1"}).status_code == 201
    keys_before = HandKey.objects.count()
    bound_to: dict[str, Any] = {"resource": "docs/"}
    if with_fence:
        bound_to["fence"] = mine.json()["fence"]
    answer = boss.post("/hands/hand-a/keys", {"scopes": ["work"], "bound_to": bound_to})
    error = error_of(answer, 400, "validation_error")
    assert error["message"] == (
        f"hand 'hand-a' holds the lease on 'docs/' shared (fence {mine.json()['fence']}): a key "
        "can be bound only to an exclusive tenure (a resource lease taken exclusive, or an "
        "attempt's slot lease); release the shared tenure and acquire the lease exclusive to "
        "bind a key to it"
    )
    assert error["fields"] == {
        "bound_to": ["An exclusive tenure of this hand; this one is shared."]
    }
    assert HandKey.objects.count() == keys_before
    # Released, and taken exclusive once hand-b's share ends too: then it binds.
    for api, process in ((api_a, "p:1"), (api_b, "q:1")):
        tenure = api.get("/leases", {"prefix": "docs/"}).json()
        fence = next(t["fence"] for t in tenure if t["process_id"] == process)
        released = api.post("/leases/release", {"resource": "docs/", "fence": fence})
        assert released.status_code == 200, released.content
    exclusive = held(api_a, "docs/")
    minted = bound_key(boss, "hand-a", "docs/")
    assert minted["bound_to"] == {"resource": "docs/", "fence": exclusive["fence"]}
