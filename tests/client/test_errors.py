"""The one sentence every surface says for a refusal (gctl, the MCP server, an exception's str):
what happened and what to do, from the refusal's fields."""

from __future__ import annotations

from typing import Any

import pytest
from groundcontrol_client import (
    ConnectionFailed,
    EvidenceMissing,
    GroundControlError,
    KeyRevoked,
    LeaseHeld,
    LeaseLost,
    NoOpenSlot,
    ProcessMismatch,
    RateLimited,
    RunClosed,
    SlotTaken,
    ValidationFailed,
)
from groundcontrol_client.core.errors import describe, error_from_response

WAIT = "wait, pick other work, or escalate."


def held(**fields: Any) -> dict[str, Any]:
    return {"holder": "a", "fence": 2, "resource": "src/auth/", **fields}


@pytest.mark.parametrize(
    ("error", "sentence"),
    [
        (
            LeaseHeld("held", fields=held(state="live", expires_in_s=58.4)),
            f"src/auth/ is held by hand a (fence 2), renewing; its current window ends in 58 s: "
            f"{WAIT}",
        ),
        (
            LeaseHeld("held", fields=held(state="live", expires_in_s=0.2)),
            f"src/auth/ is held by hand a (fence 2), renewing; its current window ends in under "
            f"1 s: {WAIT}",
        ),
        (
            # A late holder: its window has ended, and it is lost unless it renews in time.
            SlotTaken(
                "held",
                fields=held(
                    resource="run/12/slot/0", state="late", expires_in_s=-3.2, lost_in_s=11.8
                ),
            ),
            "slot 0 of run 12 is held by hand a (fence 2), late: its window ended 3 s ago; it "
            f"is lost in 12 s unless it renews: {WAIT}",
        ),
        (
            SlotTaken("held", fields=held(resource="run/12/slot/1", state="stalled")),
            "slot 1 of run 12 is held by hand a (fence 2), stalled: its window ended; it is lost "
            f"if it does not renew within its grace: {WAIT}",
        ),
        (
            NoOpenSlot(
                "run 12 has no open slot",
                fields={"slots": 3, "held": 2, "done": 1, "next_expires_in_s": 40.0},
            ),
            "run 12 has no open slot (3 slots: 2 held, 1 done; the soonest holder's current "
            f"window ends in 40 s): {WAIT}",
        ),
        (
            # What a server without the counts says (only the total).
            NoOpenSlot("run 12 has no open slot", fields={"slots": 1}),
            f"run 12 has no open slot (1 slot): {WAIT}",
        ),
        (
            # What the server says now: its counts, which the sentence says from the fields.
            NoOpenSlot(
                "run 12 has no open slot: 1 held (the soonest holder's current renewal window "
                "ends in 9 s; ...); wait, or pick other work",
                fields={"slots": 1, "held": 1, "done": 0, "next_expires_in_s": 9.2},
            ),
            "run 12 has no open slot (1 slot: 1 held; the soonest holder's current window ends "
            f"in 9 s): {WAIT}",
        ),
        (
            RunClosed("run 12 is done: every slot was finished", fields={"run_state": "done"}),
            "run 12 is done: every slot was finished; it takes no claims: pick other work, or "
            "escalate.",
        ),
        (
            ValidationFailed(
                "invalid input: ttl_s, wait_s",
                fields={"fields": {"wait_s": ["At most 60."], "ttl_s": ["At least 1"]}},
            ),
            "invalid input: wait_s: At most 60. ttl_s: At least 1. Fix the call and try again.",
        ),
        (
            EvidenceMissing("evidence missing", fields={"missing": ["pull_request"]}),
            "evidence missing: the brief asks for evidence of kind pull_request; finish with "
            "it, or release with a reason.",
        ),
        (
            KeyRevoked("key 3f9a is revoked"),
            "key 3f9a is revoked: this key cannot do that; escalate to your supervisor.",
        ),
        (
            RateLimited("slow down", fields={"retry_after_s": 2.5}),
            "slow down: too many calls; try again in 3 s.",
        ),
        (
            ConnectionFailed("GET me failed"),
            "GET me failed: Ground Control is unavailable; try again shortly.",
        ),
        (
            LeaseLost("attempt 41 has lost its slot lease"),
            "attempt 41 has lost its slot lease: stop working on it; your work there is no "
            "longer accepted.",
        ),
    ],
)
def test_it_says_what_happened_and_what_to_do(error: GroundControlError, sentence: str) -> None:
    assert describe(error) == sentence


def test_it_is_what_a_denial_prints() -> None:
    denial = LeaseHeld("held by hand 'a'", fields=held(state="live", expires_in_s=58))
    assert str(denial) == describe(denial)
    # The server's own words stay the message; the JSON body is unchanged.
    assert denial.message == "held by hand 'a'"
    assert denial.to_dict()["message"] == "held by hand 'a'"


def test_it_keeps_a_lost_tenures_str_to_the_servers_words() -> None:
    # The runtime writes it into a release reason: "lease lost: <why>".
    lost = LeaseLost("attempt 41 has lost its slot lease")
    assert str(lost) == "attempt 41 has lost its slot lease"


def test_it_names_what_was_asked_for_when_the_refusal_does_not() -> None:
    denial = LeaseHeld("held", fields={"holder": "b", "fence": 1, "expires_in_s": 9})
    assert describe(denial, subject="migrations").startswith("migrations is held by hand b")


def test_it_says_who_holds_the_claim_on_a_process_mismatch() -> None:
    error = ProcessMismatch(
        "attempt 41 is held by process 'h:1:2', not 'h:3:4'", fields={"process_id": "h:1:2"}
    )
    assert describe(error) == (
        "attempt 41 is held by process 'h:1:2', not 'h:3:4': another process holds this claim, "
        "and only its reports renew it; report from that process, or record a report without "
        "a process identity."
    )


def test_a_denial_says_where_the_request_stands_in_line() -> None:
    error = error_from_response(
        409,
        {
            "error": {
                "code": "lease_held",
                "message": "tests is held by hand 'a' (fence 4)",
                "resource": "tests",
                "holder": "a",
                "fence": 4,
                "state": "live",
                "expires_in_s": 20,
                "requested": "tests",
                "position": 2,
                "ahead": ["a", "b"],
                "estimated_wait_s": 130,
            }
        },
    )
    assert str(error).startswith(
        "third in line for `tests` behind hands a and b, about 2 minutes: tests is held by "
        "hand a (fence 4), renewing"
    )


def test_a_request_behind_waiters_only_names_them() -> None:
    error = error_from_response(
        409,
        {
            "error": {
                "code": "lease_held",
                "message": "tests is free, but 1 waiting request came first",
                "requested": "tests",
                "position": 2,
                "ahead": ["b"],
                "estimated_wait_s": None,
            }
        },
    )
    assert (
        str(error)
        == "second in line for `tests` behind hand b: wait, pick other work, or escalate."
    )


def test_a_denial_by_a_hand_of_another_lane_says_it_is_held_without_naming_it() -> None:
    """A lane-limited key is not told the names of other lanes' hands (issue 33, item 6): the
    denial has no `holder`, and its place in line names nobody, yet it is still a tenure in the
    way, said as one."""
    error = error_from_response(
        409,
        {
            "error": {
                "code": "lease_held",
                "message": "src/shared.py is held by a hand of another lane (fence 1)",
                "resource": "src/shared.py",
                "fence": 1,
                "state": "live",
                "expires_in_s": 58,
                "requested": "src/shared.py",
                "position": 3,
                "ahead": [None, "b"],
                "estimated_wait_s": 130,
            }
        },
    )
    assert str(error) == (
        "third in line for `src/shared.py` behind a hand of another lane and hand b, about 2 "
        "minutes: src/shared.py is held by a hand of another lane (fence 1), renewing; its "
        "current window ends in 58 s; wait, pick other work, or escalate."
    )
