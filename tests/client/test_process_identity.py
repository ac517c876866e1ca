"""Two Claude Code sessions that share one key (the natural set-up when `GC_KEY` sits in
`.claude/settings.json`) are two holders: the second session's Write of a file the first holds is
denied with a sentence that says it is the hand's own other session, through the real
`gctl hook claude-code` command; taking it over (`gctl lease acquire --take-over`, the client's
`take_over`) moves it, and the first session's renew-all naming it hears that it lost it."""

from __future__ import annotations

from pathlib import Path

import pytest
from groundcontrol_client import Client
from groundcontrol_client.errors import LeaseHeld, describe
from groundcontrol_client.hooks import process_id_of

from leases.models import Event, Lease, LeaseStatus
from tests.client.conftest import Fleet
from tests.client.test_hooks import decision, hook, pre, repo  # noqa: F401 - `repo` is a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_session_sharing_the_key_is_denied_the_first_sessions_file(
    gc: Fleet,
    repo: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    first = hook(gc, pre("sess-1", repo, "Write", "src/auth/login.py"), key=gc.key_a, state=state)
    assert decision(first) is None
    lease = Lease.objects.get(resource="src/auth/login.py")
    assert (lease.process_id, lease.fence) == (process_id_of("sess-1"), 1)
    # The second session, with the same key: denied, and told whose it is and what to do.
    denied = decision(
        hook(gc, pre("sess-2", repo, "Edit", "src/auth/login.py"), key=gc.key_a, state=state)
    )
    assert denied is not None and denied["permissionDecision"] == "deny"
    reason = denied["permissionDecisionReason"]
    assert reason.startswith(
        "Ground Control: src/auth/login.py is held by your own hand hand-a in another process "
        f"({process_id_of('sess-1')}) (fence 1), renewing"
    )
    assert "take the lease over" in reason and "its own key" in reason
    # Nothing moved: the first session still holds it.
    lease.refresh_from_db()
    assert (lease.status, lease.process_id, lease.fence) == (
        LeaseStatus.HELD,
        process_id_of("sess-1"),
        1,
    )
    # The first session's own next write is still its own.
    assert (
        decision(
            hook(gc, pre("sess-1", repo, "Edit", "src/auth/login.py"), key=gc.key_a, state=state)
        )
        is None
    )


def test_taking_over_moves_it_and_the_first_process_hears_it_lost(gc: Fleet) -> None:
    with Client(gc.url, gc.key_a) as client:
        first = client.lease_acquire("src/app.py", ttl_s=60, process_id="session-1")
        with pytest.raises(LeaseHeld) as refused:
            client.lease_acquire("src/app.py", ttl_s=60, process_id="session-2")
        assert refused.value.get("own_hand") is True
        assert describe(refused.value, subject="src/app.py").startswith(
            "src/app.py is held by your own hand hand-a in another process (session-1) (fence 1)"
        )
        # `gctl lease acquire --take-over`, as the second session would run it.
        done = gc.gctl(
            "--json", "lease", "acquire", "src/app.py", "--take-over", "--process-id", "session-2"
        )
        assert done.returncode == 0, done.stderr
        taken = Lease.objects.get(resource="src/app.py")
        assert (taken.fence, taken.process_id) == (2, "session-2")
        answer = client.lease_renew_all(process_id="session-1", held=[("src/app.py", first.fence)])
        assert answer.renewed == []
        [lost] = answer.not_renewed
        assert (lost.resource, lost.fence, lost.code) == ("src/app.py", 1, "lease_lost")
        assert lost.lease is not None and lost.lease.process_id == "session-2"
    assert Event.objects.filter(kind="lease_taken_over", fence=2).count() == 1
