"""`POST /api/v1/fences/verify`: each fence a commit carried, current, superseded (since when,
how) or unknown, by `lease_check`'s rule; the `verify` scope; bad input; the record."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from hands import services as hand_services
from hands.models import Hand
from leases import clock
from leases import services as lease_services
from leases.models import FenceVerification
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db


def acquire(api: Api, resource: str, *, ttl_s: float = 60, mode: str = "exclusive") -> int:
    answer = api.post(
        "/leases/acquire", {"resource": resource, "ttl_s": ttl_s, "process_id": "p", "mode": mode}
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["fence"]


def verify(api: Api, *fences: str) -> list[dict[str, Any]]:
    answer = api.post("/fences/verify", {"fences": list(fences)})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["all_current"] == all(f["status"] == "current" for f in body["fences"])
    return body["fences"]


def test_it_answers_current_for_a_held_tenure(api_a: Api, owner: Hand) -> None:
    fence = acquire(api_a, "src/auth/")
    [answer] = verify(api_a, f"src/auth/@{fence}")
    assert answer["status"] == "current"
    assert answer["current_fence"] == fence
    assert answer["holder"] == owner.name
    assert answer["when"] is None
    # `src/auth` is the same node: the fence is the node's, whichever spelling carried it.
    assert verify(api_a, f"src/auth@{fence}")[0]["status"] == "current"


def test_it_answers_superseded_with_when_after_another_hand_took_it(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    old = acquire(api_a, "src/auth/", ttl_s=10)
    clock.advance(11)  # A's tenure (grace 0) is lost at its deadline
    new = acquire(api_b, "src/auth/")
    [stale, current] = verify(api_a, f"src/auth/@{old}", f"src/auth/@{new}")
    assert stale["status"] == "superseded"
    assert stale["current_fence"] == new
    # It stopped being current when it was lost (its deadline), before B's grant.
    assert stale["ended"] == "lost"
    assert datetime.fromisoformat(stale["when"]) == frozen_clock + timedelta(seconds=10)
    assert datetime.fromisoformat(stale["when"]) <= datetime.fromisoformat(
        current_acquired_at(api_b, "src/auth/")
    )
    assert current["status"] == "current"


def current_acquired_at(api: Api, resource: str) -> str:
    [lease] = api.get("/leases", {"prefix": resource}).json()
    return lease["acquired_at"]


def test_it_answers_superseded_broken_with_the_breaks_time(
    api_a: Api, boss: Api, workspace: Any
) -> None:
    fence = acquire(api_a, "src/auth/")
    broken = boss.post("/leases/break", {"resource": "src/auth/", "reason": "paused past grace"})
    assert broken.status_code == 200, broken.content
    [answer] = verify(boss, f"src/auth/@{fence}")
    assert answer["status"] == "superseded"
    assert answer["ended"] == "broken"
    assert answer["current_fence"] == fence + 1
    assert answer["when"] is not None
    # The fence the break counted out was never any tenure's.
    assert verify(boss, f"src/auth/@{fence + 1}")[0]["status"] == "unknown"


def test_it_answers_superseded_released_while_nobody_took_it_since(api_a: Api) -> None:
    fence = acquire(api_a, "docs/")
    api_a.post("/leases/release", {"resource": "docs/", "fence": fence})
    [answer] = verify(api_a, f"docs/@{fence}")
    assert (answer["status"], answer["ended"], answer["current_fence"]) == (
        "superseded",
        "released",
        fence,
    )
    assert answer["when"] is not None


def test_a_shared_tenure_stays_current_beside_later_shared_grants(api_a: Api, api_b: Api) -> None:
    first = acquire(api_a, "lib/", mode="shared")
    second = acquire(api_b, "lib/", mode="shared")
    assert second > first
    assert [a["status"] for a in verify(api_a, f"lib/@{first}", f"lib/@{second}")] == [
        "current",
        "current",
    ]


def test_it_answers_unknown_for_no_node_a_fence_never_granted_and_another_workspace(
    api_a: Api, api_outsider: Api
) -> None:
    fence = acquire(api_a, "src/auth/")
    answers = verify(
        api_outsider, f"src/auth/@{fence}", "nowhere/@1", f"src/auth/@{fence + 5}", "src/auth/@0"
    )
    assert [a["status"] for a in answers] == ["unknown"] * 4
    assert answers[0]["current_fence"] is None  # the other workspace's lease is not described
    assert verify(api_a, f"src/auth/@{fence + 5}")[0]["status"] == "unknown"


def test_the_verify_scope_will_do_and_a_work_key_is_refused(
    api_a: Api, owner: Hand, workspace: Any
) -> None:
    fence = acquire(api_a, "src/")
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    assert verify(Api(mint(ci, ["verify"]), ci), f"src/@{fence}")[0]["status"] == "current"
    refused = Api(mint(owner, ["work"]), owner).post("/fences/verify", {"fences": ["src/@1"]})
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "verify"


def test_a_supervisor_key_mints_a_verify_key_for_ci(boss: Api) -> None:
    assert boss.post("/hands", {"name": "ci"}).status_code in (200, 201)
    minted = boss.post("/hands/ci/keys", {"scopes": ["verify"]})
    assert minted.status_code == 201, minted.content
    ci = Api(minted.json()["key"])
    assert verify(ci, "x@1")[0]["status"] == "unknown"
    # A key without `verify` cannot mint one.
    hand_key = boss.post("/hands/ci/keys", {"scopes": ["hands"]}).json()["key"]
    refused = Api(hand_key).post("/hands/ci/keys", {"scopes": ["verify"]})
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "verify"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"fences": []},
        {"fences": "src/@1"},
        {"fences": [7]},
        {"fences": ["src/"]},
        {"fences": ["src/@"]},
        {"fences": ["src/@-1"]},
        {"fences": ["src/@1.5"]},
        {"fences": ["src/@99999999999999999999"]},
        {"fences": ["/src@1"]},
        {"fences": ["src/\u0000@1"]},
        {"fences": ["run/7/0@1"]},
        {"fences": ["a@1"] * 501},
        ["src/@1"],
    ],
)
def test_bad_input_is_a_validation_error_and_writes_no_record(api_a: Api, body: Any) -> None:
    error = error_of(api_a.post("/fences/verify", body), 400, "validation_error")
    assert "fences" in error["fields"]
    assert not FenceVerification.objects.exists()


def test_each_answer_is_recorded(api_a: Api, owner: Hand) -> None:
    fence = acquire(api_a, "src/auth/")
    verify(api_a, f"src/auth/@{fence}", "gone/@3", f"src/auth/@{fence}")
    rows = list(FenceVerification.objects.order_by("id").values())
    assert [(r["resource"], r["fence"], r["status"]) for r in rows] == [
        ("src/auth/", fence, "current"),
        ("gone/", 3, "unknown"),
    ]
    assert {r["hand"] for r in rows} == {owner.name}
    assert {r["key_prefix"] for r in rows} == {api_a.key.split("_")[1]}


def test_lease_check_still_answers_by_the_same_rule(api_a: Api, api_b: Api) -> None:
    fence = acquire(api_a, "x/")
    assert (
        lease_services.lease_check(
            workspace_id=api_a.hand.workspace_id, resource="x/", fence=fence
        ).fence
        == fence
    )
    released = api_a.post("/leases/release", {"resource": "x/", "fence": fence})
    assert released.status_code == 200
    check = api_a.post("/leases/check", {"resource": "x/", "fence": fence})
    assert error_of(check, 409, "lease_lost")
    acquire(api_b, "x/")
    check = api_a.post("/leases/check", {"resource": "x/", "fence": fence})
    assert error_of(check, 409, "stale_fence")["current_fence"] == fence + 1


def test_covering_lists_the_leases_on_a_name_and_the_directories_above_it(
    api_a: Api, api_b: Api
) -> None:
    acquire(api_a, "src/auth/")
    acquire(api_b, "src/billing/")
    acquire(api_b, "src/authx/")
    listed = api_a.get("/leases", {"covering": "src/auth/login.py"}).json()
    assert [lease["resource"] for lease in listed] == ["src/auth/"]
    bad = api_a.get("/leases", {"covering": "/src"})
    assert "covering" in error_of(bad, 400, "validation_error")["fields"]
