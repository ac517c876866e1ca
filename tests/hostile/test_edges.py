"""Issue 17 at its edges, attacked as a hostile user would: each test here failed on the tree it
was written against (e2b3484), each for a defect in what the issue promises (wrong JSON types,
a done run that said nothing, proxy outages, a dead watchdog, pydantic text, parallel claims)."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from typing import Any

import anyio
import httpx
import pytest
from groundcontrol_client import Client, Hand, RetryPolicy
from groundcontrol_client import runtime as runtime_module
from groundcontrol_client.mcp_server import Session, build_server
from mcp import Client as McpClient

from fleet.models import Run
from leases.models import Event
from tests.api.conftest import PR_URL, Api, error_of
from tests.api.test_slots_api import claim, finish
from tests.client.conftest import gc  # noqa: F401 - the live-server fleet
from tests.client.fakes import KEY, URL, FakeServer
from tests.client.test_mcp import drive, text
from tests.client.test_orphans import (
    _no_strays,  # noqa: F401 - kills whatever a failing test left running
    alive,
    children_of,
    cmdline,
    kill_9,
    read_pids,
    start,
)
from tests.client.test_runtime import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_slot(make_run: Any) -> Run:
    return make_run(
        slots=1, heartbeat_interval_s=100, grace_s=60, evidence_required=["pull_request"]
    )


# --- 17.1 over REST -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/runs/{run}/slots", {"count": "5", "reason": "more"}, "count"),
        ("/runs/{run}/slots", {"count": 5.0, "reason": "more"}, "count"),
        ("/runs/{run}/slots/0/reopen", {"reason": 5}, "reason"),
    ],
)
def test_the_new_supervisor_calls_refuse_a_value_of_the_wrong_json_type(
    boss: Api, api_a: Api, one_slot: Run, path: str, body: dict[str, Any], field: str
) -> None:
    """The API keeps JSON's types everywhere else (`StrictIntegerField`, `StrictCharField`:
    POST /runs refuses `"slots": "5"`), but `SlotsAddIn` and `SlotReopenIn` use DRF's coercing
    fields: `"count": "5"` adds five slots, `"reason": 5` reopens a done slot."""
    finish(api_a, claim(api_a, one_slot))
    response = boss.post(path.format(run=one_slot.pk), body)
    assert field in error_of(response, 400, "validation_error")["fields"]


def test_a_run_that_becomes_done_when_reopened_from_closed_says_run_done(
    boss: Api, api_a: Api, one_slot: Run
) -> None:
    """A supervisor closes a run while its last slot is held; the holder finishes (the run stays
    closed); the supervisor opens it again and `run_set_state` makes it `done` with no
    `run_done` event, so no `run_done` webhook either: a subscriber never hears this run is
    done."""
    attempt = claim(api_a, one_slot)
    assert boss.patch(f"/runs/{one_slot.pk}", {"state": "closed"}).status_code == 200
    finish(api_a, attempt)
    reopened = boss.patch(f"/runs/{one_slot.pk}", {"state": "open"})
    assert reopened.status_code == 200 and reopened.json()["state"] == "done"
    assert Event.objects.filter(kind="run_done", data__run=one_slot.pk).count() == 1


# --- 17.3: a brief outage behind a reverse proxy ------------------------------------------------


def proxied_hand(server: FakeServer, clock: FakeClock, bad_until: float, status: int) -> Hand:
    """A hand behind a reverse proxy that answers `status` with an HTML page (as nginx or a
    cloud load balancer does while the app server restarts) until the fake clock reaches
    `bad_until`, for reports and finishes; every other call reaches the fake."""

    def handle(request: httpx.Request) -> httpx.Response:
        if clock.now < bad_until and request.url.path.endswith(("/reports", "/finish")):
            with server.lock:
                server.requests.append((request.method, request.url.path, {}))
            return httpx.Response(
                status,
                text=f"<html><body>{status} Bad Gateway</body></html>",
                headers={"content-type": "text/html"},
            )
        return server.handle(request)

    client = Client(
        URL,
        KEY,
        transport=httpx.MockTransport(handle),
        retry=RetryPolicy(retries=2, backoff_s=0.5, max_backoff_s=8.0),
        sleep=clock.sleep,
    )
    return Hand(client, process_id="p", heartbeat_fraction=1000, sleep=clock.sleep)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(runtime_module.time, "monotonic", fake)
    return fake


@pytest.mark.parametrize("status", [502, 504])
def test_a_report_rides_out_a_proxy_outage_inside_the_grace(clock: FakeClock, status: int):
    """3 s of 502 (504) from the proxy in front of the server, interval 15 s and grace 15 s:
    the runtime retries only `Unavailable` (503, 429, a failed connection), so the first 502
    raises `ServerError` out of `attempt.report()`, the `with` block ends with it, and the
    slot is released "because" of it (the release gets through): a brief outage ended a
    valid tenure."""
    server = FakeServer(interval_s=15.0, grace_s=15.0)
    hand = proxied_hand(server, clock, bad_until=1000.0 + 3.0, status=status)
    raised = None
    try:
        with hand.claim(12) as attempt:
            attempt.report("halfway", percent=50)
            attempt.attach("pull_request", "https://git.test/pr/7")
    except Exception as error:  # noqa: BLE001 - what ended the tenure, in the assertion
        raised = error
    assert (server.state, server.calls("/release"), raised) == ("finished", [], None)


def test_a_finish_rides_out_a_proxy_outage_inside_the_grace(clock: FakeClock) -> None:
    server = FakeServer(interval_s=15.0, grace_s=15.0)
    hand = proxied_hand(server, clock, bad_until=1000.0 + 3.0, status=502)
    raised = None
    try:
        with hand.claim(12) as attempt:
            attempt.attach("pull_request", "https://git.test/pr/7")
    except Exception as error:  # noqa: BLE001
        raised = error
    assert (server.state, raised) == ("finished", None)


# --- 17.2: the wrapped command dies with its wrapper --------------------------------------------

FAMILY = (
    "sleep 300 & echo $! >> {pids}; (sleep 300 & echo $! >> {pids}; wait) & echo $$ >> {pids}; wait"
)


@pytest.mark.django_db(transaction=True)
def test_grandchildren_die_with_the_wrapper_even_when_its_watchdog_died_first(
    gc: Any,  # noqa: F811
    tmp_path: Any,
) -> None:
    """'Make its death certain when the wrapper dies by any means': only the watchdog reaches
    grandchildren (the death signal reaches the command alone), and nothing watches the
    watchdog. Once it is gone (an OOM kill, a `kill -9` of the wrong pid, a sweep of stray
    python processes) the wrapper carries on as if covered, and a later `kill -9` of the
    wrapper leaves the command's children running with no lease."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = gc.run()
    pids = tmp_path / "pids"
    wrapper = start(
        gc, tmp, "run", "--run", str(run.pk), "--kill-after", "1", "--",
        "sh", "-c", FAMILY.format(pids=pids),
    )  # fmt: skip
    family = read_pids(pids, 3)
    (watchdog,) = [p for p in children_of(wrapper.pid) if b"watch" in cmdline(p)]
    os.kill(watchdog, signal.SIGKILL)
    time.sleep(0.5)
    kill_9(wrapper)
    time.sleep(3)
    assert [pid for pid in family if alive(pid)] == []


# --- 17.4 / 17.5: MCP ---------------------------------------------------------------------------


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
