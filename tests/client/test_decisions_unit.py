"""A decision reads the primary (issue 30, item 8): the client marks every call it decides on
(`X-GC-Decision`: which leases cover a path, the fence check, fences/verify, a session's own
leases) and refuses such an answer that says it came from a read replica
(`X-GC-Read-From: replica`), sync and async, once (a replica's answer is not retried into a
decision), and `gctl git pre-commit` refuses the commit on it. A list that is not a decision may
still come from a replica."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from groundcontrol_client import (
    AsyncClient,
    Client,
    DecisionFromReplica,
    RetryPolicy,
    ServerError,
    cli,
)
from groundcontrol_client.core.decisions import DECISION_HEADER, READ_FROM_HEADER

from apikit import reads
from tests.client.fakes import KEY, URL

LEASE = {
    "resource": "src/",
    "holder": "hand-a",
    "process_id": "p",
    "fence": 1,
    "state": "live",
    "ttl_s": 60,
    "expires_in_s": 59.0,
}
ANSWERS: dict[str, Any] = {
    "leases": [LEASE],
    "leases/check": {"valid": True, "lease": LEASE},
    "fences/verify": {
        "all_current": True,
        "fences": [{"fence": "src/@1", "resource": "src/", "fence_number": 1, "status": "current"}],
    },
    "me": {"hand": "hand-b", "workspace": "acme", "scopes": ["leases"], "key_prefix": "abc"},
}

# Each call a client decides on, as (name, keyword arguments).
DECISIONS: list[tuple[str, dict[str, Any]]] = [
    ("leases", {"covering": ["src/a.py"]}),
    ("leases", {"holder": "hand-a", "decision": True}),
    ("lease_check", {"resource": "src/", "fence": 1}),
    ("fences_verify", {"fences": ["src/@1"]}),
]
IDS = ["covering", "marked list", "check", "verify"]


def answering(read_from: str | None) -> tuple[Callable[[httpx.Request], httpx.Response], list]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        headers = {READ_FROM_HEADER: read_from} if read_from is not None else {}
        route = request.url.path.removeprefix("/api/v1/")
        return httpx.Response(200, json=ANSWERS[route], headers=headers)

    return handle, seen


def sync_call(handle: Callable[..., httpx.Response], name: str, kwargs: dict[str, Any]) -> Any:
    transport = httpx.MockTransport(handle)
    with Client(
        URL, KEY, transport=transport, retry=RetryPolicy(retries=3), sleep=lambda s: None
    ) as c:
        return getattr(c, name)(**kwargs)


def async_call(handle: Callable[..., httpx.Response], name: str, kwargs: dict[str, Any]) -> Any:
    async def call() -> Any:
        async def no_sleep(seconds: float) -> None:
            return None

        transport = httpx.MockTransport(handle)
        async with AsyncClient(
            URL, KEY, transport=transport, retry=RetryPolicy(retries=3), sleep=no_sleep
        ) as c:
            return await getattr(c, name)(**kwargs)

    return asyncio.run(call())


CALLERS = pytest.mark.parametrize("caller", [sync_call, async_call], ids=["sync", "async"])


@CALLERS
@pytest.mark.parametrize(("name", "kwargs"), DECISIONS, ids=IDS)
def test_it_refuses_a_decision_answered_from_a_replica(
    caller: Callable[..., Any], name: str, kwargs: dict[str, Any]
) -> None:
    handle, seen = answering("replica")
    with pytest.raises(DecisionFromReplica) as raised:
        caller(handle, name, kwargs)
    error = raised.value
    assert isinstance(error, ServerError)
    assert error.code == "decision_from_replica"
    assert "answered from a read replica (X-GC-Read-From: replica)" in str(error)
    assert "nothing was decided on it" in str(error)
    assert "?" not in error.message  # the path, without the names it asked about
    assert len(seen) == 1  # asked once: the same server would answer the same way
    assert seen[0].headers[DECISION_HEADER] == "1"


@CALLERS
@pytest.mark.parametrize("read_from", ["primary", None], ids=["primary", "unsaid"])
@pytest.mark.parametrize(("name", "kwargs"), DECISIONS, ids=IDS)
def test_it_takes_a_decision_answered_from_the_primary(
    caller: Callable[..., Any], name: str, kwargs: dict[str, Any], read_from: str | None
) -> None:
    handle, seen = answering(read_from)
    assert caller(handle, name, kwargs)
    assert [request.headers[DECISION_HEADER] for request in seen] == ["1"]


@CALLERS
@pytest.mark.parametrize("source", ["Replica", " replica ", "standby", ""])
def test_anything_but_the_primary_is_refused(caller: Callable[..., Any], source: str) -> None:
    handle, _ = answering(source)
    with pytest.raises(DecisionFromReplica):
        caller(handle, "leases", {"covering": ["src/a.py"]})


@CALLERS
def test_a_list_that_is_no_decision_may_come_from_a_replica(caller: Callable[..., Any]) -> None:
    handle, seen = answering("replica")
    (lease,) = caller(handle, "leases", {"prefix": "src/"})
    assert lease.holder == "hand-a"
    assert DECISION_HEADER not in seen[0].headers


def test_every_page_of_a_decision_is_marked_and_checked() -> None:
    """A list longer than a page: each page is asked as a decision, and a later page from a
    replica is refused as the first would be."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if "cursor" not in request.url.params:
            link = f'<{URL}/api/v1/leases?covering=src%2Fa.py&cursor=2>; rel="next"'
            return httpx.Response(200, json=[LEASE], headers={"Link": link})
        return httpx.Response(200, json=[LEASE], headers={READ_FROM_HEADER: "replica"})

    with pytest.raises(DecisionFromReplica):
        sync_call(handle, "leases", {"covering": ["src/a.py"]})
    assert [request.headers.get(DECISION_HEADER) for request in seen] == ["1", "1"]


def test_the_client_and_the_server_name_the_same_headers() -> None:
    assert (DECISION_HEADER, READ_FROM_HEADER) == (reads.DECISION_HEADER, reads.READ_FROM_HEADER)


def test_gctl_pre_commit_refuses_the_commit_on_a_replicas_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x\n")
    subprocess.run(["git", "add", "src/a.py"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    handle, seen = answering("replica")

    def from_env(env: Any = None, **kwargs: Any) -> Client:
        return Client(URL, KEY, transport=httpx.MockTransport(handle), retry=RetryPolicy(0))

    monkeypatch.setattr(Client, "from_env", from_env)
    assert cli.main(["git", "pre-commit"]) != 0
    err = capsys.readouterr().err
    assert "answered from a read replica" in err and "(decision_from_replica)" in err
    assert [r.url.path for r in seen] == ["/api/v1/me", "/api/v1/leases"]
