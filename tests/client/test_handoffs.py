"""Handoffs through the client against the live server: gctl asks, shows and declines; the
runtime's renewals surface a request once; the MCP session says it once as a notice and
declines it through its tool; the asker reads the answer."""

from __future__ import annotations

import json

import pytest
from groundcontrol_client.core.handoffs import HandoffNotices, PendingHandoff
from groundcontrol_client.http import Client
from groundcontrol_client.mcp.session import Session
from groundcontrol_client.mcp.tools import build_server

from leases.models import HandoffRequest
from tests.client.conftest import Fleet, wait_for
from tests.client.test_mcp import drive, text

pytestmark = pytest.mark.django_db(transaction=True)

SENTENCE = "hand hand-b asks for `src/auth/`: release when you can"


def test_gctl_asks_the_holder_sees_it_declines_and_the_asker_reads_the_answer(gc: Fleet) -> None:
    acquired = gc.gctl("--json", "lease", "acquire", "src/auth/", GC_PROCESS_ID="shell-a")
    assert acquired.returncode == 0, acquired.stderr
    asked = gc.gctl("--json", "handoff", "src/auth/", "--reason", "the login bug", key=gc.key_b)
    assert asked.returncode == 0, asked.stderr
    request_id = json.loads(asked.stdout)["id"]
    human = gc.gctl("handoff", "src/auth/", "--reason", "again", key=gc.key_b)
    assert human.returncode == 0 and f"asked (request {request_id})" in human.stdout

    renewed = gc.gctl("lease", "renew", "src/auth/", "--fence", "1", "--process-id", "shell-a")
    assert renewed.returncode == 0, renewed.stderr
    assert f"{SENTENCE} (the login bug; request {request_id})" in renewed.stdout
    assert "gctl handoff decline ID --reason" in renewed.stdout

    # Not "denied, wait": nobody else stands in the way (exit 1, another refusal).
    mine = gc.gctl("handoff", "src/auth/", "--reason", "x")
    assert mine.returncode == 1 and "handoff_own_lease" in mine.stderr
    assert "your own hand holds it" in mine.stderr and "wait, pick other work" not in mine.stderr
    bad = gc.gctl("handoff", "decline", str(request_id))
    assert bad.returncode == 2 and "--reason" in bad.stderr

    declined = gc.gctl("handoff", "decline", str(request_id), "--reason", "mid-migration")
    assert declined.returncode == 0, declined.stderr
    shown = gc.gctl("handoff", "show", str(request_id), key=gc.key_b)
    assert shown.returncode == 0 and "declined: mid-migration" in shown.stdout
    listed = gc.gctl("--json", "handoffs", "--asked", key=gc.key_b)
    assert [r["status"] for r in json.loads(listed.stdout)] == ["declined"]
    assert HandoffRequest.objects.get(pk=request_id).status == "declined"


def test_the_mcp_session_says_a_request_once_and_declines_it(gc: Fleet) -> None:
    session = Session(Client(gc.url, gc.key_a), process_id="mcp-a")
    try:
        # Renewed every 2 s: a busy machine's slow answer must not lose the tenure meanwhile.
        lease, _ = session.hold("src/auth/", ttl_s=6)
        asker = Client(gc.url, gc.key_b)
        asked = asker.ask_handoff(reason="the login bug", resource="src/auth/login.py")
        said: list[str] = []

        def heard() -> bool:
            said.extend(session.notices())
            return any("asks for" in line for line in said)

        wait_for(heard, timeout=20)
        for _ in range(2):  # two renewals more show the same request
            renewed_at = lease.tenure.renewed_at
            wait_for(lambda: lease.tenure.renewed_at > renewed_at, timeout=20)  # noqa: B023
            said.extend(session.notices())
        assert not lease.lost
        asks = [line for line in said if "asks for" in line]
        assert len(asks) == 1, said
        assert asks[0].startswith("NOTICE: Hand hand-b asks for `src/auth/` (it wants")
        assert f"request {asked.id}" in asks[0] and "decline_handoff" in asks[0]
        assert [r.id for r in lease.handoffs.open] == [asked.id]

        _, declined = drive(
            build_server(session),
            [("decline_handoff", {"handoff_id": asked.id, "reason": "mid-migration"})],
        )
        assert not declined.is_error, text(declined)
        answer = asker.handoff(asked.id)
        assert answer.status == "declined" and "mid-migration" in answer.sentence()
        _, status = drive(
            build_server(Session(asker, process_id="mcp-b")), [("handoff_status", {})]
        )
        assert "declined: mid-migration" in text(status)
    finally:
        session.close()


def test_notices_say_each_request_once() -> None:
    notices = HandoffNotices()
    first = PendingHandoff(id=1, asker="b", resource="src/auth/", wanted="src/auth/", reason="bug")
    second = PendingHandoff(id=2, asker="c", resource="src/auth/", wanted="src/auth/x.py")
    assert notices.observe([first], "src/auth/") == [
        "hand b asks for `src/auth/`: release when you can (bug; request 1)"
    ]
    assert notices.observe([first], "src/auth/") == []
    assert notices.observe([first, second], "src/auth/") == [
        "hand c asks for `src/auth/` (it wants `src/auth/x.py`): release when you can (request 2)"
    ]
    assert len(notices.take()) == 2 and notices.take() == []
