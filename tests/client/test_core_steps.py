"""The client's core without a shell: a call is the steps it yields (requests, pauses, locks),
answered here by hand, with no network and no clock but the test's; and what the two shells
share by running the same steps (an error inside a lock raised where the lock was taken, a
handoff request heard on a renewal, sync and async alike)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any

import httpx
import pytest
from groundcontrol_client import AsyncClient, AsyncHand, ConnectionFailed, Hand, RetryPolicy
from groundcontrol_client.core.calls import Calls
from groundcontrol_client.core.errors import LeaseHeld, Unavailable
from groundcontrol_client.core.steps import Exclusive, Send, Sleep

from tests.client.fakes import KEY, URL, FakeServer, error

REQUEST = httpx.Request("POST", URL)


def calls(**kwargs: Any) -> Calls:
    kwargs.setdefault("retry", RetryPolicy(retries=2, backoff_s=1.0, max_backoff_s=4.0))
    return Calls(URL, KEY, rand=lambda: 0.0, clock=lambda: 100.0, **kwargs)


def test_a_claim_is_one_request_whose_lost_answer_is_never_sent_again() -> None:
    steps = Calls.claim.steps(calls(), 12, process_id="p")
    sent = next(steps)
    assert sent == Send(
        "POST", "runs/12/claim", json={"process_id": "p"}, params=None, headers=None, timeout=10.0
    )
    # The connection could not be opened: surely never applied, so tried again after a pause.
    assert steps.send(httpx.ConnectError("refused", request=REQUEST)) == Sleep(0.5)
    assert steps.send(None) == sent
    # The answer was lost on the way back: it may have been applied, so it is not resent.
    with pytest.raises(ConnectionFailed, match="ReadTimeout"):
        steps.send(httpx.ReadTimeout("no answer", request=REQUEST))


def test_a_server_that_says_when_to_come_back_is_waited_for_that_long() -> None:
    steps = Calls.lease_renew.steps(calls(), "src/", fence=3, process_id="p")
    next(steps)
    busy = error(503, "unavailable", "down for a moment", retry_after_s=3)
    assert steps.send(busy) == Sleep(3.0)
    assert steps.send(None).url == "leases/renew"
    renewed = {"resource": "src/", "fence": 3, "holder": "a", "state": "live", "ttl_s": 30}
    with pytest.raises(StopIteration) as done:
        steps.send(httpx.Response(200, json=renewed))
    assert done.value.value.fence == 3


def test_a_retry_that_would_start_after_the_give_up_point_is_not_made() -> None:
    steps = Calls.lease_renew.steps(calls(), "src/", fence=3, process_id="p", give_up_at=100.4)
    next(steps)
    with pytest.raises(Unavailable):
        steps.send(error(503, "unavailable", "down"))  # the next try would start at 100.5


def test_a_denial_is_an_answer_not_a_fault_and_is_never_retried() -> None:
    steps = Calls.lease_acquire.steps(calls(), "src/", ttl_s=30, process_id="p")
    next(steps)
    with pytest.raises(LeaseHeld):
        steps.send(error(409, "lease_held", "held", holder="b", fence=2, resource="src/"))


class Boom(Exception):
    pass


def inner() -> Generator[Any, Any, None]:
    yield Sleep(0)
    raise Boom


def outer(lock: Any, seen: list[str]) -> Generator[Any, Any, str]:
    try:
        yield Exclusive(lock, inner())
    except Boom:
        seen.append("raised where the lock was taken")
    return "went on"


def test_an_error_in_a_lock_is_raised_where_it_was_taken_and_the_lock_is_let_go() -> None:
    seen: list[str] = []
    lock = threading.Lock()
    client = FakeServer().client(sleep=lambda s: None)
    assert client.perform(outer(lock, seen)) == "went on"
    assert seen and not lock.locked()

    async def run_async() -> str:
        lock = asyncio.Lock()
        transport = httpx.MockTransport(lambda request: httpx.Response(200))
        async with AsyncClient(URL, KEY, transport=transport) as shell:
            answer = await shell.perform(outer(lock, seen))
        assert not lock.locked()
        return answer

    assert asyncio.run(run_async()) == "went on" and len(seen) == 2


@pytest.mark.parametrize("shell", ["sync", "async"])
def test_both_runtimes_tell_the_holder_of_a_handoff_request_once(shell: str) -> None:
    server = FakeServer(interval_s=0.3, grace_s=0.3)
    server.handoff_requests = [
        {"id": 7, "from": "hand-b", "resource": "run/12/slot/0", "reason": "the login bug"}
    ]
    expected = [
        "hand hand-b asks for `run/12/slot/0`: release when you can (the login bug; request 7)"
    ]
    retry = RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.02)

    def heard(lines: list[str], attempt: Any) -> bool:
        lines.extend(attempt.handoffs.take())
        return bool(lines)

    if shell == "sync":
        lines: list[str] = []
        with Hand(server.client(retry=retry), process_id="p").claim(12) as attempt:
            deadline = time.monotonic() + 10
            while not heard(lines, attempt) and time.monotonic() < deadline:
                time.sleep(0.02)
            renewals = len(server.calls("/reports", kind="heartbeat"))
            while len(server.calls("/reports", kind="heartbeat")) < renewals + 2:
                time.sleep(0.02)  # two heartbeats more show the same request
            heard(lines, attempt)
    else:

        async def hold() -> list[str]:
            lines: list[str] = []
            transport = httpx.MockTransport(server.handle)
            async with AsyncClient(URL, KEY, transport=transport, retry=retry) as client:
                async with AsyncHand(client, process_id="p").claim(12) as attempt:
                    deadline = time.monotonic() + 10
                    while not heard(lines, attempt) and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    renewals = len(server.calls("/reports", kind="heartbeat"))
                    while len(server.calls("/reports", kind="heartbeat")) < renewals + 2:
                        await asyncio.sleep(0.02)
                    heard(lines, attempt)
            return lines

        lines = asyncio.run(hold())
    assert lines == expected
    assert server.state == "finished"
