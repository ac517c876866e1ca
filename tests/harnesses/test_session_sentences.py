"""A lease a harness's session holds is said as one: whose session, since when, for its session,
and ask for a handoff; never "its current window ends in N s", which every event pushes on. The
refusal carries `session` and `since`, and the client's sentence reads them."""

from __future__ import annotations

from datetime import UTC, datetime

from groundcontrol_client.core.errors import LeaseHeld, describe

from tests.harnesses.events import REPO, answer, event, hook
from tests.support.api import Api, error_of


def test_a_denial_of_a_sessions_lease_names_the_session_and_since_when(
    api_a: Api, api_b: Api
) -> None:
    body = event("claude-code", "pre_tool_use_write")
    assert answer(hook(api_a, "claude-code", body, repository=REPO)) is None
    refused = api_b.post(
        "/leases/acquire", {"resource": "src/app.py", "ttl_s": 30, "process_id": "b:1"}
    )
    fields = error_of(refused, 409, "lease_held")
    assert fields["session"] == "abc123"
    since = datetime.fromisoformat(fields["since"])
    assert abs((datetime.now(UTC) - since).total_seconds()) < 60
    assert "session abc123 of hand 'hand-a' since " in fields["message"]
    assert "window ends" not in fields["message"]
    said = describe(LeaseHeld(fields["message"], fields=fields), subject="src/app.py")
    assert said.startswith(
        f"src/app.py is held by session abc123 of hand hand-a since {since:%H:%M} UTC, for its "
        "session (fence 1): wait, pick other work, or ask its holder to hand it over"
    )


def test_a_lease_of_a_process_that_is_no_session_keeps_its_window(api_a: Api, api_b: Api) -> None:
    api_a.post("/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "host:1"})
    refused = api_b.post("/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "b:1"})
    fields = error_of(refused, 409, "lease_held")
    assert "session" not in fields
    assert "its current window ends in" in fields["message"]
