"""The runtime against a fake server: the heartbeat thread, the tenure's clock on the monotonic
clock (the give-up rule at its boundaries, retries through an outage), directives, and how a
`with` block ends (finish with evidence, or release with the reason)."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from groundcontrol_client import (
    Client,
    Evidence,
    EvidenceMissing,
    Hand,
    LeaseHeld,
    LeaseLost,
    RetryPolicy,
    StaleFence,
    StopRequested,
    Unavailable,
)
from groundcontrol_client.core.tenure import (
    HEARTBEAT_FRACTION,
    LeaseUnconfirmed,
    TenureClock,
    renewal_period,
    safety_margin,
)
from groundcontrol_client.mcp.server import Session, build_server
from mcp import Client as McpClient
from mcp.types import CallToolResult

from tests.client.fakes import KEY, URL, FakeServer, error, gaps


def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def lost_when_checked(lost: Callable[[], bool], timeout: float = 5.0) -> float:
    """The monotonic instant just after the first check that found the tenure lost: a loss
    found by a check that ended before the give-up point came too early, however slow the
    machine (a late check only makes the instant later)."""
    deadline = time.monotonic() + timeout
    while True:
        found = lost()
        checked_at = time.monotonic()
        if found:
            return checked_at
        assert checked_at < deadline, "never lost"
        time.sleep(0.005)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer(interval_s=0.3)


@pytest.fixture
def hand(server: FakeServer) -> Hand:
    return Hand(server.client(), process_id="host-a:4242:1700000000")


def test_it_claims_heartbeats_and_finishes_with_the_attached_evidence(
    server: FakeServer, hand: Hand
) -> None:
    with hand.claim(12) as attempt:
        assert (attempt.id, attempt.fence, attempt.directive) == (41, 1, "continue")
        # Work longer than the interval: only the heartbeat thread keeps the lease.
        time.sleep(1.0)
        assert not attempt.lost
        attempt.attach("pull_request", "https://git.test/pr/7")
        attempt.summary = "fixed"
    heartbeats = server.calls("/reports", kind="heartbeat")
    # Kept by the heartbeat thread alone: from the claim on, each heartbeat came before the
    # tenure's window and grace ran out.
    kept = server.times("/claim", "/reports")
    assert len(kept) >= 2 and max(gaps(kept)) < server.interval_s + server.grace_s
    assert all(h["process_id"] == "host-a:4242:1700000000" and h["fence"] == 1 for h in heartbeats)
    assert server.calls("/finish") == [
        {
            "fence": 1,
            "process_id": "host-a:4242:1700000000",
            "evidence": [{"kind": "pull_request", "url": "https://git.test/pr/7"}],
            "summary": "fixed",
        }
    ]
    assert attempt.ended == "finished" and server.state == "finished"
    # The thread is gone: no heartbeat after the finish.
    count = len(server.calls("/reports"))
    time.sleep(0.3)
    assert len(server.calls("/reports")) == count
    assert not attempt.lost


def test_it_heartbeats_at_a_safe_fraction_of_the_interval(server: FakeServer, hand: Hand) -> None:
    # Every 0.1 s for an interval of 0.3 s: three renewals per interval, not one.
    assert renewal_period(server.interval_s, HEARTBEAT_FRACTION) == pytest.approx(0.1)
    with hand.claim(12) as attempt:
        time.sleep(0.95)
        attempt.attach("pull_request", "https://git.test/pr/7")
    # Never sooner than that period (a loaded machine makes them later, never more), and each
    # before the tenure's window and grace ran out.
    assert len(server.calls("/reports", kind="heartbeat")) <= 10
    kept = server.times("/claim", "/reports")
    assert len(kept) >= 2 and max(gaps(kept)) < server.interval_s + server.grace_s


def test_it_releases_with_the_exception_as_the_reason(server: FakeServer, hand: Hand) -> None:
    with pytest.raises(ValueError, match="tests failed"), hand.claim(12) as attempt:
        raise ValueError("tests failed")
    assert server.calls("attempts/41/release") == [
        {"fence": 1, "process_id": "host-a:4242:1700000000", "reason": "ValueError: tests failed"}
    ]
    assert server.calls("/finish") == []
    assert attempt.ended == "released"


def test_it_releases_when_the_finish_is_refused_for_missing_evidence(
    server: FakeServer, hand: Hand
) -> None:
    server.evidence_required = ["pull_request"]
    with pytest.raises(EvidenceMissing) as raised, hand.claim(12):
        pass
    assert raised.value.get("missing") == ["pull_request"]
    (release,) = server.calls("attempts/41/release")
    assert release["reason"].startswith("finish refused: ")


def test_it_keeps_heartbeating_after_a_refused_finish_so_it_can_try_again(
    server: FakeServer, hand: Hand
) -> None:
    server.evidence_required = ["pull_request"]
    attempt = hand.claim(12).open()
    with pytest.raises(EvidenceMissing):
        attempt.finish([])
    count = len(server.calls("/reports", kind="heartbeat"))
    time.sleep(0.5)
    assert len(server.calls("/reports", kind="heartbeat")) > count
    assert not attempt.lost
    attempt.finish([Evidence("pull_request", "https://git.test/pr/7")])
    assert attempt.ended == "finished" and server.state == "finished"


def test_it_stops_the_heartbeats_when_the_block_is_left_whatever_happened(
    server: FakeServer, hand: Hand
) -> None:
    with pytest.raises(KeyboardInterrupt), hand.claim(12):
        server.down = True  # the release on the way out cannot get through
        raise KeyboardInterrupt
    server.down = False
    count = len(server.requests)
    time.sleep(0.4)
    assert len(server.requests) == count


def test_it_stops_renewing_the_moment_the_server_says_lease_lost(
    server: FakeServer, hand: Hand
) -> None:
    attempt = hand.claim(12).open()
    assert wait_until(lambda: len(server.calls("/reports")) >= 1)
    server.report_answer = error(409, "lease_lost", "attempt 41 has lost its slot lease")
    assert wait_until(lambda: attempt.lost, timeout=1.0)
    assert isinstance(attempt.lost_error, LeaseLost)
    assert attempt.lost_error.message == "attempt 41 has lost its slot lease"
    count = len(server.calls("/reports"))
    time.sleep(0.4)
    assert len(server.calls("/reports")) == count
    with pytest.raises(LeaseLost):
        attempt.checkpoint()


def test_it_reports_a_lost_lease_on_exit_and_never_finishes_it(
    server: FakeServer, hand: Hand
) -> None:
    with pytest.raises(StaleFence), hand.claim(12) as attempt:
        server.report_answer = error(409, "stale_fence", "stale", current_fence=2)
        assert wait_until(lambda: attempt.lost, timeout=1.0)
        attempt.attach("pull_request", "https://git.test/pr/7")
    assert isinstance(attempt.lost_error, StaleFence)
    assert server.calls("/finish") == []
    (release,) = server.calls("attempts/41/release")
    assert release["reason"] == "lease lost: stale"


def test_it_reports_the_lease_lost_when_the_server_is_unreachable_past_the_deadline(
    server: FakeServer, hand: Hand
) -> None:
    attempt = hand.claim(12).open()
    server.down = True
    assert not attempt.lost
    checked_at = lost_when_checked(lambda: attempt.lost)
    # Lost at the last accepted send time + interval 0.3 s + grace 0.3 s - margin 0.06 s, and
    # never before: retrying through the window and the grace, and giving up before the server
    # would call it lost (the instants are the runtime's own monotonic clock, not a stopwatch's).
    tenure = attempt.tenure
    assert tenure.give_up_at - tenure.renewed_at == pytest.approx(0.3 + 0.3 - 0.06)
    assert checked_at > tenure.give_up_at
    error = attempt.lost_error
    assert isinstance(error, LeaseLost) and error.get("local") is True
    server.down = False
    # Lost is final: a server that answers again does not bring the tenure back.
    time.sleep(0.3)
    assert attempt.lost


def test_it_keeps_the_deadline_from_the_send_time_on_the_monotonic_clock(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    server.interval_s, server.grace_s = 10.0, 5.0
    # A huge fraction keeps the background thread asleep: the test drives every renewal.
    hand = Hand(server.client(), process_id="p", heartbeat_fraction=1000)
    attempt = hand.claim(12).open()
    assert attempt.expires_in_s == pytest.approx(10.0)

    def slow_answer(request: httpx.Request) -> None:
        now[0] += 3.0  # the report takes 3 s to come back

    server.before_answer = slow_answer
    now[0] = 1005.0
    attempt.report("halfway", percent=50)
    server.before_answer = None
    # Sent at 1005, answered at 1008: the deadline is 1005 + 10, not 1008 + 10.
    assert now[0] == 1008.0
    assert attempt.expires_in_s == pytest.approx(7.0)
    now[0] = 1014.9
    assert not attempt.lost
    # Past the window the server sees it late, not lost: the client gives up only at
    # 1005 + interval 10 + grace 5 - margin 1.5 (a tenth of both).
    now[0] = 1015.1
    assert not attempt.lost
    assert attempt.give_up_in_s == pytest.approx(3.4)
    now[0] = 1018.4
    assert not attempt.lost
    now[0] = 1018.6
    assert attempt.lost
    assert isinstance(attempt.lost_error, LeaseLost)
    attempt._stop_renewing()


def test_it_exposes_the_directive_and_stops_on_stop(server: FakeServer, hand: Hand) -> None:
    with pytest.raises(StopRequested), hand.claim(12) as attempt:
        attempt.checkpoint()  # continue: returns at once
        server.directive = "stop"
        assert wait_until(lambda: attempt.directive == "stop", timeout=1.0)
        attempt.checkpoint()
    (release,) = server.calls("attempts/41/release")
    assert release["reason"].startswith("StopRequested: ")


def test_it_waits_in_checkpoint_while_paused_and_keeps_heartbeating(
    server: FakeServer, hand: Hand
) -> None:
    server.directive = "pause"
    with hand.claim(12) as attempt:
        assert attempt.directive == "pause"

        resumed_at: list[float] = []

        def resume_later() -> None:
            time.sleep(0.6)
            resumed_at.append(time.monotonic())
            server.directive = "continue"

        threading.Thread(target=resume_later, daemon=True).start()
        attempt.checkpoint(poll_s=0.05)
        assert attempt.directive == "continue"
        attempt.attach("pull_request", "https://git.test/pr/7")
    # Paused, not stopped: the heartbeats went on the whole time, each before the tenure's
    # window and grace ran out, past the end of the pause.
    kept = server.times("/claim", "/reports")
    assert max(gaps(kept)) < server.interval_s + server.grace_s and kept[-1] > resumed_at[0]
    assert server.state == "finished"


def test_it_refuses_to_finish_a_lost_attempt(server: FakeServer, hand: Hand) -> None:
    attempt = hand.claim(12).open()
    server.down = True
    assert wait_until(lambda: attempt.lost, timeout=2.0)
    server.down = False
    with pytest.raises(LeaseLost):
        attempt.finish([Evidence("pull_request", "https://git.test/pr/7")])
    assert server.calls("/finish") == []


def test_it_holds_a_resource_lease_with_its_fence(server: FakeServer, hand: Hand) -> None:
    # Renewed every third of the ttl; a ttl of a second leaves a loaded machine room to renew
    # before the give-up point (ttl less its margin).
    with hand.lease("src/auth/", ttl=1) as lease:
        assert lease.fence == 1
        time.sleep(1.8)
        assert not lease.lost
        assert lease.check().fence == 1
    # Held past its ttl by the renewals alone, each window renewed before it ended (how many
    # renewals that took depends on the machine's load, so it is not counted).
    kept = server.times("/leases/acquire", "/leases/renew", resource="src/auth/")
    assert len(kept) >= 2 and max(gaps(kept)) < 1
    renewals = server.calls("/leases/renew")
    assert all(
        r == {"resource": "src/auth/", "fence": 1, "process_id": hand.process_id} for r in renewals
    )
    assert server.calls("/leases/check") == [{"resource": "src/auth/", "fence": 1}]
    assert server.calls("/leases/release") == [
        {"resource": "src/auth/", "fence": 1, "process_id": hand.process_id}
    ]


def test_it_fails_a_fenced_check_after_the_lease_moved_on(server: FakeServer, hand: Hand) -> None:
    with pytest.raises(StaleFence), hand.lease("migrations", ttl=30) as lease:
        server.leases["migrations"]["fence"] = 2  # a supervisor broke it; someone took it
        with pytest.raises(StaleFence) as raised:
            lease.check()
        assert raised.value.get("current_fence") == 2
        assert lease.lost
    # The release on exit is refused too; the body's own work was already refused.


def test_it_fails_a_check_locally_once_the_deadline_passed(server: FakeServer, hand: Hand) -> None:
    lease = hand.lease("dev-server", ttl=0.2).open()
    server.down = True
    assert wait_until(lambda: lease.lost, timeout=2.0)
    checks = len(server.calls("/leases/check"))
    with pytest.raises(LeaseLost):
        lease.check()
    # Refused without asking the server: a stale holder must not write, reachable or not.
    assert len(server.calls("/leases/check")) == checks


def test_it_raises_the_denial_with_who_holds_it(server: FakeServer, hand: Hand) -> None:
    server.leases["src/"] = {"holder": "hand-b", "process_id": "x", "fence": 8, "ttl_s": 60}
    with pytest.raises(LeaseHeld) as raised, hand.lease("src/", ttl=60):
        pass
    assert (raised.value.get("holder"), raised.value.get("fence")) == ("hand-b", 8)
    assert server.calls("/leases/renew") == []


# --- the give-up rule, at its boundaries, on a fake monotonic clock ----------------------------


class FakeClock:
    """A monotonic clock that moves only when told to (or when something sleeps on it)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("interval", "grace", "margin"),
    [
        (15, 15, 3.0),  # the case: given up 27 s after the last renewal was sent
        (1, 1, 0.2),
        (0.3, 0.3, 0.06),
        (60, 0, 5.0),  # a resource lease (no grace): a tenth would be 6 s, the cap is 5 s
        (120, 240, 5.0),
        (10, 0, 1.0),
    ],
)
def test_it_gives_up_at_interval_plus_grace_less_a_margin(
    interval: float, grace: float, margin: float
) -> None:
    clock = FakeClock()
    tenure = TenureClock(clock=clock)
    tenure.start(sent_at=1000.0, interval_s=interval, grace_s=grace)
    assert safety_margin(interval, grace) == pytest.approx(margin)
    assert tenure.give_up_at == pytest.approx(1000.0 + interval + grace - margin)
    assert tenure.window_ends_at == pytest.approx(1000.0 + interval)
    clock.now = tenure.give_up_at
    assert not tenure.lost  # at the instant itself: still held
    clock.now = tenure.give_up_at + 1e-6
    assert tenure.lost
    assert isinstance(tenure.lost_error, LeaseLost) and tenure.lost_error.get("local") is True


def test_it_counts_from_the_latest_accepted_send_time_and_lost_is_final() -> None:
    clock = FakeClock()
    tenure = TenureClock(clock=clock)
    tenure.start(sent_at=1000.0, interval_s=10, grace_s=10)
    tenure.accepted(1006.0)
    tenure.accepted(1003.0)  # an older renewal answered late moves nothing back
    assert tenure.give_up_at == pytest.approx(1006.0 + 18.0)
    clock.now = 1024.1
    assert tenure.lost
    tenure.accepted(1024.0)  # a renewal that got through after all does not revive it
    assert tenure.lost and tenure.give_up_at == pytest.approx(1024.0)


def test_it_refuses_to_vouch_for_a_fence_past_the_window_but_keeps_the_tenure() -> None:
    clock = FakeClock()
    tenure = TenureClock(clock=clock)
    tenure.start(sent_at=1000.0, interval_s=10, grace_s=10)
    clock.now = 1010.0
    tenure.raise_unless_vouched("src/auth/")  # the window's last instant: still vouched for
    clock.now = 1010.001
    with pytest.raises(LeaseUnconfirmed) as raised:
        tenure.raise_unless_vouched("src/auth/")
    assert isinstance(raised.value, Unavailable) and raised.value.get("local") is True
    assert raised.value.get("give_up_in_s") == pytest.approx(7.999)
    assert not tenure.lost  # late on the server, not lost: nobody else can take it yet
    tenure.accepted(1010.001)
    tenure.raise_unless_vouched("src/auth/")
    clock.now = 1028.002
    with pytest.raises(LeaseLost):
        tenure.raise_unless_vouched("src/auth/")


def test_it_never_gives_up_a_closed_tenure_and_bounds_waits_by_the_give_up_point() -> None:
    clock = FakeClock()
    tenure = TenureClock(clock=clock)
    tenure.start(sent_at=1000.0, interval_s=10, grace_s=10)
    clock.now = 1017.0
    assert tenure.retry_delay(8.0) == pytest.approx(1.0)
    assert tenure.timeout_s(10.0) == pytest.approx(1.0)
    assert tenure.retry_delay(0.5) == pytest.approx(0.5)
    clock.now = 1030.0
    assert tenure.timeout_s(10.0) == pytest.approx(0.05)  # a last try still gets a moment
    tenure.close()
    assert not tenure.lost


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The fake clock as `time.monotonic` (the runtime's tenure clock reads it; the client is
    given it, `outage_hand`) and the sleep of the client and the runtime; the heartbeat thread
    is kept asleep by a huge fraction."""
    fake = FakeClock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


def outage_hand(server: FakeServer, clock: FakeClock) -> Hand:
    client = server.client(
        retry=RetryPolicy(retries=2, backoff_s=0.5, max_backoff_s=8.0),
        sleep=clock.sleep,
        clock=clock,
    )
    return Hand(client, process_id="p", heartbeat_fraction=1000)


def down_until(server: FakeServer, clock: FakeClock, until: float) -> None:
    """The server cannot be reached until the fake clock reaches `until`."""

    def answer(request: httpx.Request) -> None:
        server.down = clock.now < until

    server.before_answer = answer


def test_it_retries_a_report_through_an_outage_inside_the_grace(
    server: FakeServer, clock: FakeClock
) -> None:
    server.interval_s, server.grace_s = 15.0, 15.0  # the numbers
    attempt = outage_hand(server, clock).claim(12).open()
    down_until(server, clock, 1000.0 + 7.0)  # a 7 s outage from the claim on
    result = attempt.report("halfway", percent=50)
    assert result.renewed and not attempt.lost
    # Far more tries than the client's own three, each delay drawn from a doubling range.
    tries = server.calls("/reports", kind="progress")
    assert len(tries) > 3
    assert 1007.0 <= clock.now < 1007.0 + 8.0
    # The accepted call's start is the new renewal (given up 27 s after it): the client's own
    # retries inside that call (at most 0.5 + 1 s here) only make the client more cautious.
    assert 27.0 - 1.5 <= attempt.give_up_in_s <= 27.0 + 1e-9  # float sums
    attempt.attach("pull_request", "https://git.test/pr/7")
    attempt.finish()
    assert server.state == "finished"
    attempt._stop_renewing()


def test_it_gives_up_a_report_only_at_the_give_up_point_and_releases_nothing(
    server: FakeServer, clock: FakeClock
) -> None:
    server.interval_s, server.grace_s = 15.0, 15.0
    hand = outage_hand(server, clock)
    with pytest.raises(LeaseLost) as raised, hand.claim(12) as attempt:
        server.down = True
        attempt.report("halfway")
    assert raised.value.get("local") is True
    assert isinstance(raised.value.__cause__, Unavailable)
    # Retried until the claim's send time + 15 + 15 - 3, and not a moment beyond it.
    assert clock.now == pytest.approx(1027.0, abs=0.1)
    assert len(server.calls("/reports", kind="progress")) > 5
    # A failed connection released nothing, finished nothing: the server ends it by itself.
    assert server.calls("/release") == [] and server.calls("/finish") == []
    assert server.state == "live"


def test_it_retries_the_finish_through_an_outage(server: FakeServer, clock: FakeClock) -> None:
    server.interval_s, server.grace_s = 15.0, 15.0
    with outage_hand(server, clock).claim(12) as attempt:
        attempt.attach("pull_request", "https://git.test/pr/7")
        down_until(server, clock, 1000.0 + 6.0)
    assert server.state == "finished" and attempt.ended == "finished"
    assert len(server.calls("/finish")) > 3
    assert server.calls("/release") == []


def test_it_rides_out_a_real_outage_shorter_than_interval_plus_grace(hand: Hand) -> None:
    server = FakeServer(interval_s=0.3, grace_s=1.5)
    hand = Hand(server.client(), process_id="host-a:4242:1700000000")
    with hand.claim(12) as attempt:
        time.sleep(0.2)
        server.down = True
        time.sleep(1.0)  # past the 0.3 s window, inside interval + grace - margin (1.62 s)
        assert not attempt.lost
        attempt.checkpoint()  # the work goes on
        failed = len(server.calls("/reports", kind="heartbeat"))
        server.down = False
        assert wait_until(lambda: attempt.expires_in_s > 0, timeout=1.0)
        attempt.attach("pull_request", "https://git.test/pr/7")
    # The heartbeats kept trying faster than their 0.1 s period, and the attempt finished.
    assert failed > 10
    assert server.state == "finished" and not attempt.lost


def test_the_mcp_session_rides_out_an_outage_with_the_same_rule() -> None:
    """`gctl mcp` holds its claims with this runtime: a report made through a brief outage is
    answered once the server is back, and the claim is still the session's."""
    server = FakeServer(interval_s=0.3, grace_s=1.5)
    session = Session(server.client(), process_id="mcp-1")

    async def talk() -> tuple[CallToolResult, CallToolResult, CallToolResult]:
        async with McpClient(build_server(session)) as client:
            claimed = await client.call_tool("claim", {"run_id": 12})
            server.down = True

            def back_on_the_fourth_try(request: Any) -> None:  # counted, not timed
                if len(server.calls("/reports", kind="progress")) >= 4:
                    server.down = False

            server.before_answer = back_on_the_fourth_try
            reported = await client.call_tool("report_progress", {"message": "through it"})
            status = await client.call_tool("status", {})
        return claimed, reported, status

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        claimed, reported, status = pool.submit(anyio.run, talk).result(timeout=30)
    try:
        assert not claimed.is_error and not reported.is_error, reported
        assert len(server.calls("/reports", kind="progress")) > 3  # retried, then answered
        assert "NOTICE" not in _text(status) and "attempt 41" in _text(status)
    finally:
        session.close()
    assert server.state == "released"


def _text(result: CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


# --- a reverse proxy's 502 / 504 while the server restarts: transient, like a failed connection -


def gateway_until(server: FakeServer, clock: FakeClock, until: float, status: int) -> None:
    """Every call meets the proxy's `status` page until the fake clock reaches `until`."""

    def answer(request: httpx.Request) -> None:
        server.gateway = status if clock.now < until else None

    server.before_answer = answer


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_report_and_the_finish_ride_out_a_proxys_gateway_errors(
    server: FakeServer, clock: FakeClock, status: int
) -> None:
    server.interval_s, server.grace_s = 15.0, 15.0
    with outage_hand(server, clock).claim(12) as attempt:
        gateway_until(server, clock, 1000.0 + 7.0, status)
        assert attempt.report("halfway", percent=50).renewed and not attempt.lost
        attempt.attach("pull_request", "https://git.test/pr/7")
        gateway_until(server, clock, clock.now + 6.0, status)
    assert len(server.calls("/reports", kind="progress")) > 3
    assert len(server.calls("/finish")) > 3
    assert server.state == "finished" and server.calls("/release") == []


def test_a_proxys_gateway_errors_past_the_give_up_point_release_nothing(
    server: FakeServer, clock: FakeClock
) -> None:
    server.interval_s, server.grace_s = 15.0, 15.0
    with pytest.raises(LeaseLost) as raised, outage_hand(server, clock).claim(12) as attempt:
        server.gateway = 502
        attempt.report("halfway")
    assert raised.value.get("local") is True
    assert clock.now == pytest.approx(1027.0, abs=0.1)
    assert server.calls("/release") == [] and server.calls("/finish") == []


def test_the_heartbeats_ride_out_a_proxys_gateway_errors() -> None:
    server = FakeServer(interval_s=0.3, grace_s=1.5)
    hand = Hand(server.client(), process_id="host-a:4242:1700000000")
    with hand.claim(12) as attempt:
        time.sleep(0.2)
        server.gateway = 504
        time.sleep(1.0)  # past the window, inside interval + grace - margin
        assert not attempt.lost
        server.gateway = None
        assert wait_until(lambda: attempt.expires_in_s > 0, timeout=1.0)
        attempt.attach("pull_request", "https://git.test/pr/7")
    assert server.state == "finished" and server.calls("/release") == []


def test_the_mcp_session_rides_out_a_proxys_gateway_errors() -> None:
    """`gctl mcp`: a report and a finish that meet a 502 are answered once the proxy reaches
    the server again, and nothing is released because of it."""
    server = FakeServer(interval_s=0.3, grace_s=1.5)
    session = Session(server.client(), process_id="mcp-1")

    def outage(path_end: str, kind: str | None = None) -> None:
        """502 until the call ending in `path_end` has been tried twice (counted, not timed)."""
        server.gateway = 502
        before = len(server.calls(path_end, kind))

        def back(request: Any) -> None:
            if len(server.calls(path_end, kind)) >= before + 2:
                server.gateway = None

        server.before_answer = back

    async def talk() -> list[CallToolResult]:
        async with McpClient(build_server(session)) as client:
            answers = [await client.call_tool("claim", {"run_id": 12})]
            outage("/reports", "progress")
            answers.append(await client.call_tool("report_progress", {"message": "through it"}))
            outage("/finish")
            evidence = [{"kind": "pull_request", "url": "https://git.test/pr/7"}]
            answers.append(await client.call_tool("finish", {"evidence": evidence}))
        return answers

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        answers = pool.submit(anyio.run, talk).result(timeout=30)
    session.close()
    assert [a.is_error for a in answers] == [False, False, False], [_text(a) for a in answers]
    assert server.state == "finished" and server.calls("/release") == []
    assert len(server.calls("/finish")) > 1


def proxied_hand(server: FakeServer, clock: FakeClock, bad_until: float, status: int) -> Hand:
    """A hand behind a reverse proxy that answers `status` with an HTML page (as nginx or a
    cloud load balancer does while the app server restarts) until the fake clock reaches
    `bad_until`, for reports and finishes; every other call reaches the fake."""

    def handle(request: httpx.Request) -> httpx.Response:
        if clock.now < bad_until and request.url.path.endswith(("/reports", "/finish")):
            server.record(request.method, request.url.path, {})
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
    return Hand(client, process_id="p", heartbeat_fraction=1000)


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
