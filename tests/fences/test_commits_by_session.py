"""A commit made by a known session (`GC_PROCESS_ID`, or Claude Code's session id in the
environment) relies only on that session's leases: a file another session of the same hand
holds is another holder's, refused like another hand's. With no session known, a hand's leases
are the hand's, whichever process holds them."""

from __future__ import annotations

from groundcontrol_client.core.models import Lease
from groundcontrol_client.git.fences import committing_process, judge


def lease(resource: str, holder: str, process_id: str, fence: int = 1) -> Lease:
    return Lease.model_validate(
        {
            "resource": resource,
            "holder": holder,
            "process_id": process_id,
            "fence": fence,
            "state": "live",
            "mode": "exclusive",
        }
    )


def test_a_file_another_session_of_the_hand_holds_is_refused_to_this_session() -> None:
    held = [lease("src/app.py", "hand-a", "claude-code:other")]
    relied, refused = judge(["src/app.py"], held, "hand-a", "claude-code:this")
    assert relied == []
    [refusal] = refused
    assert refusal.sentence.startswith(
        "src/app.py is under src/app.py, held by this hand's other process "
        "('claude-code:other') (fence 1, live), and this session (claude-code:this) holds no "
        "lease covering it"
    )
    # Its own session's lease is relied on; without a session, the hand's is.
    relied, refused = judge(["src/app.py"], held, "hand-a", "claude-code:other")
    assert (relied, refused) == (["src/app.py@1 hand-a"], [])
    relied, refused = judge(["src/app.py"], held, "hand-a", None)
    assert (relied, refused) == (["src/app.py@1 hand-a"], [])


def test_the_committing_session_is_read_from_the_environment() -> None:
    assert committing_process({"GC_PROCESS_ID": "p:1", "CLAUDE_CODE_SESSION_ID": "s"}) == "p:1"
    assert committing_process({"CLAUDE_CODE_SESSION_ID": "abc"}) == "claude-code:abc"
    assert committing_process({}) is None
