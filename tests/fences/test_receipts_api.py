"""`POST /api/v1/fences/receipts` and `GET /api/v1/fences/receipts`: a push's commits judged
when they land (each fence current and the pusher's, no path under another hand's tenure or the
pusher's own lapsed one), one signed receipt per commit, final once accepted; CI reads them back
with the signature checked. Bad input is a 400 naming the field, never a 500."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import clock, receipts
from leases.models import FenceReceipt
from tests.support.api import Api, error_of, mint

pytestmark = pytest.mark.django_db

REPO = "github.com/acme/app"
SHA_1 = "1" * 40
SHA_2 = "2" * 40
SHA_3 = "3" * 40


def acquire(api: Api, resource: str, *, ttl_s: float = 60, mode: str = "exclusive") -> int:
    answer = api.post(
        "/leases/acquire",
        {"resource": resource, "ttl_s": ttl_s, "process_id": f"{api.hand.name}:1", "mode": mode},
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["fence"]


def release(api: Api, resource: str, fence: int) -> None:
    answer = api.post("/leases/release", {"resource": resource, "fence": fence})
    assert answer.status_code == 200, answer.content


def commit(sha: str, fences: list[str] | None = None, paths: list[str] | None = None) -> dict:
    return {"sha": sha, "fences": fences or [], "paths": paths or []}


def push(api: Api, *commits: dict[str, Any], repository: str = REPO) -> dict[str, Any]:
    answer = api.post(
        "/fences/receipts",
        {"repository": repository, "process_id": "host:42:1", "commits": list(commits)},
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["accepted"] == all(r["accepted"] for r in body["receipts"])
    return body


def lookup(api: Api, *shas: str, repository: str = REPO) -> list[dict[str, Any]]:
    answer = api.get("/fences/receipts", {"repository": repository, "sha": list(shas)})
    assert answer.status_code == 200, answer.content
    return answer.json()["receipts"]


def messages(receipt: dict[str, Any]) -> list[str]:
    return [r["message"] for r in receipt["refusals"]]


def test_it_accepts_a_commit_whose_fences_are_current_and_the_pushers(
    api_a: Api, owner: Hand
) -> None:
    fence = acquire(api_a, "src/app.py")
    body = push(api_a, commit(SHA_1, [f"src/app.py@{fence} hand-a"], ["src/app.py", "README"]))
    [receipt] = body["receipts"]
    assert body["accepted"] and receipt["accepted"] and not receipt["duplicate"]
    assert (receipt["sha"], receipt["repository"], receipt["hand"]) == (SHA_1, REPO, owner.name)
    assert receipt["process_id"] == "host:42:1"
    assert receipt["key_prefix"] == api_a.key.split("_")[1]
    [verdict] = receipt["fences"]
    assert (verdict["fence"], verdict["named_holder"], verdict["status"]) == (
        f"src/app.py@{fence}",
        "hand-a",
        "current",
    )
    assert (verdict["holder"], verdict["process_id"]) == ("hand-a", "hand-a:1")
    assert receipt["refusals"] == []
    row = FenceReceipt.objects.get()
    assert (row.sha, row.accepted, row.hand) == (SHA_1, True, "hand-a")
    # An older trailer, which names no holder, reads as the pusher's.
    assert push(api_a, commit(SHA_2, [f"src/app.py@{fence}"], ["src/app.py"]))["accepted"]


def test_it_refuses_a_fence_that_is_stale_when_pushed_saying_since_when(
    api_a: Api, api_b: Api, frozen_clock: datetime
) -> None:
    old = acquire(api_a, "src/app.py", ttl_s=10)
    clock.advance(11)  # A's tenure (grace 0) is lost at its deadline
    new = acquire(api_b, "src/app.py")
    [receipt] = push(api_a, commit(SHA_1, [f"src/app.py@{old} hand-a"]))["receipts"]
    assert not receipt["accepted"]
    [verdict] = receipt["fences"]
    assert (verdict["status"], verdict["ended"], verdict["current_fence"]) == (
        "superseded",
        "lost",
        new,
    )
    assert datetime.fromisoformat(verdict["when"]) == frozen_clock + timedelta(seconds=10)
    assert datetime.fromisoformat(receipt["at"]) == frozen_clock + timedelta(seconds=11)
    assert messages(receipt) == [
        f"carries src/app.py@{old}, which is stale: the lease lost at {verdict['when']}; the "
        f"current fence is {new}"
    ]
    [unknown] = push(api_a, commit(SHA_2, ["nowhere@3"]))["receipts"]
    assert unknown["fences"][0]["status"] == "unknown"
    assert messages(unknown) == [
        "carries nowhere@3: no such fence was ever granted in this workspace"
    ]


@pytest.mark.parametrize(
    ("trailer", "sentence"),
    [
        # B's fence, named as B's, pushed by A.
        ("src/app.py@{fence} hand-b", "but hand 'hand-a' pushed it"),
        # B's fence in the older form: it reads as the pusher's, and it is not.
        ("src/app.py@{fence}", "but hand 'hand-a' pushed it"),
        # B's fence, named as A's.
        ("src/app.py@{fence} hand-a", "naming hand 'hand-a', but that tenure is hand 'hand-b''s"),
    ],
)
def test_a_commit_cannot_borrow_another_hands_fence(
    api_a: Api, api_b: Api, trailer: str, sentence: str
) -> None:
    fence = acquire(api_b, "src/app.py")
    [receipt] = push(api_a, commit(SHA_1, [trailer.format(fence=fence)]))["receipts"]
    assert not receipt["accepted"]
    assert receipt["fences"][0]["status"] == "not_holder"
    assert receipt["fences"][0]["holder"] == "hand-b"
    [message] = messages(receipt)
    assert sentence in message
    # B pushing the same trailer, named as its own, is accepted.
    assert push(api_b, commit(SHA_2, [f"src/app.py@{fence} hand-b"]))["accepted"]


def test_it_refuses_a_path_another_hand_holds_and_passes_one_held_shared_beside_the_pusher(
    api_a: Api, api_b: Api
) -> None:
    fence = acquire(api_b, "src/")
    [receipt] = push(api_a, commit(SHA_1, [], ["src/app.py", "docs/a.md"]))["receipts"]
    assert not receipt["accepted"]
    assert receipt["refusals"] == [
        {
            "kind": "held",
            "path": "src/app.py",
            "fence": f"src/@{fence}",
            "holder": "hand-b",
            "message": "touches src/app.py, under src/ held by hand 'hand-b' (fence "
            f"{fence}, live), and hand 'hand-a' holds no lease covering it",
        }
    ]
    acquire(api_b, "lib/", mode="shared")
    [alone] = push(api_a, commit(SHA_2, [], ["lib/x.py"]))["receipts"]
    assert "held by hand 'hand-b'" in messages(alone)[0]
    acquire(api_a, "lib/", mode="shared")
    assert push(api_a, commit(SHA_3, [], ["lib/x.py"]))["accepted"]


@pytest.mark.parametrize("how", ["lost", "broken"])
def test_it_refuses_a_path_under_the_pushers_own_lapsed_tenure_until_it_takes_the_lease_again(
    api_a: Api, api_b: Api, boss: Api, frozen_clock: datetime, how: str
) -> None:
    old = acquire(api_a, "src/app.py", ttl_s=10)
    if how == "lost":
        clock.advance(11)
        # Even before anyone took it over, it is refused...
        [first] = push(api_a, commit(SHA_1, [], ["src/app.py"]))["receipts"]
        assert first["refusals"][0]["kind"] == "lapsed"
    else:
        assert (
            boss.post("/leases/break", {"resource": "src/app.py", "reason": "x"}).status_code == 200
        )
    # ...and after another hand held it and released it.
    fence = acquire(api_b, "src/app.py")
    release(api_b, "src/app.py", fence)
    [receipt] = push(api_a, commit(SHA_2, [], ["src/app.py"]))["receipts"]
    assert not receipt["accepted"]
    [refusal] = receipt["refusals"]
    assert (refusal["kind"], refusal["fence"], refusal["holder"]) == (
        "lapsed",
        f"src/app.py@{old}",
        "hand-a",
    )
    assert f"whose lease hand 'hand-a' held at fence {old} and {how}" in refusal["message"]
    # B, who released cleanly, is not lapsed; A is not once it takes the lease again.
    assert push(api_b, commit(SHA_3, [], ["src/app.py"]))["accepted"]
    acquire(api_a, "src/app.py")
    assert push(api_a, commit(SHA_2, [], ["src/app.py"]))["accepted"]


def test_a_re_push_answers_with_the_first_receipt_unchanged(
    api_a: Api, frozen_clock: datetime
) -> None:
    fence = acquire(api_a, "src/app.py", ttl_s=10)
    [first] = push(api_a, commit(SHA_1, [f"src/app.py@{fence} hand-a"], ["src/app.py"]))["receipts"]
    release(api_a, "src/app.py", fence)
    clock.advance(60)
    [again] = push(api_a, commit(SHA_1, [f"src/app.py@{fence} hand-a"], ["src/app.py"]))["receipts"]
    assert again["duplicate"] and again["accepted"]
    assert {k: v for k, v in again.items() if k != "duplicate"} == {
        k: v for k, v in first.items() if k != "duplicate"
    }
    assert FenceReceipt.objects.count() == 1


def test_a_refused_commit_is_judged_again_by_its_next_push(api_a: Api, api_b: Api) -> None:
    fence = acquire(api_b, "src/app.py")
    [refused] = push(api_a, commit(SHA_1, [], ["src/app.py"]))["receipts"]
    assert not refused["accepted"]
    assert not lookup(api_a, SHA_1)[0]["accepted"]
    release(api_b, "src/app.py", fence)
    [accepted] = push(api_a, commit(SHA_1, [], ["src/app.py"]))["receipts"]
    assert accepted["accepted"] and not accepted["duplicate"]
    assert FenceReceipt.objects.get().accepted


def test_ci_reads_the_receipts_back_with_their_signatures_checked(
    api_a: Api, workspace: Workspace, api_outsider: Api
) -> None:
    fence = acquire(api_a, "src/app.py")
    push(api_a, commit(SHA_1, [f"src/app.py@{fence} hand-a"], ["src/app.py"]), commit(SHA_2))
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    ci_api = Api(mint(ci, ["verify"]), ci)
    found = lookup(ci_api, SHA_3, SHA_2, SHA_1)
    assert [(r["sha"], r["accepted"], r["signature_valid"]) for r in found] == [
        (SHA_2, True, True),
        (SHA_1, True, True),
    ]
    # Another repository's, or another workspace's, are not these.
    assert lookup(ci_api, SHA_1, repository="github.com/acme/other") == []
    assert lookup(api_outsider, SHA_1) == []
    # A row altered without the key does not verify.
    FenceReceipt.objects.filter(sha=SHA_1).update(hand="hand-b")
    assert lookup(ci_api, SHA_1)[0]["signature_valid"] is False


def test_the_signature_is_an_hmac_of_the_claims_keyed_from_secret_key(api_a: Api) -> None:
    push(api_a, commit(SHA_1, [], ["a"]))
    row = FenceReceipt.objects.get()
    claims = receipts.claims_of(row)
    assert claims["sha"] == SHA_1 and claims["workspace_id"] == api_a.hand.workspace_id
    assert row.signature == receipts.sign(claims) and len(row.signature) == 64
    with override_settings(SECRET_KEY="rotated", SECRET_KEY_FALLBACKS=["x" * 50]):
        assert not receipts.signature_valid(claims, row.signature)
    with override_settings(SECRET_KEY="rotated-again", SECRET_KEY_FALLBACKS=[_secret()]):
        assert receipts.signature_valid(claims, row.signature)


def _secret() -> str:
    from django.conf import settings

    return settings.SECRET_KEY


def test_the_pushers_key_needs_leases_and_ci_reads_with_verify(
    api_a: Api, owner: Hand, workspace: Workspace
) -> None:
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    refused = Api(mint(ci, ["verify"]), ci).post(
        "/fences/receipts", {"repository": REPO, "commits": [commit(SHA_1)]}
    )
    assert error_of(refused, 403, "scope_denied")["required_scope"] == "leases"
    work = Api(mint(owner, ["work"]), owner)
    refused = work.get("/fences/receipts", {"repository": REPO, "sha": SHA_1})
    assert error_of(refused, 403, "scope_denied")
    assert not FenceReceipt.objects.exists()


def test_one_push_costs_the_same_statements_for_one_commit_as_for_many(
    api_a: Api, django_assert_num_queries: Any
) -> None:
    """The paths of every commit are judged together (one read of the held tenures, one of the
    pusher's events) and the receipts written in one statement."""
    push(api_a, commit("f" * 40))  # the key's first use is stamped; not counted below
    one = [commit("a" * 40, [], ["src/a.py", "src/b.py"])]
    many = [commit(f"{i:040x}", [], [f"src/{i}.py", "docs/x.md"]) for i in range(1, 41)]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as first:
        push(api_a, *one)
    with CaptureQueriesContext(connection) as second:
        push(api_a, *many)
    assert len(first.captured_queries) == len(second.captured_queries)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (["x"], "body"),
        ({"commits": [commit(SHA_1)]}, "repository"),
        ({"repository": "", "commits": [commit(SHA_1)]}, "repository"),
        ({"repository": 7, "commits": [commit(SHA_1)]}, "repository"),
        ({"repository": "a\u0000b", "commits": [commit(SHA_1)]}, "repository"),
        ({"repository": "a\ud800b", "commits": [commit(SHA_1)]}, "repository"),
        ({"repository": "r" * 513, "commits": [commit(SHA_1)]}, "repository"),
        ({"repository": REPO, "process_id": "p" * 201, "commits": [commit(SHA_1)]}, "process_id"),
        ({"repository": REPO}, "commits"),
        ({"repository": REPO, "commits": []}, "commits"),
        ({"repository": REPO, "commits": {"sha": SHA_1}}, "commits"),
        ({"repository": REPO, "commits": ["x"]}, "commits[0]"),
        ({"repository": REPO, "commits": [{"sha": "ABC"}]}, "commits[0].sha"),
        (
            {"repository": REPO, "commits": [{"sha": SHA_1.upper().replace("1", "A")}]},
            "commits[0].sha",
        ),
        ({"repository": REPO, "commits": [{"sha": "1" * 41}]}, "commits[0].sha"),
        ({"repository": REPO, "commits": [{"sha": 1}]}, "commits[0].sha"),
        ({"repository": REPO, "commits": [commit(SHA_1), commit(SHA_1)]}, "commits[1].sha"),
        ({"repository": REPO, "commits": [{"sha": SHA_1, "fences": "a@1"}]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["a@x"])]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["/a@1"])]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["run/1/slot/0@1"])]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["a@1 "])]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["a@1 b@c"])]}, "commits[0].fences"),
        ({"repository": REPO, "commits": [commit(SHA_1, ["a@1 b%00c"])]}, "commits[0].fences"),
        (
            {"repository": REPO, "commits": [commit(SHA_1, [f"a@1 {'h' * 201}"])]},
            "commits[0].fences",
        ),
        ({"repository": REPO, "commits": [{"sha": SHA_1, "paths": "a"}]}, "commits[0].paths"),
        ({"repository": REPO, "commits": [commit(SHA_1, [], ["/etc/passwd"])]}, "commits[0].paths"),
        ({"repository": REPO, "commits": [commit(SHA_1, [], ["a/\u0000"])]}, "commits[0].paths"),
        ({"repository": REPO, "commits": [commit(SHA_1, [], [""])]}, "commits[0].paths"),
        ({"repository": REPO, "commits": [commit(SHA_1, [], [3])]}, "commits[0].paths"),
    ],
)
def test_bad_input_is_a_validation_error_naming_the_field_and_writes_nothing(
    api_a: Api, body: Any, field: str
) -> None:
    error = error_of(api_a.post("/fences/receipts", body), 400, "validation_error")
    assert field in error["fields"], error
    assert not FenceReceipt.objects.exists()


def test_a_push_over_its_limits_is_refused_with_them(api_a: Api) -> None:
    commits = [commit(f"{i:040x}") for i in range(receipts.MAX_RECEIPT_COMMITS + 1)]
    error = error_of(
        api_a.post("/fences/receipts", {"repository": REPO, "commits": commits}),
        400,
        "validation_error",
    )
    assert f"at most {receipts.MAX_RECEIPT_COMMITS}" in error["message"]
    half = receipts.MAX_RECEIPT_NAMES // 2
    names = [commit(SHA_1, [], [f"f{i}" for i in range(half)]), commit(SHA_2, [], ["x"] * half)]
    # At the limit it is judged; one more name over it is refused.
    assert push(api_a, *names)["accepted"]
    names.append(commit(SHA_3, [], ["y"]))
    error = error_of(
        api_a.post("/fences/receipts", {"repository": REPO, "commits": names}),
        400,
        "validation_error",
    )
    assert f"more than {receipts.MAX_RECEIPT_NAMES}" in error["message"]
    assert FenceReceipt.objects.count() == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"sha": SHA_1}, "repository"),
        ({"repository": REPO}, "sha"),
        ({"repository": REPO, "sha": "xyz"}, "sha"),
        ({"repository": REPO, "sha": [f"{i:040x}" for i in range(101)]}, "sha"),
    ],
)
def test_a_bad_lookup_is_a_validation_error(api_a: Api, params: dict, field: str) -> None:
    assert (
        field in error_of(api_a.get("/fences/receipts", params), 400, "validation_error")["fields"]
    )
