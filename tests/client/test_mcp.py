"""`gctl mcp`: in process against the fake server (denials, notices, the end of a session), and
as a real subprocess driven by the SDK's own stdio client against the live server."""

from __future__ import annotations

import concurrent.futures
import importlib.metadata
import os
import re
import threading
import time
from typing import Any

import anyio
import httpx
import pytest
from groundcontrol_client import Client, RetryPolicy, __version__
from groundcontrol_client.mcp.server import Session, build_server
from mcp import Client as McpClient
from mcp import StdioServerParameters
from mcp.types import CallToolResult

from evidence.models import Evidence
from fleet.models import AttemptEnd
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand, Lane
from tests.client.conftest import (
    GCTL,
    INTERVAL_S,
    PR_URL,
    Fleet,
    assert_heartbeats_kept_the_claim,
    attempts_of,
)
from tests.client.fakes import KEY, URL, FakeServer, error

TOOLS = {
    "list_runs",
    "list_open_slots",
    "claim",
    "read_brief",
    "report_progress",
    "finish",
    "release",
    "acquire_lease",
    "lease_from_pool",
    "release_lease",
    "check_lease",
    "list_leases",
    "list_my_leases",
    "status",
    "file_friction",
    "ask_handoff",
    "decline_handoff",
    "handoff_status",
}
VERSION_LINE = f"(Ground Control MCP server, groundcontrol-client {__version__}.)"
LOST_AT = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


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
    # Its expires_in_s is the holder's current window, said as that (issue 17).
    assert text(denied) == (
        "src/auth/ is held by hand b (fence 8), renewing; its current window ends in 40 s: "
        "wait, pick other work, or escalate."
    )


def status_until(server: Any, prefix: str, timeout_s: float = 30.0) -> Any:
    """`status`, asked again until its answer starts with `prefix` (or the time is up: the
    caller's assertion then shows the last answer). A notice comes with the answer of the
    session's next heartbeat, which a loaded machine may make late."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, answer = drive(server, [("status", {})])
        if text(answer).startswith(prefix) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def test_it_announces_a_lost_claim_and_a_directive_once(fake: FakeServer, session: Session) -> None:
    server = build_server(session)
    # The server's answer ends the claim here, never the client's own clock: a grace no loaded
    # machine outlasts (with 0.3 s, a late heartbeat let the clock say it first, in CI).
    fake.grace_s = 30
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
    stopped = status_until(server, "NOTICE: the supervisor says stop")
    assert text(stopped).startswith("NOTICE: the supervisor says stop attempt 41")
    fake.report_answer = error(409, "lease_lost", "attempt 41 has lost its slot lease")
    lost = status_until(server, "NOTICE: Your claim")
    _, after = drive(server, [("status", {})])
    # Said once, with when and what to do; never listed as held again (issue 17).
    notice, *rest = text(lost).splitlines()
    assert re.fullmatch(
        f"NOTICE: Your claim on run 12 \\(attempt 41\\) was lost at {LOST_AT}; claim again only "
        "if the work is still needed. \\(attempt 41 has lost its slot lease.\\) Stop working on "
        "it: the slot may already be someone else's.",
        notice,
    ), notice
    assert rest[0] == "You hold nothing."
    assert re.fullmatch(
        f"Lost: your claim on run 12 \\(attempt 41\\) was lost at {LOST_AT}; claim again only if "
        "the work is still needed.",
        rest[1],
    )
    assert rest[2:] == [VERSION_LINE]
    assert text(after).splitlines() == rest
    assert "directive pause" in text(paused) and text(again) == text(paused)


def test_it_asks_which_attempt_when_it_holds_none(session: Session) -> None:
    _, answer = drive(build_server(session), [("report_progress", {"message": "hi"})])
    assert answer.is_error
    assert text(answer) == "This session holds no claim: claim a slot first."


def test_it_releases_what_the_session_still_holds_when_it_ends(
    fake: FakeServer, session: Session
) -> None:
    drive(
        build_server(session),
        [("claim", {"run_id": 12}), ("acquire_lease", {"resource": "migrations", "ttl_s": 30})],
    )
    session.close()
    assert [c["reason"] for c in fake.calls("/attempts/41/release")] == ["the MCP session ended"]
    assert fake.calls("/leases/release") == [
        {"resource": "migrations", "fence": 1, "process_id": "mcp-1"}
    ]
    count = len(fake.calls("/reports"))
    time.sleep(0.3)
    assert len(fake.calls("/reports")) == count


def list_tools(server: Any) -> dict[str, Any]:
    async def session() -> dict[str, Any]:
        async with McpClient(server) as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, session).result()


def test_it_describes_every_tool_and_parameter_with_its_range(session: Session) -> None:
    tools = list_tools(build_server(session))
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 20, tool.name
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}({name}) has no description"

    def param(tool: str, name: str) -> dict[str, Any]:
        schema = tools[tool].input_schema["properties"][name]
        return next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)

    assert (
        param("report_progress", "percent")["minimum"],
        param("report_progress", "percent")["maximum"],
    ) == (0, 100)
    assert set(param("report_progress", "kind")["enum"]) == {
        "heartbeat",
        "progress",
        "blocker",
        "note",
    }
    assert param("acquire_lease", "wait_s")["maximum"] == 60
    assert param("claim", "wait_s")["maximum"] == 60
    assert param("acquire_lease", "ttl_s")["minimum"] == 1
    ttl = tools["acquire_lease"].input_schema["properties"]["ttl_s"]["description"]
    assert "session dies" in ttl and "lapses ttl_s after the last renewal" in ttl
    assert "another_slot" in tools["claim"].input_schema["properties"]


@pytest.mark.parametrize(
    ("tool", "arguments", "sentence"),
    [
        (
            "report_progress",
            {"message": "hi", "percent": 150},
            "report_progress was not run: percent must be a number from 0 to 100, not 150. "
            "Call it again with valid arguments.",
        ),
        (
            "report_progress",
            {"message": "hi", "kind": "done"},
            "report_progress was not run: kind must be one of progress, blocker, note, "
            "heartbeat, not 'done'. Call it again with valid arguments.",
        ),
        (
            "acquire_lease",
            {"resource": "src/", "wait_s": 90},
            "acquire_lease was not run: wait_s must be a number from 0 to 60, not 90. Call it "
            "again with valid arguments.",
        ),
        (
            "claim",
            {},
            "claim was not run: run_id is required: a whole number of at least 1. Call it again "
            "with valid arguments.",
        ),
        (
            "finish",
            {"evidence": [{"kind": "pull_request"}]},
            "finish was not run: evidence[0].url is required: an http(s) link to it, such as "
            "the pull request's address. Call it again with valid arguments.",
        ),
        (
            "finish",
            {"evidence": [{"kind": 5, "url": "x"}, None]},
            "finish was not run: evidence[0].kind must be a short string, the kind the brief "
            "asks for (e.g. pull_request), not 5; evidence[1] must be an object {kind, url, "
            'note (optional)}, such as {"kind": "pull_request", "url": "<its link>"}, not '
            "null. Call it again with valid arguments.",
        ),
        (
            "finish",
            {"evidence": [{"kind": "pull_request", "url": "x", "note": ["a"]}]},
            "finish was not run: evidence[0].note must be optional text, a few words about it, "
            "not ['a']. Call it again with valid arguments.",
        ),
        (
            "claim",
            {"run_id": True},
            "claim was not run: run_id must be a whole number of at least 1, not true. Call it "
            "again with valid arguments.",
        ),
        (
            "claim",
            {"run_id": "12"},
            "claim was not run: run_id must be a whole number of at least 1, not '12'. Call it "
            "again with valid arguments.",
        ),
        (
            "claim",
            {"run_id": 12, "slot": False, "another_slot": "yes"},
            "claim was not run: slot must be a whole number of at least 0, not false; "
            "another_slot must be true or false, not 'yes'. Call it again with valid arguments.",
        ),
        (
            "report_progress",
            {"message": "hi", "percent": True},
            "report_progress was not run: percent must be a number from 0 to 100, not true. "
            "Call it again with valid arguments.",
        ),
        (
            "read_brief",
            {"attempt_id": "41"},
            "read_brief was not run: attempt_id must be a whole number of at least 1, not '41'. "
            "Call it again with valid arguments.",
        ),
    ],
)
def test_it_answers_arguments_out_of_range_in_a_sentence_without_pydantics_text(
    session: Session, tool: str, arguments: dict[str, Any], sentence: str
) -> None:
    _, answer = drive(build_server(session), [(tool, arguments)])
    assert answer.is_error
    assert text(answer) == sentence
    # No validator's text, no links (pydantic's carry its docs' address).
    assert "pydantic" not in text(answer) and "://" not in text(answer)
    assert "input should" not in text(answer).lower() and "field required" not in text(answer)


def test_it_says_its_version_in_server_info_and_status(session: Session) -> None:
    async def connect() -> tuple[Any, CallToolResult]:
        async with McpClient(build_server(session)) as client:
            return client.server_info, await client.call_tool("status", {})

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        info, status = pool.submit(anyio.run, connect).result()
    assert __version__ == importlib.metadata.version("groundcontrol-client")
    assert (info.name, info.version) == ("groundcontrol", __version__)
    assert text(status).splitlines() == ["You hold nothing.", VERSION_LINE]


def test_it_claims_one_slot_of_a_run_unless_asked_for_another(
    fake: FakeServer, session: Session
) -> None:
    _, claimed, again, another = drive(
        build_server(session),
        [
            ("claim", {"run_id": 12}),
            ("claim", {"run_id": 12}),
            ("claim", {"run_id": 12, "another_slot": True}),
        ],
    )
    assert not claimed.is_error
    assert again.is_error and text(again) == (
        "You already hold slot 0 of run 12 (attempt 41): work on that one. Claim another slot "
        "of the same run only if the brief asks for it (another_slot: true)."
    )
    # Asked for: sent to the server (whose one slot is taken).
    assert another.is_error and text(another).startswith("run 12 has no open slot")
    assert len(fake.calls("/claim")) == 2
    session.close()


def parallel(
    session: Session, calls: list[dict[str, Any]], *, in_order: bool = False
) -> list[CallToolResult]:
    """The `claim` calls at once, as a model's parallel tool use sends them; `in_order`: each
    sent once the one before it is claiming (which call the session meets first is otherwise
    the scheduler's choice)."""
    answers: list[CallToolResult] = []

    async def together() -> None:
        async with McpClient(build_server(session)) as mcp:

            async def one(arguments: dict[str, Any]) -> None:
                answers.append(await mcp.call_tool("claim", arguments))

            async with anyio.create_task_group() as group:
                for arguments in calls:
                    claiming = sum(session._claiming.values())
                    group.start_soon(one, arguments)
                    given_up_at = time.monotonic() + 20
                    while in_order and sum(session._claiming.values()) <= claiming:
                        # Failed, never hung: a claim missed here would leave this loop waiting.
                        assert time.monotonic() < given_up_at, "the call never began claiming"
                        await anyio.sleep(0.005)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, together).result(timeout=30)
    return answers


def slow_claims(
    fake: FakeServer, answer: Any = None, *, together: int = 1
) -> tuple[Session, list[int]]:
    """A session whose claims take 0.3 s on the fake (a claim over the network), each granted a
    slot of its own (or answered `answer`); and the slots granted, in order. With `together`,
    no claim is answered before that many have reached the fake (or 10 s have passed): calls
    asked while another is claiming are so however slowly this machine runs them."""
    granted: list[int] = []
    lock = threading.Lock()
    arrived = threading.Semaphore(0)
    arrivals = [0]

    def attempt(n: int) -> dict[str, Any]:
        data = dict(fake.attempt(), id=40 + n, slot=n - 1, fence=1)
        data["lease"] = dict(data["lease"], resource=f"run/12/slot/{n - 1}", fence=1)
        return data

    def handle(request: httpx.Request) -> httpx.Response:
        found = re.fullmatch(r"/api/v1/attempts/(\d+)/reports", request.url.path)
        if found:  # every granted attempt is renewed
            data = attempt(int(found[1]) - 40)
            return httpx.Response(200, json={"renewed": True, "attempt": data})
        if not request.url.path.endswith("/runs/12/claim"):
            return fake.handle(request)
        with lock:
            arrivals[0] += 1
            if arrivals[0] >= together:  # the last awaited lets them all go; later ones pass
                for _ in range(together if arrivals[0] == together else 1):
                    arrived.release()
        arrived.acquire(timeout=10)
        time.sleep(0.3)
        if answer is not None:
            return answer
        with lock:
            granted.append(len(granted))
            n = len(granted)
        return httpx.Response(201, json=attempt(n))

    client = Client(URL, KEY, transport=httpx.MockTransport(handle), retry=RetryPolicy(retries=0))
    return Session(client, process_id="mcp-1"), granted


def test_parallel_claims_of_one_run_take_one_slot_and_the_other_hears_why(
    fake: FakeServer,
) -> None:
    session, granted = slow_claims(fake)
    answers = parallel(session, [{"run_id": 12}, {"run_id": 12}])
    assert granted == [0] and sorted(session.attempts) == [41]
    said = sorted(text(a) for a in answers)
    assert said[0].startswith("Claimed run 12 slot 0 as attempt 41")
    assert said[1] == (
        "This session is claiming a slot of run 12 already (another call, still waiting for "
        "its answer): wait for it, then work on that slot. Claim another slot of the same run "
        "only if the brief asks for it (another_slot: true)."
    )
    session.close()


def test_parallel_claims_with_another_slot_take_two_slots(fake: FakeServer) -> None:
    session, granted = slow_claims(fake, together=2)
    # The plain claim first: the other, asked while it is claiming, asks for another slot.
    calls = [{"run_id": 12}, {"run_id": 12, "another_slot": True}]
    answers = parallel(session, calls, in_order=True)
    assert not any(a.is_error for a in answers), [text(a) for a in answers]
    assert granted == [0, 1] and sorted(session.attempts) == [41, 42]
    for attempt in list(session.attempts.values()):
        attempt._stop_renewing()


def test_a_refused_claim_frees_the_run_for_the_next_one(fake: FakeServer) -> None:
    session, _ = slow_claims(fake, error(409, "no_open_slot", "run 12 has no open slot", slots=1))
    answers = parallel(session, [{"run_id": 12}])
    assert text(answers[0]).startswith("run 12 has no open slot")
    assert session._claiming == {}
    _, again = drive(build_server(session), [("claim", {"run_id": 12})])
    assert text(again).startswith("run 12 has no open slot")  # sent, not "claiming already"


def test_it_says_a_lost_claim_and_lease_on_later_calls_not_claim_a_slot_first(
    fake: FakeServer, session: Session
) -> None:
    server = build_server(session)
    drive(
        server,
        [("claim", {"run_id": 12}), ("acquire_lease", {"resource": "src/auth/", "ttl_s": 1})],
    )
    fake.report_answer = error(409, "lease_lost", "attempt 41 has lost its slot lease")
    fake.leases["src/auth/"]["fence"] += 1  # broken: the session's renewals are stale now
    _, notices, report, check, status = drive(
        server,
        [
            ("sleep", {"s": 0.8}),  # a renewal of each, every third of its interval
            ("list_my_leases", {}),
            ("report_progress", {"message": "still going"}),
            ("check_lease", {"resource": "src/auth/"}),
            ("status", {}),
        ],
    )
    assert [line.split(" was lost")[0] for line in text(notices).splitlines()[:2]] == [
        "NOTICE: Your claim on run 12 (attempt 41)",
        "NOTICE: Your lease on src/auth/",
    ]
    assert report.is_error
    assert re.fullmatch(
        f"Your claim on run 12 \\(attempt 41\\) was lost at {LOST_AT}; claim again only if the "
        "work is still needed.",
        text(report),
    ), text(report)
    assert check.is_error and re.fullmatch(
        f"Your lease on src/auth/ was lost at {LOST_AT}; acquire it again only if you still "
        "need it, and check first what changed meanwhile.",
        text(check),
    ), text(check)
    lines = text(status).splitlines()
    assert lines[0] == "You hold nothing."
    assert [line.split(" was lost")[0] for line in lines[1:3]] == [
        "Lost: your claim on run 12 (attempt 41)",
        "Lost: your lease on src/auth/",
    ]


def test_it_lists_runs_slots_and_leases(fake: FakeServer, session: Session) -> None:
    fake.evidence_required = ["pull_request"]
    fake.leases["migrations"] = {"holder": "b", "process_id": "x", "fence": 3, "ttl_s": 40}
    _, runs, slots, claimed, full, leases, mine = drive(
        build_server(session),
        [
            ("list_runs", {}),
            ("list_open_slots", {"run_id": 12}),
            ("claim", {"run_id": 12}),
            ("list_open_slots", {"run_id": 12}),
            ("list_leases", {}),
            ("list_my_leases", {}),
        ],
    )
    assert text(runs) == (
        "Open runs:\n- run 12: Fix the login redirect (lane rewalk, work package rewalk-1): 1 of "
        "1 slot open; evidence: pull_request; heartbeat every 0.3 s, grace 0.3 s."
    )
    assert text(slots) == "Run 12 has open slots: 0."
    assert not claimed.is_error
    assert text(full) == (
        "Run 12 has no open slot (1 held, 0 done; the soonest holder's current window ends in "
        "0 s): wait, pick other work, or escalate."
    )
    assert text(leases) == (
        "Resource leases:\n- migrations: held by hand b at fence 3, live, its current window "
        "ends in 40 s."
    )
    assert text(mine) == "This session holds no resource lease."
    session.close()


# --- gctl mcp as a subprocess, against the live server ----------------------------------------


def stdio(gc: Fleet, key: str) -> StdioServerParameters:
    # PYTHONPATH passes through: the gctl under test runs this checkout's client (a worktree's),
    # not whichever one the virtualenv has installed.
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return StdioServerParameters(
        command=GCTL, args=["mcp"], env={"GC_URL": gc.url, "GC_KEY": key, **path}
    )


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
    assert text(denied).startswith(
        f"src/auth/ is held by hand hand-b (fence {held.fence}), renewing; its current window "
        "ends in "
    )
    assert text(denied).endswith(" s: wait, pick other work, or escalate.")
    # The session ended with the claim unfinished: released, open to others at once.
    (record,) = attempts_of(run)
    assert (record.end, record.end_reason) == (AttemptEnd.RELEASED, "the MCP session ended")
    assert other.claim(run.pk, process_id="hand-b:1").slot == 0


@pytest.mark.django_db(transaction=True)
def test_it_finds_work_with_a_lane_limited_key_and_never_reclaims_a_done_run(
    gc: Fleet, owner: Hand, lane: Lane
) -> None:
    # Long enough that a loaded machine's pauses between the calls never lose the claim.
    run = gc.run(heartbeat_interval_s=60, grace_s=60)
    other_lane, _ = hand_services.lane_create(
        workspace=lane.workspace, slug="payments", name="Payments"
    )
    package, _ = plan_services.work_package_create(lane=other_lane, key="pay-1", title="Payments")
    elsewhere = plan_services.run_create(
        work_package=package, title="Migrate", brief="b", slots=1, evidence_required=[]
    )
    key = hand_services.key_issue(hand=owner, scopes=["work"], actor="test", lane=lane).plaintext
    listed, claimed, held, finished, done, again, status = drive(
        stdio(gc, key),
        [
            ("list_runs", {}),
            ("claim", {"run_id": run.pk}),
            ("list_runs", {}),
            ("finish", {"evidence": [{"kind": "pull_request", "url": PR_URL}]}),
            ("list_runs", {"state": "done"}),
            ("claim", {"run_id": run.pk}),
            ("status", {}),
        ],
    )[1:]
    assert not listed.is_error, text(listed)
    assert text(listed).startswith("Open runs:\n- run ")
    assert f"run {run.pk}: " in text(listed) and "1 of 1 slot open" in text(listed)
    assert f"run {elsewhere.pk}:" not in text(listed)  # another lane's: not this key's to see
    assert not claimed.is_error, text(claimed)
    (record,) = attempts_of(run)
    assert f"(you hold slot 0 as attempt {record.pk})" in text(held)
    assert not finished.is_error, text(finished)
    assert text(done).startswith("Done runs:\n") and f"run {run.pk} [done]" in text(done)
    # A done run is never claimed again: its one slot is done.
    assert again.is_error and text(again).startswith(f"run {run.pk} is done")
    assert text(status).splitlines()[-1] == VERSION_LINE
    assert attempts_of(run) == [record]


def test_it_waits_for_a_slot_when_asked(fake: FakeServer, session: Session) -> None:
    fake.fence = 1  # slot 0 is someone's, until the claim's second try

    def free_on_the_second_try(request: Any) -> None:
        if request.url.path.endswith("/runs/12/claim") and len(fake.calls("/claim")) >= 2:
            fake.state = "released"

    fake.before_answer = free_on_the_second_try
    _, claimed = drive(build_server(session), [("claim", {"run_id": 12, "wait_s": 10})])
    assert not claimed.is_error, text(claimed)
    assert text(claimed).startswith("Claimed run 12 slot 0 as attempt 41 (fence 2).")
    assert len(fake.calls("/claim")) >= 2
    session.close()


@pytest.mark.parametrize(
    "evidence",
    [[{"kind": 5, "url": PR_URL}], [None], [[1, 2]], [{"kind": "pull_request"}]],
)
def test_mcp_never_answers_pydantics_own_text_for_an_evidence_item(evidence: Any) -> None:
    """Errors inside a list or object are passed on as pydantic's `msg`, lowercased: "input
    should be a valid dictionary or instance of evidenceitem" (an internal class name),
    "input should be a valid string", "field required". Issue 17.4: pydantic's raw text never
    reaches a model; the top-level parameters already get a sentence of the project's own."""
    session = Session(FakeServer(interval_s=0.3).client(), process_id="mcp-1")
    _, answer = drive(build_server(session), [("finish", {"evidence": evidence})])
    said = text(answer).lower()
    assert answer.is_error
    assert "evidenceitem" not in said and "input should be" not in said
    assert "field required" not in said


def test_mcp_refuses_true_as_a_run_id_instead_of_claiming_run_1() -> None:
    """`run_id: true` (a model's slip) passes pydantic's lax mode as 1, and the session claims
    run 1: a wrong type acts on another run instead of being refused in a sentence."""
    server = FakeServer(interval_s=0.3)
    session = Session(server.client(), process_id="mcp-1")
    _, answer = drive(build_server(session), [("claim", {"run_id": True})])
    session.close()
    assert answer.is_error
    assert [p for _, p, _ in server.requests if p.endswith("/claim")] == []


def test_one_mcp_session_never_claims_two_slots_of_a_run_with_parallel_tool_calls() -> None:
    """Issue 17.5: 'one session claims at most one slot of a run unless it asks for more'. A
    model that emits two tool calls at once (parallel tool use) gets two slots: the check of
    what the session holds and the claim are not one step (the session's lock is let go before
    `attempt.open()`), and the SDK runs sync tools in worker threads, concurrently."""
    server = FakeServer(interval_s=5.0)
    claims: list[httpx.Request] = []
    lock = threading.Lock()
    original = server.handle

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/runs/12/claim"):
            with lock:
                claims.append(request)
                n = len(claims)
            time.sleep(0.3)  # a claim takes a moment over the network
            data = server.attempt()
            data.update(id=40 + n, slot=n - 1, fence=1)
            data["lease"] = dict(data["lease"], resource=f"run/12/slot/{n - 1}", fence=1)
            return httpx.Response(201, json=data)
        return original(request)

    client = Client(URL, KEY, transport=httpx.MockTransport(handle), retry=RetryPolicy(retries=0))
    session = Session(client, process_id="mcp-1")
    answers: list[Any] = []

    async def both() -> None:
        async with McpClient(build_server(session)) as mcp:

            async def one() -> None:
                answers.append(await mcp.call_tool("claim", {"run_id": 12}))

            async with anyio.create_task_group() as group:
                group.start_soon(one)
                group.start_soon(one)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, both).result()
    held = sorted(session.attempts)
    for attempt in list(session.attempts.values()):
        attempt._stop_renewing()
    assert (len(claims), held) == (1, [41]), [text(a) for a in answers]
