"""How gctl says a pool's members, a waiter and an attestation, without a server: a member free,
held, late and lost; a waiter of another lane (its hand not named); an attestation of a hand, of
a GitHub integration, of a lane, with a note."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from groundcontrol_client.core.attestations import describe_attestation
from groundcontrol_client.core.grades import Attestation
from groundcontrol_client.core.pools import (
    PoolRecord,
    Waiter,
    describe_pool_members,
    describe_waiter,
)

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
URL = "https://github.com/acme/app/pull/9"


def _member(member: str, state: str, **lease: object) -> dict[str, object]:
    return {"member": member, "resource": f"pool/ports/{member}", "state": state, **lease}


def test_a_pool_says_each_member_as_its_lease_stands() -> None:
    pool = PoolRecord.from_wire(
        {
            "name": "ports",
            "size": 4,
            "available": 2,
            "created_at": (NOW - timedelta(minutes=3)).isoformat(),
            "created_by": "boss",
            "members": [
                _member("8001", "live", holder="a", process_id="host:1", fence=2, expires_in_s=40),
                _member("8002", "late", holder="b", fence=5, expires_in_s=-3),
                _member("8003", "lost", holder="c", fence=1, expires_in_s=-30),
                _member("8004", "free", fence=7),
            ],
        }
    )
    assert describe_pool_members(pool, NOW).splitlines() == [
        "pool ports: 4 members, 2 free now (8001, 8002, 8003, 8004); made by hand boss "
        "3 minutes ago (2030-01-01 11:57:00 UTC)",
        "  8001: held by hand a (fence 2), renewing; its current window ends in 40 s "
        "(process host:1)",
        "  8002: held by hand b (fence 5), late: its window ended 3 s ago; it is lost if it does "
        "not renew within its grace",
        "  8003: lost by hand c (fence 1): the next take gets it",
        "  8004: free (fence 7)",
    ]


def test_a_waiter_says_its_place_and_since_when() -> None:
    queued = (NOW - timedelta(seconds=40)).isoformat()
    first = Waiter.from_wire(
        {"resource": "src/", "holder": "b", "mode": "shared", "position": 1, "queued_at": queued}
    )
    assert describe_waiter(first, NOW) == (
        "src/: hand b is next in line (shared), queued 40 s ago (2030-01-01 11:59:20 UTC)"
    )
    # A lane-limited key is not told another lane's hands: the holder reads null.
    hidden = Waiter.from_wire({"resource": "src/", "holder": None, "position": 3})
    assert describe_waiter(hidden, NOW) == (
        "src/: a hand of another lane is number 3 in line (exclusive)"
    )


def test_an_attestation_says_who_saw_what_and_what_it_backs() -> None:
    observed = NOW.isoformat()
    by_ci = Attestation.from_wire(
        {
            "id": 1,
            "url": URL,
            "result": "pass",
            "kind": "pull_request",
            "hand": "ci",
            "key_prefix": "3f9a11223344",
            "observed_at": observed,
            "backs": 41,
        }
    )
    assert describe_attestation(by_ci) == (
        f"2030-01-01 12:00:00 UTC: hand 'ci' (key gc_3f9a11223344) attested pass for {URL} "
        "(pull_request), backing attempt 41; the workspace's evidence"
    )
    by_github = Attestation.from_wire(
        {
            "id": 2,
            "url": URL,
            "result": "fail",
            "hand": "github-integration-4",
            "key_prefix": "",
            "lane": "docs",
            "note": "lint",
            "observed_at": observed,
        }
    )
    assert describe_attestation(by_github) == (
        f"2030-01-01 12:00:00 UTC: GitHub integration 4 attested fail for {URL}; lane docs's "
        "evidence: lint"
    )
