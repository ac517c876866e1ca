"""`AsyncHand`, the asyncio twin of the runtime: the sync runtime's tests mirrored against the
fake server (heartbeats, the give-up rule, directives, how a block ends, resource leases, an
outage), a parity test that holds `AsyncClient` to `Client` request for request, and one run
against the real API on the live server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import httpx
import pytest
from groundcontrol_client import (
    AsyncClient,
    AsyncHand,
    Client,
    Evidence,
    EvidenceMissing,
    LeaseHeld,
    LeaseLost,
    LeaseUnconfirmed,
    RetryPolicy,
    StaleFence,
    StopRequested,
    Unavailable,
)

from tests.client.fakes import KEY, URL, FakeServer, error, gaps

T = TypeVar("T")
PR = "https://git.test/pr/7"
FAST = RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.02)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """On a loop of its own thread: a loop another test left running here must not matter."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=60)


def async_client(server: FakeServer, **kwargs: Any) -> AsyncClient:
    kwargs.setdefault("retry", FAST)
    return AsyncClient(URL, KEY, transport=httpx.MockTransport(server.handle), **kwargs)


async def until(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


@pytest.fixture
def server() -> FakeServer:
    return FakeServer(interval_s=0.3)


def hand_of(server: FakeServer, **kwargs: Any) -> AsyncHand:
    return AsyncHand(async_client(server), process_id="host-a:4242:1700000000", **kwargs)


def test_it_claims_heartbeats_and_finishes_with_the_attached_evidence(server: FakeServer) -> None:
    async def body() -> None:
        async with hand_of(server) as hand, hand.claim(12) as attempt:
            assert (attempt.id, attempt.fence, attempt.directive) == (41, 1, "continue")
            await asyncio.sleep(1.0)  # longer than the interval: only the task renews it
            assert not attempt.lost
            assert (await attempt.brief()).title == "Run"
            await attempt.report("halfway", percent=50)
            attempt.attach("pull_request", PR)
            attempt.summary = "fixed"
        assert attempt.ended == "finished"
        count = len(server.calls("/reports"))
        await asyncio.sleep(0.3)
        assert len(server.calls("/reports")) == count  # the task is gone

    run(body())
    heartbeats = server.calls("/reports", kind="heartbeat")
    # Kept by the task alone: from the claim on, each heartbeat came before the tenure's window
    # and grace ran out.
    kept = server.times("/claim", "/reports")
    assert len(kept) >= 2 and max(gaps(kept)) < server.interval_s + server.grace_s
    assert all(h["process_id"] == "host-a:4242:1700000000" and h["fence"] == 1 for h in heartbeats)
    assert server.calls("/finish") == [
        {
            "fence": 1,
            "process_id": "host-a:4242:1700000000",
            "evidence": [{"kind": "pull_request", "url": PR}],
            "summary": "fixed",
        }
    ]


def test_it_releases_with_the_exception_as_the_reason(server: FakeServer) -> None:
    async def body() -> None:
        with pytest.raises(ValueError, match="tests failed"):
            async with hand_of(server).claim(12):
                raise ValueError("tests failed")

    run(body())
    assert server.calls("attempts/41/release") == [
        {"fence": 1, "process_id": "host-a:4242:1700000000", "reason": "ValueError: tests failed"}
    ]
    assert server.calls("/finish") == []


def test_it_releases_when_the_finish_is_refused_and_retries_an_explicit_one(
    server: FakeServer,
) -> None:
    server.evidence_required = ["pull_request"]

    async def body() -> None:
        with pytest.raises(EvidenceMissing):
            async with hand_of(server).claim(12):
                pass
        (release,) = server.calls("attempts/41/release")
        assert release["reason"].startswith("finish refused: ")
        server.state = "live"
        server.fence = 0
        attempt = await hand_of(server).claim(12).open()
        with pytest.raises(EvidenceMissing):
            await attempt.finish([])
        count = len(server.calls("/reports", kind="heartbeat"))
        await asyncio.sleep(0.5)
        assert len(server.calls("/reports", kind="heartbeat")) > count  # still renewing
        await attempt.finish([Evidence("pull_request", PR)])
        assert attempt.ended == "finished"

    run(body())
    assert server.state == "finished"


def test_it_stops_renewing_the_moment_the_server_says_lease_lost(server: FakeServer) -> None:
    async def body() -> None:
        with pytest.raises(StaleFence):
            async with hand_of(server).claim(12) as attempt:
                server.report_answer = error(409, "stale_fence", "stale", current_fence=2)
                assert await until(lambda: attempt.lost, timeout=1.0)
                count = len(server.calls("/reports"))
                await asyncio.sleep(0.4)
                assert len(server.calls("/reports")) == count
                with pytest.raises(StaleFence):
                    await attempt.checkpoint()
                attempt.attach("pull_request", PR)

    run(body())
    assert server.calls("/finish") == []
    (release,) = server.calls("attempts/41/release")
    assert release["reason"] == "lease lost: stale"


def test_it_gives_up_when_unreachable_at_interval_plus_grace_and_releases_nothing(
    server: FakeServer,
) -> None:
    async def body() -> None:
        attempt = await hand_of(server).claim(12).open()
        server.down = True
        deadline = time.monotonic() + 5.0
        while True:
            found = attempt.lost
            checked_at = time.monotonic()
            if found:
                break
            assert checked_at < deadline, "never lost"
            await asyncio.sleep(0.005)
        # 0.3 + 0.3 - 0.06 after the last accepted send, and never before, as the sync runtime
        # (a check that found it lost and ended before the give-up point would fail here).
        tenure = attempt.tenure
        assert tenure.give_up_at - tenure.renewed_at == pytest.approx(0.3 + 0.3 - 0.06)
        assert checked_at > tenure.give_up_at
        assert attempt.lost_error is not None and attempt.lost_error.get("local") is True
        with pytest.raises(LeaseLost):  # leaving the block as if it ended without an error
            await attempt.__aexit__(None, None, None)

    run(body())
    assert server.calls("/release") == []


def test_it_exposes_the_directive_stops_on_stop_and_waits_while_paused(
    server: FakeServer,
) -> None:
    server.directive = "pause"

    async def body() -> None:
        async with hand_of(server).claim(12) as attempt:
            resumed_at: list[float] = []

            def resume() -> None:
                resumed_at.append(time.monotonic())
                server.directive = "continue"

            asyncio.get_running_loop().call_later(0.6, resume)
            await attempt.checkpoint(poll_s=0.05)
            assert attempt.directive == "continue"
            attempt.attach("pull_request", PR)
        # Paused, not stopped: the heartbeats went on the whole time, each before the tenure's
        # window and grace ran out, past the end of the pause.
        kept = server.times("/claim", "/reports")
        assert max(gaps(kept)) < server.interval_s + server.grace_s
        assert kept[-1] > resumed_at[0]
        server.state, server.fence, server.directive = "live", 0, "continue"
        with pytest.raises(StopRequested):
            async with hand_of(server).claim(12) as attempt:
                server.directive = "stop"
                assert await until(lambda: attempt.directive == "stop", timeout=1.0)
                await attempt.checkpoint()

    run(body())
    (release,) = server.calls("attempts/41/release")
    assert release["reason"].startswith("StopRequested: ")


def test_it_holds_a_resource_lease_checks_its_fence_and_hears_a_denial(
    server: FakeServer,
) -> None:
    async def body() -> None:
        hand = hand_of(server)
        # A ttl of a second leaves a loaded machine room to renew before the give-up point.
        async with hand.lease("src/auth/", ttl=1) as lease:
            await asyncio.sleep(1.8)
            assert not lease.lost
            assert (await lease.check()).fence == 1
        with pytest.raises(StaleFence):
            async with hand.lease("migrations", ttl=30) as moved:
                server.leases["migrations"]["fence"] = 2
                await moved.check()
        server.leases["src/"] = {"holder": "hand-b", "process_id": "x", "fence": 8, "ttl_s": 60}
        with pytest.raises(LeaseHeld) as raised:
            async with hand.lease("src/", ttl=60):
                pass
        assert (raised.value.get("holder"), raised.value.get("fence")) == ("hand-b", 8)

    run(body())
    # Held past its ttl by the background task alone, each window renewed before it ended (how
    # many renewals that took depends on the machine's load, so it is not counted).
    kept = server.times("/leases/acquire", "/leases/renew", resource="src/auth/")
    assert len(kept) >= 2 and max(gaps(kept)) < 1
    assert server.calls("/leases/check")[0] == {"resource": "src/auth/", "fence": 1}
    released = {"resource": "src/auth/", "fence": 1, "process_id": "host-a:4242:1700000000"}
    assert released in server.calls("/leases/release")


def test_it_fails_a_check_locally_once_given_up(server: FakeServer) -> None:
    async def body() -> None:
        lease = await hand_of(server).lease("dev-server", ttl=0.2).open()
        server.down = True
        assert await until(lambda: lease.lost, timeout=2.0)
        checks = len(server.calls("/leases/check"))
        with pytest.raises(LeaseLost):
            await lease.check()
        assert len(server.calls("/leases/check")) == checks
        await lease._stop_renewing()

    run(body())


# --- the give-up rule and an outage, on a fake clock --------------------------------------------


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def outage_hand(server: FakeServer, clock: FakeClock) -> AsyncHand:
    policy = RetryPolicy(retries=2, backoff_s=0.5, max_backoff_s=8.0)
    client = async_client(server, retry=policy, sleep=clock.sleep, clock=clock)
    # A huge fraction keeps the heartbeat task asleep: the test drives every call.
    return AsyncHand(client, process_id="p", heartbeat_fraction=1000, clock=clock)


def down_until(server: FakeServer, clock: FakeClock, until_s: float) -> None:
    server.before_answer = lambda request: setattr(server, "down", clock.now < until_s)


def test_it_keeps_the_deadline_from_the_send_time_and_gives_up_after_the_grace(
    server: FakeServer,
) -> None:
    clock = FakeClock()
    server.interval_s, server.grace_s = 10.0, 5.0

    async def body() -> None:
        attempt = await outage_hand(server, clock).claim(12).open()
        assert attempt.expires_in_s == pytest.approx(10.0)
        server.before_answer = lambda request: setattr(clock, "now", clock.now + 3.0)
        clock.now = 1005.0
        await attempt.report("halfway")
        server.before_answer = None
        assert clock.now == 1008.0 and attempt.expires_in_s == pytest.approx(7.0)
        clock.now = 1015.1
        assert not attempt.lost  # late on the server, not lost
        clock.now = 1018.4
        assert not attempt.lost
        clock.now = 1018.6
        assert attempt.lost and isinstance(attempt.lost_error, LeaseLost)
        await attempt._stop_renewing()

    run(body())


def test_it_retries_a_report_and_the_finish_through_an_outage_inside_the_grace(
    server: FakeServer,
) -> None:
    clock = FakeClock()
    server.interval_s, server.grace_s = 15.0, 15.0

    async def body() -> None:
        async with outage_hand(server, clock).claim(12) as attempt:
            down_until(server, clock, 1007.0)
            result = await attempt.report("through it")
            assert result.renewed and not attempt.lost
            assert 27.0 - 1.5 <= attempt.give_up_in_s <= 27.0 + 1e-9  # float sums
            attempt.attach("pull_request", PR)
            down_until(server, clock, clock.now + 6.0)

    run(body())
    assert len(server.calls("/reports", kind="progress")) > 3
    assert len(server.calls("/finish")) > 3
    assert server.state == "finished" and server.calls("/release") == []


def test_it_gives_up_a_report_only_at_the_give_up_point(server: FakeServer) -> None:
    clock = FakeClock()
    server.interval_s, server.grace_s = 15.0, 15.0

    async def body() -> LeaseLost:
        with pytest.raises(LeaseLost) as raised:
            async with outage_hand(server, clock).claim(12) as attempt:
                server.down = True
                await attempt.report("halfway")
        return raised.value

    lost = run(body())
    assert lost.get("local") is True and isinstance(lost.__cause__, Unavailable)
    assert clock.now == pytest.approx(1027.0, abs=0.1)
    assert server.calls("/release") == [] and server.calls("/finish") == []


def test_it_refuses_to_vouch_for_a_fence_past_the_window_of_a_lease_with_grace(
    server: FakeServer,
) -> None:
    clock = FakeClock()

    async def body() -> None:
        lease = await outage_hand(server, clock).lease("src/auth/", ttl=10).open()
        lease.tenure.grace_s = 10.0  # as a lease with a grace would be granted
        clock.now = 1010.5
        with pytest.raises(LeaseUnconfirmed):
            await lease.check()
        assert not lease.lost
        assert server.calls("/leases/check") == []
        await lease._stop_renewing()

    run(body())


# --- AsyncClient against Client ---------------------------------------------------------------

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("me", {}),
    ("slots", {"run_id": 12}),
    ("claim", {"run_id": 12, "process_id": "p", "slot": 0}),
    ("attempt", {"attempt_id": 41}),
    ("brief", {"attempt_id": 41}),
    ("report", {"attempt_id": 41, "fence": 1, "process_id": "p", "message": "m", "percent": 5}),
    ("finish", {"attempt_id": 41, "fence": 1, "process_id": "p", "evidence": [], "summary": "s"}),
    ("release", {"attempt_id": 41, "fence": 1, "process_id": "p", "reason": "r"}),
    ("lease_acquire", {"resource": "src/", "ttl_s": 30, "process_id": "p", "wait_s": 2}),
    ("lease_renew", {"resource": "src/", "fence": 1, "process_id": "p"}),
    ("lease_check", {"resource": "src/", "fence": 1}),
    ("lease_release", {"resource": "src/", "fence": 1}),
    ("leases", {"prefix": "src/"}),
    ("leases", {"covering": ["src/a.py"]}),
    ("leases", {"holder": "hand-a", "decision": True}),
    ("runs", {"state": "open"}),
]


def sent(server: FakeServer) -> list[tuple[str, str, dict[str, Any], str, str | None]]:
    return [
        (m, str(r.url), b, r.headers["user-agent"], r.headers.get("x-gc-decision"))
        for (m, _, b), r in server.raw
    ]


ME = {"hand": "hand-a", "workspace": "acme", "scopes": ["work"], "key_prefix": "abc123"}


def record_requests(server: FakeServer) -> None:
    """Keep each request as sent; answer the calls the fake has no route for (`me`, an
    attempt) and hold a lease on `src/`, so that every call of the table reads an answer."""
    server.raw = []  # type: ignore[attr-defined]
    server.leases["src/"] = {"holder": "hand-a", "process_id": "p", "fence": 1, "ttl_s": 30}
    handle = server.handle

    def keep(request: httpx.Request) -> httpx.Response:
        route = request.url.path.removeprefix("/api/v1/")
        if route == "me":
            server.record(request.method, request.url.path, {})
            response = httpx.Response(200, json=ME)
        elif (request.method, route) == ("GET", "attempts/41"):
            server.record(request.method, request.url.path, {})
            response = httpx.Response(200, json=server.attempt())
        else:
            response = handle(request)
        server.raw.append((server.requests[-1], request))  # type: ignore[attr-defined]
        return response

    server.handle = keep  # type: ignore[method-assign]


@pytest.mark.parametrize(("name", "kwargs"), CALLS, ids=[name for name, _ in CALLS])
def test_the_async_client_sends_what_the_client_sends_and_reads_the_same(
    name: str, kwargs: dict[str, Any]
) -> None:
    answers: dict[str, Any] = {}
    requests = {}
    for kind in ("sync", "async"):
        server = FakeServer()
        record_requests(server)
        if kind == "sync":
            answers[kind] = getattr(server.client(), name)(**kwargs)
        else:

            async def call(server: FakeServer = server) -> Any:
                client = async_client(server)
                try:
                    method: Callable[..., Awaitable[Any]] = getattr(client, name)
                    return await method(**kwargs)
                finally:
                    await client.aclose()

            answers[kind] = run(call())
        requests[kind] = sent(server)
    assert requests["async"] == requests["sync"]
    assert answers["async"] == answers["sync"]


# --- against the real API ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_claims_heartbeats_through_long_work_and_finishes_on_the_live_server(gc: Any) -> None:
    from evidence.models import Evidence as EvidenceRecord
    from fleet.models import AttemptEnd
    from tests.client.conftest import (
        INTERVAL_S,
        PR_URL,
        assert_heartbeats_kept_the_claim,
        attempts_of,
    )

    record_run = gc.run()

    async def body() -> None:
        async with AsyncHand(AsyncClient(gc.url, gc.key_a), process_id="host-a:1:1") as hand:
            async with hand.claim(record_run.pk) as attempt:
                await asyncio.sleep(3 * INTERVAL_S)  # past interval + grace: the task renews
                assert not attempt.lost
                assert (await attempt.brief()).evidence_required == ["pull_request"]
                await attempt.report("halfway", percent=50)
                attempt.attach("pull_request", PR_URL)

    run(body())
    (record,) = attempts_of(record_run)
    assert record.end == AttemptEnd.FINISHED
    assert EvidenceRecord.objects.filter(attempt=record, kind="pull_request").count() == 1
    assert_heartbeats_kept_the_claim(record, for_s=1.5 * INTERVAL_S)


def gateway_until(server: FakeServer, clock: FakeClock, until_s: float, status: int) -> None:
    server.before_answer = lambda request: setattr(
        server, "gateway", status if clock.now < until_s else None
    )


@pytest.mark.parametrize("status", [502, 504])
def test_it_rides_out_a_proxys_gateway_errors_like_the_sync_runtime(
    server: FakeServer, status: int
) -> None:
    """AsyncHand shares the rule: a 502 or 504 is transient, retried up to the give-up point,
    and never releases the slot."""
    clock = FakeClock()
    server.interval_s, server.grace_s = 15.0, 15.0

    async def body() -> None:
        async with outage_hand(server, clock).claim(12) as attempt:
            gateway_until(server, clock, 1003.0, status)
            assert (await attempt.report("through it")).renewed and not attempt.lost
            attempt.attach("pull_request", PR)
            gateway_until(server, clock, clock.now + 3.0, status)

    run(body())
    assert len(server.calls("/reports", kind="progress")) > 1
    assert len(server.calls("/finish")) > 1
    assert server.state == "finished" and server.calls("/release") == []


def test_the_async_client_reads_a_run_and_plans_one_as_the_client_does() -> None:
    answer = {"id": 12, "title": "Fix", "brief": "b", "slots": 1, "state": "open"}
    seen: dict[str, list[tuple[str, str, bytes]]] = {}

    def answering(kind: str) -> httpx.MockTransport:
        seen[kind] = []

        def handle(request: httpx.Request) -> httpx.Response:
            seen[kind].append((request.method, request.url.path, request.content))
            return httpx.Response(200 if request.method == "GET" else 201, json=answer)

        return httpx.MockTransport(handle)

    sync = Client(URL, KEY, transport=answering("sync"), retry=FAST)
    plan = {"title": "Fix", "brief": "b", "grace_s": 30}
    expected = (sync.run(12), sync.run_create(7, **plan))

    async def calls() -> tuple[Any, Any]:
        def handle(request: httpx.Request) -> httpx.Response:
            seen.setdefault("async", []).append((request.method, request.url.path, request.content))
            return httpx.Response(200 if request.method == "GET" else 201, json=answer)

        client = AsyncClient(URL, KEY, retry=FAST, transport=httpx.MockTransport(handle))
        try:
            return await client.run(12), await client.run_create(7, **plan)
        finally:
            await client.aclose()

    assert run(calls()) == expected
    assert seen["async"] == seen["sync"]
