"""The REST client against a mock transport: configuration, retries with backoff and jitter,
no retry on a denial, and the mapping of error bodies to exceptions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest
from groundcontrol_client import (
    AuthFailed,
    Client,
    ConfigError,
    ConnectionFailed,
    Denied,
    DependencyUnavailable,
    Evidence,
    EvidenceMissing,
    GatewayUnavailable,
    GroundControlError,
    KeyRevoked,
    LeaseHeld,
    LeaseLost,
    NoOpenSlot,
    NotFound,
    ProcessMismatch,
    RateLimited,
    RetryPolicy,
    Run,
    ScopeDenied,
    ServerError,
    SlotTaken,
    StaleFence,
    TenureLost,
    Unavailable,
    ValidationFailed,
)
from groundcontrol_client.core import errors, tenure
from groundcontrol_client.core.errors import (
    TRANSIENT_STATUSES,
    describe_denial,
    error_from_response,
)
from groundcontrol_client.core.sending import RETRY_STATUSES

from tests.client.fakes import KEY, URL, FakeServer, error

Handler = Callable[[httpx.Request], httpx.Response]


def scripted(*answers: httpx.Response | Exception) -> tuple[Handler, list[httpx.Request]]:
    """A handler that gives `answers` in order (raising the exceptions) and records requests."""
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handle, seen


def make_client(
    handler: Handler, sleeps: list[float], *, rand: float = 0.5, **kw: object
) -> Client:
    return Client(
        URL,
        KEY,
        transport=httpx.MockTransport(handler),
        retry=kw.pop("retry", RetryPolicy(retries=3, backoff_s=1.0, max_backoff_s=3.0)),  # type: ignore[arg-type]
        sleep=sleeps.append,
        rand=lambda: rand,
        **kw,  # type: ignore[arg-type]
    )


ME = {
    "hand": "hand-a",
    "workspace": "acme",
    "scopes": ["work"],
    "key_prefix": "abc123",
    "lane": None,
}


def test_it_is_configured_from_gc_url_and_gc_key() -> None:
    env = {"GC_URL": "http://gc.test:8000/", "GC_KEY": KEY, "GC_TIMEOUT": "3", "GC_RETRIES": "1"}
    client = Client.from_env(env)
    assert client.url == "http://gc.test:8000/api/v1/"
    assert client.timeout == 3.0
    assert client.retry.retries == 1
    assert client._http.headers["authorization"] == f"Bearer {KEY}"
    # A URL that already names the API is accepted as is.
    assert Client.from_env({"GC_URL": "https://gc.test/api/v1", "GC_KEY": KEY}).url == (
        "https://gc.test/api/v1/"
    )


@pytest.mark.parametrize(
    "env",
    [
        {"GC_KEY": KEY},
        {"GC_URL": "http://gc.test"},
        {"GC_URL": "gc.test", "GC_KEY": KEY},
        {"GC_URL": "http://gc.test", "GC_KEY": KEY, "GC_TIMEOUT": "soon"},
        {"GC_URL": "http://gc.test", "GC_KEY": KEY, "GC_RETRIES": "-1"},
        {"GC_URL": "http://gc.test", "GC_KEY": KEY, "GC_RETRIES": "1.5"},
    ],
)
def test_it_refuses_a_missing_or_malformed_configuration(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        Client.from_env(env)


def test_it_sends_the_key_and_parses_me() -> None:
    handle, seen = scripted(httpx.Response(200, json=ME))
    me = make_client(handle, []).me()
    assert (me.hand, me.workspace, me.scopes, me.key_prefix) == (
        "hand-a",
        "acme",
        ["work"],
        "abc123",
    )
    assert seen[0].url == "http://gc.test/api/v1/me"
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"


def test_it_retries_503_with_growing_jittered_backoff() -> None:
    unavailable = error(503, "dependency_unavailable", "database unreachable")
    handle, seen = scripted(unavailable, unavailable, unavailable, httpx.Response(200, json=ME))
    sleeps: list[float] = []
    assert make_client(handle, sleeps, rand=0.5).me().hand == "hand-a"
    assert len(seen) == 4
    # Ceilings 1, 2, 3 (capped); each delay is drawn from the upper half of its ceiling.
    assert sleeps == pytest.approx([0.75, 1.5, 2.25])


def test_it_draws_each_delay_from_the_random_source() -> None:
    unavailable = error(503, "dependency_unavailable")
    for rand, expected in ((0.0, 0.5), (1.0, 1.0)):
        handle, _ = scripted(unavailable, httpx.Response(200, json=ME))
        sleeps: list[float] = []
        make_client(handle, sleeps, rand=rand).me()
        assert sleeps == pytest.approx([expected])


def test_it_gives_up_after_its_retries_with_the_last_error() -> None:
    unavailable = error(503, "dependency_unavailable", "database unreachable")
    handle, seen = scripted(*[unavailable] * 4)
    sleeps: list[float] = []
    with pytest.raises(DependencyUnavailable) as raised:
        make_client(handle, sleeps).me()
    assert len(seen) == 4 and len(sleeps) == 3
    assert raised.value.status == 503 and raised.value.request_id == "req-1"


def test_it_waits_as_long_as_a_rate_limit_says() -> None:
    handle, seen = scripted(
        error(429, "rate_limited", "slow down", retry_after_s=2.5), httpx.Response(200, json=ME)
    )
    sleeps: list[float] = []
    make_client(handle, sleeps, rand=0.0).me()
    assert len(seen) == 2
    assert sleeps == [2.5]


def test_it_retries_connection_errors() -> None:
    refused = httpx.ConnectError("refused")
    handle, seen = scripted(refused, httpx.ReadTimeout("slow"), httpx.Response(200, json=ME))
    sleeps: list[float] = []
    assert make_client(handle, sleeps).me().hand == "hand-a"
    assert len(seen) == 3 and len(sleeps) == 2


def test_it_raises_connection_failed_when_the_server_stays_unreachable() -> None:
    handle, seen = scripted(*[httpx.ConnectError("refused")] * 4)
    with pytest.raises(ConnectionFailed) as raised:
        make_client(handle, []).me()
    assert isinstance(raised.value, Unavailable)
    assert raised.value.code == "connection_failed"
    assert len(seen) == 4


@pytest.mark.parametrize(
    "code", ["lease_held", "no_open_slot", "slot_taken", "lease_lost", "stale_fence"]
)
def test_it_never_retries_a_409(code: str) -> None:
    handle, seen = scripted(error(409, code), httpx.Response(200, json=ME))
    sleeps: list[float] = []
    with pytest.raises(GroundControlError) as raised:
        make_client(handle, sleeps).me()
    assert raised.value.code == code
    assert len(seen) == 1 and sleeps == []


def test_it_retries_a_claim_only_when_the_request_never_left() -> None:
    server = FakeServer()
    attempt = httpx.Response(201, json=server.attempt())
    handle, seen = scripted(httpx.ConnectError("refused"), attempt)
    assert make_client(handle, []).claim(12, process_id="p").id == 41
    assert len(seen) == 2

    # A read timeout may hide a claim that happened: a second one could take a second slot.
    handle, seen = scripted(httpx.ReadTimeout("slow"), attempt)
    with pytest.raises(ConnectionFailed):
        make_client(handle, []).claim(12, process_id="p")
    assert len(seen) == 1


def test_it_retries_a_report_after_a_read_timeout() -> None:
    server = FakeServer()
    ok = httpx.Response(200, json={"renewed": True, "attempt": server.attempt()})
    handle, seen = scripted(httpx.ReadTimeout("slow"), ok)
    result = make_client(handle, []).report(41, fence=1, process_id="p")
    assert result.renewed is True and len(seen) == 2


def test_it_stops_retrying_when_the_next_try_would_start_after_give_up_at() -> None:
    handle, seen = scripted(*[error(503, "dependency_unavailable")] * 4)
    sleeps: list[float] = []
    with pytest.raises(DependencyUnavailable):
        make_client(handle, sleeps).request("GET", "me", give_up_at=time.monotonic() + 0.1)
    assert len(seen) == 1 and sleeps == []


@pytest.mark.parametrize(
    ("status", "code", "cls", "category"),
    [
        (400, "validation_error", ValidationFailed, GroundControlError),
        (401, "key_revoked", KeyRevoked, AuthFailed),
        (403, "scope_denied", ScopeDenied, AuthFailed),
        (404, "not_found", NotFound, GroundControlError),
        (409, "lease_held", LeaseHeld, Denied),
        (409, "no_open_slot", NoOpenSlot, Denied),
        (409, "slot_taken", SlotTaken, Denied),
        (409, "lease_lost", LeaseLost, TenureLost),
        (409, "stale_fence", StaleFence, TenureLost),
        (409, "process_mismatch", ProcessMismatch, TenureLost),
        (422, "evidence_missing", EvidenceMissing, GroundControlError),
        (429, "rate_limited", RateLimited, Unavailable),
        (409, "some_new_denial", Denied, Denied),
        (500, "internal", ServerError, ServerError),
    ],
)
def test_it_maps_each_error_code_to_its_exception(
    status: int, code: str, cls: type[GroundControlError], category: type[GroundControlError]
) -> None:
    handle, _ = scripted(error(status, code, "why", extra=7))
    with pytest.raises(cls) as raised:
        make_client(handle, [], retry=RetryPolicy(retries=0)).me()
    refused = raised.value
    assert isinstance(refused, category)
    assert (refused.code, refused.status, refused.message) == (code, status, "why")
    assert refused.request_id == "req-1"
    assert refused.fields == {"extra": 7}


def test_it_carries_the_denials_fields() -> None:
    held = error(
        409,
        "lease_held",
        "held by hand 'b' (fence 8) for 40 more seconds",
        holder="b",
        fence=8,
        expires_in_s=40.2,
        state="live",
        resource="src/auth/",
    )
    handle, _ = scripted(held)
    with pytest.raises(LeaseHeld) as raised:
        make_client(handle, []).lease_acquire("src/auth/", ttl_s=60, process_id="p")
    denial = raised.value
    assert (denial.get("holder"), denial.get("fence"), denial.get("expires_in_s")) == ("b", 8, 40.2)
    # expires_in_s is the end of the holder's current window, not when it frees (issue 17).
    assert (
        describe_denial(denial)
        == str(denial)
        == (
            "src/auth/ is held by hand b (fence 8), renewing; its current window ends in 40 s: "
            "wait, pick other work, or escalate."
        )
    )


def test_it_maps_an_answer_without_an_error_body_by_status() -> None:
    handle, seen = scripted(httpx.Response(500, text="<html>oops</html>"))
    with pytest.raises(ServerError) as raised:
        make_client(handle, []).me()
    assert raised.value.status == 500 and len(seen) == 1  # the same call would fail the same way
    # A proxy's page while the server restarts (502, 503, 504) is retried like the server's 503.
    handle, seen = scripted(
        httpx.Response(502, text="<html>bad gateway</html>"),
        httpx.Response(503, text="<html>maintenance</html>"),
        httpx.Response(504, text="<html>gateway timeout</html>"),
        httpx.Response(200, json=ME),
    )
    assert make_client(handle, []).me().hand == "hand-a" and len(seen) == 4


@pytest.mark.parametrize("status", [502, 504])
def test_a_proxys_gateway_error_is_transient_and_retried(status: int) -> None:
    page = httpx.Response(status, text="<html>bad gateway</html>")
    handle, seen = scripted(*[page] * 4)
    with pytest.raises(GatewayUnavailable) as raised:
        make_client(handle, []).me()
    assert isinstance(raised.value, Unavailable) and raised.value.status == status
    assert len(seen) == 4
    assert "unavailable; try again shortly" in str(raised.value)


def test_one_definition_of_transient_serves_every_retry() -> None:
    """The client's retried statuses, the error table and the runtime's rule agree."""
    assert RETRY_STATUSES == TRANSIENT_STATUSES == {429, 502, 503, 504}
    for status in range(400, 600):
        refusal = error_from_response(status, None)
        assert errors.is_transient(refusal) == (status in RETRY_STATUSES), status
        assert tenure.is_transient(refusal) == (status in RETRY_STATUSES), status
    assert errors.is_transient(ConnectionFailed("down"))
    assert not tenure.is_transient(tenure.LeaseUnconfirmed("not vouched"))


@pytest.mark.parametrize("status", [502, 504])
def test_a_claim_is_not_sent_again_after_a_proxys_gateway_error(status: int) -> None:
    """The proxy may have passed the claim on before it gave up on the server: a second claim
    could take a second slot. A 503 is the server's own refusal: retried."""
    server = FakeServer()
    attempt = httpx.Response(201, json=server.attempt())
    handle, seen = scripted(httpx.Response(status, text="<html>gateway</html>"), attempt)
    with pytest.raises(GatewayUnavailable):
        make_client(handle, []).claim(12, process_id="p")
    assert len(seen) == 1
    handle, seen = scripted(error(503, "dependency_unavailable"), attempt)
    assert make_client(handle, []).claim(12, process_id="p").id == 41 and len(seen) == 2


def test_it_sends_the_contracts_bodies() -> None:
    server = FakeServer()
    client = server.client()
    attempt = client.claim(12, process_id="host:1:2")
    client.report(
        attempt.id,
        fence=attempt.fence,
        kind="progress",
        process_id="host:1:2",
        message="half",
        percent=50,
    )
    client.finish(
        attempt.id,
        fence=attempt.fence,
        process_id="host:1:2",
        evidence=[Evidence("pull_request", "https://git.test/pr/1", note="the fix")],
        summary="done",
    )
    assert server.calls("/claim") == [{"process_id": "host:1:2"}]
    assert server.calls("/reports") == [
        {"fence": 1, "process_id": "host:1:2", "kind": "progress", "message": "half", "percent": 50}
    ]
    assert server.calls("/finish") == [
        {
            "fence": 1,
            "process_id": "host:1:2",
            "evidence": [
                {"kind": "pull_request", "url": "https://git.test/pr/1", "note": "the fix"}
            ],
            "summary": "done",
        }
    ]


def test_it_follows_the_next_link_of_a_paginated_list() -> None:
    lease = {"resource": "a", "holder": "h", "fence": 1, "state": "live", "ttl_s": 60}
    next_page = f"{URL}/api/v1/leases?prefix=src%2F&cursor=aWQ6Mw"
    handle, seen = scripted(
        httpx.Response(200, json=[lease], headers={"Link": f'<{next_page}>; rel="next"'}),
        httpx.Response(200, json=[{**lease, "resource": "b"}]),
    )
    leases = make_client(handle, []).leases(prefix="src/")
    assert [lease.resource for lease in leases] == ["a", "b"]
    assert seen[0].url.params["prefix"] == "src/"
    assert dict(seen[1].url.params) == {"prefix": "src/", "cursor": "aWQ6Mw"}


def test_it_reads_a_plain_list() -> None:
    slots = [{"index": 0, "state": "open", "holder": None, "fence": 0}]
    handle, seen = scripted(httpx.Response(200, json=slots))
    assert [s.index for s in make_client(handle, []).slots(12)] == [0]
    assert seen[0].url.path == "/api/v1/runs/12/slots" and seen[0].url.params["state"] == "open"


# --- claim(wait_s=): polling for an open slot --------------------------------------------------


class FakeClock:
    """A monotonic clock that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def waiting_client(handler: Handler, clock: FakeClock) -> Client:
    return Client(
        URL,
        KEY,
        transport=httpx.MockTransport(handler),
        retry=RetryPolicy(retries=0),
        sleep=clock.sleep,
        rand=lambda: 0.5,
        clock=clock,
    )


def no_open_slot(**fields: object) -> httpx.Response:
    return error(409, "no_open_slot", "run 12 has no open slot", **fields)


def test_it_waits_for_an_open_slot_and_says_each_new_answer_once() -> None:
    full = {"slots": 2, "held": 2, "done": 0}
    handle, seen = scripted(
        no_open_slot(**full, next_expires_in_s=40.0),
        # Only the clock moved: the same answer, not said again.
        no_open_slot(**full, next_expires_in_s=39.0),
        no_open_slot(slots=2, held=1, done=1, next_expires_in_s=12.0),
        httpx.Response(201, json=FakeServer().attempt()),
    )
    clock = FakeClock()
    heard: list[str] = []
    attempt = waiting_client(handle, clock).claim(
        12, process_id="p", wait_s=30, on_wait=lambda denied: heard.append(str(denied))
    )
    assert attempt.id == 41 and len(seen) == 4
    # Every try is the same claim; backoff 0.5 s doubling, each from the upper half.
    assert [json.loads(r.content) for r in seen] == [{"process_id": "p"}] * 4
    assert clock.sleeps == pytest.approx([0.375, 0.75, 1.5])
    assert heard == [
        "run 12 has no open slot (2 slots: 2 held; the soonest holder's current window ends "
        "in 40 s): wait, pick other work, or escalate.",
        "run 12 has no open slot (2 slots: 1 held, 1 done; the soonest holder's current window "
        "ends in 12 s): wait, pick other work, or escalate.",
    ]


def test_it_gives_up_waiting_at_wait_s_with_the_last_answer() -> None:
    handle, seen = scripted(*[no_open_slot(slots=1, held=1)] * 20)
    clock = FakeClock()
    with pytest.raises(NoOpenSlot) as raised:
        waiting_client(handle, clock).claim(12, process_id="p", wait_s=4)
    assert raised.value.get("held") == 1
    # 0.375 + 0.75 + 1.5 = 2.625, then the rest of the 4 s, then one last try at the end.
    assert clock.sleeps == pytest.approx([0.375, 0.75, 1.5, 1.375])
    assert clock.now == pytest.approx(104.0) and len(seen) == 5


def test_it_waits_for_a_named_slot_that_is_taken() -> None:
    taken = error(409, "slot_taken", "held", holder="b", fence=3, expires_in_s=5.0, state="live")
    handle, seen = scripted(taken, httpx.Response(201, json=FakeServer().attempt()))
    clock = FakeClock()
    assert waiting_client(handle, clock).claim(12, process_id="p", slot=0, wait_s=10).id == 41
    assert json.loads(seen[1].content) == {"process_id": "p", "slot": 0}


@pytest.mark.parametrize(
    "answer",
    [
        error(409, "run_closed", "run 12 is done"),
        error(404, "not_found", "no run 12"),
        error(403, "scope_denied", "needs work"),
    ],
)
def test_it_never_waits_on_a_run_that_will_not_open(answer: httpx.Response) -> None:
    handle, seen = scripted(answer)
    clock = FakeClock()
    with pytest.raises(GroundControlError):
        waiting_client(handle, clock).claim(12, process_id="p", wait_s=30)
    assert len(seen) == 1 and clock.sleeps == []


def test_it_never_sends_a_claim_again_that_may_have_been_granted_while_waiting() -> None:
    handle, seen = scripted(no_open_slot(slots=1, held=1), httpx.ReadTimeout("slow"))
    clock = FakeClock()
    with pytest.raises(ConnectionFailed):
        waiting_client(handle, clock).claim(12, process_id="p", wait_s=30)
    assert len(seen) == 2


def test_it_answers_a_full_run_at_once_without_wait_s() -> None:
    handle, seen = scripted(no_open_slot(slots=1, held=1))
    clock = FakeClock()
    with pytest.raises(NoOpenSlot):
        waiting_client(handle, clock).claim(12, process_id="p")
    assert len(seen) == 1 and clock.sleeps == []


def test_it_lists_runs_with_their_slots() -> None:
    run = {
        "id": 12,
        "title": "Fix login redirect",
        "state": "open",
        "lane": "rewalk",
        "work_package": {"id": 7, "key": "rewalk-1", "title": "Daily rewalk"},
        "evidence_required": ["pull_request"],
        "heartbeat_interval_s": 60,
        "grace_s": 120,
        "slots": {"total": 2, "open": 1, "held": 1, "done": 0},
        "created_at": "2030-01-01T12:00:00Z",
    }
    handle, seen = scripted(httpx.Response(200, json=[run]))
    (listed,) = make_client(handle, []).runs(lane="rewalk")
    assert (listed.id, listed.lane, listed.slots.open, listed.slots.total) == (12, "rewalk", 1, 2)
    assert listed.work_package["key"] == "rewalk-1" and listed.evidence_required == ["pull_request"]
    assert seen[0].url.path == "/api/v1/runs"
    assert dict(seen[0].url.params) == {"state": "open", "lane": "rewalk"}


def test_it_reads_a_run_in_the_flat_shape_of_the_run_answer() -> None:
    flat = {
        "id": 12,
        "work_package": 7,
        "work_package_key": "rewalk-1",
        "work_package_title": "Daily rewalk",
        "lane": "rewalk",
        "title": "Fix",
        "evidence_required": [],
        "slots": 3,
        "slots_by_state": {"open": 1, "held": 1, "done": 1},
        "heartbeat_interval_s": 60,
        "grace_s": 120,
        "state": "open",
    }
    run = Run.from_wire(flat)
    assert run.work_package == {"id": 7, "key": "rewalk-1", "title": "Daily rewalk"}
    assert (run.slots.total, run.slots.open, run.slots.held, run.slots.done) == (3, 1, 1, 1)


def test_it_reads_one_run_with_its_brief_and_plans_another_never_resent() -> None:
    answer = {
        "id": 12,
        "work_package": 7,
        "work_package_key": "rewalk-1",
        "lane": "rewalk",
        "title": "Fix",
        "brief": "Find why **login** fails.",
        "evidence_required": ["pull_request"],
        "slots": 2,
        "slots_by_state": {"open": 2, "held": 0, "done": 0},
        "heartbeat_interval_s": 60,
        "grace_s": 120,
        "state": "open",
    }
    handle, seen = scripted(
        httpx.Response(200, json=answer), httpx.Response(201, json={**answer, "id": 13})
    )
    client = make_client(handle, [])
    run = client.run(12)
    assert (run.id, run.brief, run.slots.total) == (12, "Find why **login** fails.", 2)
    planned = client.run_create(
        7, title=run.title, brief=run.brief, slots=2, evidence_required=run.evidence_required
    )
    assert planned.id == 13
    assert [(r.method, r.url.path) for r in seen] == [
        ("GET", "/api/v1/runs/12"),
        ("POST", "/api/v1/work-packages/7/runs"),
    ]
    assert json.loads(seen[1].content) == {
        "title": "Fix",
        "brief": "Find why **login** fails.",
        "slots": 2,
        "evidence_required": ["pull_request"],
    }


def test_a_run_create_whose_answer_was_lost_is_not_sent_again() -> None:
    calls = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ReadTimeout("no answer", request=request)

    with pytest.raises(ConnectionFailed):
        make_client(handle, []).run_create(7, title="again")
    assert len(calls) == 1
