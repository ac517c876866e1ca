"""`gctl mcp`: in process against the fake server (denials, notices, the end of a session), and
as a real subprocess driven by the SDK's own stdio client against the live server."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import anyio
import pytest
from groundcontrol_client import Client
from groundcontrol_client.mcp_server import Session, build_server
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.types import CallToolResult

from evidence.models import Evidence
from fleet.models import AttemptEnd
from tests.client.conftest import (
    GCTL,
    INTERVAL_S,
    PR_URL,
    Fleet,
    assert_heartbeats_kept_the_claim,
    attempts_of,
)
from tests.client.fakes import FakeServer, error

TOOLS = {
    "list_open_slots",
    "claim",
    "read_brief",
    "report_progress",
    "finish",
    "release",
    "acquire_lease",
    "release_lease",
    "check_lease",
    "status",
}


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content)  # type: ignore[union-attr]


def drive(server: Any, calls: list[tuple[str, dict[str, Any]]], pause_s: float = 0) -> list[Any]:
    """Call the tools in order over one MCP session; `("sleep", {"s": n})` waits between."""

    async def session() -> list[Any]:
        results: list[Any] = []
        async with McpClient(server) as client:
            results.append({tool.name for tool in (await client.list_tools()).tools})
            for name, arguments in calls:
                if name == "sleep":
                    await anyio.sleep(arguments["s"])
                    continue
                results.append(await client.call_tool(name, arguments))
        return results

    # Its own thread: a loop another test left running in this one (Playwright's sync API keeps
    # one while a browser is open) must not stop this session from starting.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, session).result()


# --- in process, against the fake server ------------------------------------------------------


@pytest.fixture
def fake() -> FakeServer:
    return FakeServer(interval_s=0.3)


@pytest.fixture
def session(fake: FakeServer) -> Session:
    return Session(fake.client(), process_id="mcp-1")


def test_it_offers_the_tools_and_keeps_a_claim_alive_between_calls(
    fake: FakeServer, session: Session
) -> None:
    tools, claimed, finished = drive(
        build_server(session),
        [
            ("claim", {"run_id": 12}),
            ("sleep", {"s": 1.0}),
            ("finish", {"evidence": [{"kind": "pull_request", "url": PR_URL}]}),
        ],
    )
    assert tools == TOOLS
    assert not claimed.is_error
    assert text(claimed).startswith("Claimed run 12 slot 0 as attempt 41 (fence 1).")
    assert len(fake.calls("/reports", kind="heartbeat")) >= 3
    assert text(finished) == "Finished attempt 41 with 1 evidence item(s)."
    assert fake.calls("/finish")[0]["evidence"] == [{"kind": "pull_request", "url": PR_URL}]


def test_it_answers_a_denial_with_a_sentence_the_model_can_act_on(
    fake: FakeServer, session: Session
) -> None:
    fake.leases["src/auth/"] = {"holder": "b", "process_id": "x", "fence": 8, "ttl_s": 40}
    _, denied = drive(build_server(session), [("acquire_lease", {"resource": "src/auth/"})])
    assert denied.is_error
    assert text(denied) == (
        "src/auth/ is held by hand b (fence 8) for 40 s: wait, pick other work, or escalate."
    )


def test_it_announces_a_lost_claim_and_a_directive_once(fake: FakeServer, session: Session) -> None:
    server = build_server(session)
    fake.directive = "pause"
    _, claimed, paused, again = drive(
        server,
        [
            ("claim", {"run_id": 12}),
            ("sleep", {"s": 0.3}),
            ("status", {}),
            ("status", {}),
        ],
    )
    assert text(claimed).startswith("NOTICE: the supervisor says pause attempt 41: wait")
    fake.directive = "stop"
    _, stopped = drive(server, [("sleep", {"s": 0.3}), ("status", {})])
    assert text(stopped).startswith("NOTICE: the supervisor says stop attempt 41")
    fake.report_answer = error(409, "lease_lost", "attempt 41 has lost its slot lease")
    _, lost, after = drive(server, [("sleep", {"s": 0.4}), ("status", {}), ("status", {})])
    assert text(lost).splitlines() == [
        "NOTICE: your claim on attempt 41 was lost (attempt 41 has lost its slot lease). Stop "
        "working on it: the slot may already be someone else's.",
        "You hold nothing.",
    ]
    assert text(after) == "You hold nothing."
    assert "directive pause" in text(paused) and text(again) == text(paused)


def test_it_asks_which_attempt_when_it_holds_none(session: Session) -> None:
    _, answer = drive(build_server(session), [("report_progress", {"message": "hi"})])
    assert answer.is_error
    assert text(answer) == "this session holds no claim: claim a slot first."


def test_it_releases_what_the_session_still_holds_when_it_ends(
    fake: FakeServer, session: Session
) -> None:
    drive(
        build_server(session),
        [("claim", {"run_id": 12}), ("acquire_lease", {"resource": "migrations", "ttl_s": 30})],
    )
    session.close()
    assert [c["reason"] for c in fake.calls("/attempts/41/release")] == ["the MCP session ended"]
    assert fake.calls("/leases/release") == [{"resource": "migrations", "fence": 1}]
    count = len(fake.calls("/reports"))
    time.sleep(0.3)
    assert len(fake.calls("/reports")) == count


# --- gctl mcp as a subprocess, against the live server ----------------------------------------


def stdio(gc: Fleet, key: str) -> StdioServerParameters:
    return StdioServerParameters(command=GCTL, args=["mcp"], env={"GC_URL": gc.url, "GC_KEY": key})


@pytest.mark.django_db(transaction=True)
def test_it_claims_reports_and_finishes_through_a_real_mcp_session(gc: Fleet) -> None:
    run = gc.run()
    tools, slots, claimed, brief, reported, finished = drive(
        stdio(gc, gc.key_a),
        [
            ("list_open_slots", {"run_id": run.pk}),
            ("claim", {"run_id": run.pk}),
            ("read_brief", {}),
            # Longer than interval + grace: only the server's background heartbeats keep it.
            ("sleep", {"s": 3 * INTERVAL_S}),
            ("report_progress", {"message": "halfway", "percent": 50}),
            (
                "finish",
                {"evidence": [{"kind": "pull_request", "url": PR_URL}], "summary": "done"},
            ),
        ],
    )
    assert tools == TOOLS
    assert text(slots) == f"Run {run.pk} has open slots: 0."
    (record,) = attempts_of(run)
    assert text(claimed).startswith(f"Claimed run {run.pk} slot 0 as attempt {record.pk}")
    assert "Fix the login redirect." in text(brief)
    assert "Evidence required: pull_request." in text(brief)
    assert text(reported) == f"Reported on attempt {record.pk}. Directive: continue."
    assert not finished.is_error, text(finished)
    record.refresh_from_db()
    assert record.end == AttemptEnd.FINISHED and record.summary == "done"
    assert list(Evidence.objects.filter(attempt=record).values_list("url", flat=True)) == [PR_URL]
    assert_heartbeats_kept_the_claim(record, for_s=1.5 * INTERVAL_S)


@pytest.mark.django_db(transaction=True)
def test_it_denies_in_a_sentence_and_releases_when_the_session_ends(gc: Fleet) -> None:
    run = gc.run()
    other = Client(gc.url, gc.key_b)
    held = other.lease_acquire("src/auth/", ttl_s=60, process_id="hand-b:1")
    _, claimed, denied = drive(
        stdio(gc, gc.key_a),
        [("claim", {"run_id": run.pk}), ("acquire_lease", {"resource": "src/auth/"})],
    )
    assert not claimed.is_error
    assert denied.is_error
    assert text(denied).startswith(f"src/auth/ is held by hand hand-b (fence {held.fence}) for ")
    assert text(denied).endswith(" s: wait, pick other work, or escalate.")
    # The session ended with the claim unfinished: released, open to others at once.
    (record,) = attempts_of(run)
    assert (record.end, record.end_reason) == (AttemptEnd.RELEASED, "the MCP session ended")
    assert other.claim(run.pk, process_id="hand-b:1").slot == 0
