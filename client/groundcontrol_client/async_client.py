"""`AsyncClient`: the asyncio twin of `Client`, on `httpx.AsyncClient`, for `AsyncHand`.

The same calls, the same bodies and the same answers as `Client` (a parity test holds the two
together), with the same retry rules, backoff, claim polling and error mapping, taken from
`client.py`; only the sending awaits. `give_up_at` is an instant of `clock` (the monotonic clock
unless a test gives another).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from groundcontrol_client.client import (
    _NOT_SENT,
    CLAIM_POLL,
    DEFAULT_TIMEOUT_S,
    MAX_PAGES,
    Client,
    RetryPolicy,
    __version__,
    _base_url,
    _drop_none,
    _env_number,
    _evidence_items,
    _retry_hint,
    denial_key,
    pool_path,
    renew_all_body,
    retryable_answer,
    run_plan,
)
from groundcontrol_client.core.decisions import decided_on_primary, decision_headers
from groundcontrol_client.core.errors import (
    ConfigError,
    ConnectionFailed,
    Denied,
    GroundControlError,
    LeaseHeld,
    NoOpenSlot,
    SlotTaken,
    error_from_response,
)
from groundcontrol_client.core.friction import AsyncFrictionCalls
from groundcontrol_client.core.grades import Attestation, GradedEvidence
from groundcontrol_client.core.loop import cost_fields
from groundcontrol_client.core.models import (
    Attempt,
    Brief,
    Checked,
    Evidence,
    FenceAnswer,
    FencesVerified,
    Lease,
    Me,
    PathAnswer,
    ReceiptsFound,
    ReceiptsRecorded,
    Released,
    RenewedAll,
    ReportResult,
    Run,
    Slot,
    StoredReceipt,
)
from groundcontrol_client.core.waits import LongWait


class AsyncClient(AsyncFrictionCalls):
    """One hand's connection to Ground Control, for asyncio. Safe to share between the tasks
    of one event loop (the runtime's heartbeat tasks share it with the agent's own calls)."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not key:
            raise ConfigError("GC_KEY is not set: a hand needs its own key")
        self.url = _base_url(url)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rand = rand
        self._clock = clock
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={
                "Authorization": f"Bearer {key}",
                "User-Agent": f"groundcontrol-client/{__version__}",
                "Accept": "application/json",
            },
            timeout=timeout,
            transport=transport,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> AsyncClient:
        """Configured like `Client.from_env`: `GC_URL`, `GC_KEY`, `GC_TIMEOUT`, `GC_RETRIES`."""
        env = os.environ if env is None else env
        url = env.get("GC_URL", "")
        if not url:
            raise ConfigError("GC_URL is not set: the Ground Control server's URL")
        if "timeout" not in kwargs and env.get("GC_TIMEOUT"):
            kwargs["timeout"] = _env_number(env, "GC_TIMEOUT", float, minimum=0.1)
        if "retry" not in kwargs and env.get("GC_RETRIES"):
            kwargs["retry"] = RetryPolicy(retries=int(_env_number(env, "GC_RETRIES", int)))
        return cls(url, env.get("GC_KEY", ""), **kwargs)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- transport: `Client._send`'s rules, awaited ----------------------------------------------

    async def request(self, method: str, path: str, **options: Any) -> Any:
        return Client._decode(await self._send(method, path, **options))

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool = True,
        give_up_at: float | None = None,
        timeout: float | None = None,
        decision: bool = False,
    ) -> httpx.Response:
        headers = decision_headers(None) if decision else None
        tries = 0
        while True:
            try:
                response = await self._http.request(
                    method,
                    path,
                    json=json,
                    params=_drop_none(dict(params)) if params else None,
                    headers=headers,
                    timeout=timeout if timeout is not None else self.timeout,
                )
            except httpx.TransportError as exc:
                error: GroundControlError = ConnectionFailed(
                    f"{method} {path} failed: {type(exc).__name__}: {exc or 'no answer'}"
                )
                hint = None
                if not idempotent and not isinstance(exc, _NOT_SENT):
                    raise error from exc
            else:
                if response.is_success:
                    if decision:
                        decided_on_primary(response, method, path)
                    return response
                error = error_from_response(response.status_code, Client._body(response))
                if not retryable_answer(response.status_code, error, idempotent=idempotent):
                    raise error
                hint = _retry_hint(response, error)
            if tries >= self.retry.retries:
                raise error
            delay = self.retry.delay(tries, hint=hint, rand=self._rand)
            if give_up_at is not None and self._clock() + delay >= give_up_at:
                raise error
            await self._sleep(delay)
            tries += 1

    async def _list(
        self, path: str, params: Mapping[str, Any] | None = None, *, decision: bool = False
    ) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        next_url: str | None = path
        for _ in range(MAX_PAGES):
            if next_url is None:
                break
            response = await self._send("GET", next_url, params=params, decision=decision)
            items.extend(Client._decode(response) or [])
            next_url, params = response.links.get("next", {}).get("url"), None
        return items

    # --- hand calls (scope `work`) ------------------------------------------------------------

    async def me(self) -> Me:
        return Me.from_wire(await self.request("GET", "me"))

    async def slots(self, run_id: int, *, state: str | None = "open") -> list[Slot]:
        items = await self._list(f"runs/{int(run_id)}/slots", {"state": state})
        return [Slot.from_wire(s) for s in items]

    async def claim(
        self,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait_s: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> Attempt:
        """As `Client.claim`: with `wait_s`, polls while every slot is taken."""
        body = _drop_none({"process_id": process_id, "slot": slot})
        give_up_at = self._clock() + wait_s if wait_s else None
        polls = 0
        heard: tuple[Any, ...] | None = None
        while True:
            try:
                data = await self.request(
                    "POST", f"runs/{int(run_id)}/claim", json=body, idempotent=False
                )
                return Attempt.from_wire(data)
            except (NoOpenSlot, SlotTaken) as denied:
                remaining = give_up_at - self._clock() if give_up_at is not None else 0.0
                if remaining <= 0:
                    raise
                if on_wait is not None and denial_key(denied) != heard:
                    heard = denial_key(denied)
                    on_wait(denied)
                delay = CLAIM_POLL.delay(polls, hint=None, rand=self._rand)
                await self._sleep(min(delay, remaining))
                polls += 1

    async def runs(self, *, state: str | None = "open", lane: str | None = None) -> list[Run]:
        items = await self._list("runs", {"state": state, "lane": lane})
        return [Run.from_wire(r) for r in items]

    async def run(self, run_id: int) -> Run:
        return Run.from_wire(await self.request("GET", f"runs/{int(run_id)}"))

    async def run_create(self, work_package_id: int, **plan: Any) -> Run:
        """As `Client.run_create`: never resent."""
        answer = await self.request(
            "POST",
            f"work-packages/{int(work_package_id)}/runs",
            json=run_plan(**plan),
            idempotent=False,
        )
        return Run.from_wire(answer)

    async def attempt(self, attempt_id: int) -> Attempt:
        return Attempt.from_wire(await self.request("GET", f"attempts/{int(attempt_id)}"))

    async def brief(self, attempt_id: int) -> Brief:
        return Brief.from_wire(await self.request("GET", f"attempts/{int(attempt_id)}/brief"))

    async def report(
        self,
        attempt_id: int,
        *,
        fence: int,
        kind: str = "heartbeat",
        process_id: str | None = None,
        message: str | None = None,
        percent: float | None = None,
        details: Mapping[str, Any] | None = None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        cost_usd: Decimal | str | float | None = None,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> ReportResult:
        body = _drop_none(
            {
                "fence": fence,
                "process_id": process_id,
                "kind": kind,
                "message": message,
                "percent": percent,
                "details": dict(details) if details is not None else None,
                **cost_fields(tokens_in, tokens_out, cost_usd),
            }
        )
        data = await self.request(
            "POST",
            f"attempts/{int(attempt_id)}/reports",
            json=body,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return ReportResult.from_wire(data)

    async def finish(
        self,
        attempt_id: int,
        *,
        fence: int,
        process_id: str,
        evidence: Iterable[Evidence | Mapping[str, str]],
        summary: str | None = None,
        observed_by: str | None = None,
    ) -> Attempt:
        """`observed_by="wrapper"`: the caller ran the command and read its evidence (the
        server takes the client's word); None: the hand's word."""
        body = _drop_none(
            {
                "fence": fence,
                "process_id": process_id,
                "evidence": _evidence_items(evidence),
                "summary": summary,
                "observed_by": observed_by,
            }
        )
        data = await self.request("POST", f"attempts/{int(attempt_id)}/finish", json=body)
        return Attempt.from_wire(data)

    async def release(
        self, attempt_id: int, *, fence: int, process_id: str, reason: str
    ) -> Attempt:
        body = {"fence": fence, "process_id": process_id, "reason": reason}
        data = await self.request("POST", f"attempts/{int(attempt_id)}/release", json=body)
        return Attempt.from_wire(data)

    # --- resource leases (scope `leases`) -----------------------------------------------------

    async def lease_acquire(
        self,
        resource: str,
        *,
        ttl_s: float,
        process_id: str,
        wait_s: float | None = None,
        mode: str | None = None,
        take_over: bool = False,
        ticket: int | None = None,
    ) -> Lease:
        """As `Client.lease_acquire`."""
        wait = LongWait(wait_s, ticket)
        while True:
            body = _drop_none(
                {
                    "resource": resource,
                    "ttl_s": ttl_s,
                    "process_id": process_id,
                    "mode": mode,
                    "take_over": True if take_over else None,
                    **wait.asked(),
                }
            )
            timeout = self.timeout + wait.call_s
            try:
                data = await self.request("POST", "leases/acquire", json=body, timeout=timeout)
            except LeaseHeld as denied:
                if not wait.again(denied):
                    raise
                continue
            return Lease.from_wire(data)

    async def lease_from_pool(
        self, pool: str, *, ttl_s: float, process_id: str, wait_s: float | None = None
    ) -> Lease:
        """As `Client.lease_from_pool`."""
        body = _drop_none({"ttl_s": ttl_s, "process_id": process_id, "wait_s": wait_s})
        timeout = self.timeout + (wait_s or 0)
        data = await self.request("POST", pool_path(pool), json=body, timeout=timeout)
        return Lease.from_wire(data)

    async def lease_renew(
        self,
        resource: str,
        *,
        fence: int,
        process_id: str,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> Lease:
        body = {"resource": resource, "fence": fence, "process_id": process_id}
        data = await self.request(
            "POST", "leases/renew", json=body, give_up_at=give_up_at, timeout=timeout
        )
        return Lease.from_wire(data)

    async def lease_renew_all(
        self,
        *,
        process_id: str,
        held: Iterable[tuple[str, int]] | None = None,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> RenewedAll:
        """As `Client.lease_renew_all`."""
        data = await self.request(
            "POST",
            "leases/renew-all",
            json=renew_all_body(process_id, held),
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return RenewedAll.from_wire(data)

    async def lease_release(
        self, resource: str, *, fence: int, process_id: str | None = None
    ) -> bool:
        body: dict[str, object] = {"resource": resource, "fence": fence}
        if process_id is not None:
            body["process_id"] = process_id
        data = await self.request("POST", "leases/release", json=body)
        return Released.from_wire(data).released

    async def lease_check(self, resource: str, *, fence: int) -> Lease:
        body = {"resource": resource, "fence": fence}
        data = await self.request("POST", "leases/check", json=body, decision=True)
        return Checked.from_wire(data).lease

    async def leases(
        self,
        *,
        prefix: str | None = None,
        holder: str | None = None,
        state: str | None = None,
        covering: Iterable[str] | None = None,
        decision: bool = False,
    ) -> list[Lease]:
        """The workspace's resource leases; `covering`: only those on these names or a directory
        above one (at most 100 names). A covering read is a decision, as is any with `decision`:
        the primary must answer it (else `DecisionFromReplica`)."""
        params: dict[str, Any] = {"prefix": prefix, "holder": holder, "state": state}
        if covering is not None:
            params["covering"], decision = list(covering), True
        items = await self._list("leases", params, decision=decision)
        return [Lease.from_wire(item) for item in items]

    async def evidence(self, attempt_id: int) -> list[GradedEvidence]:
        """The evidence an attempt left, each with its grade (hand < wrapper < ci)."""
        data = await self.request("GET", f"attempts/{int(attempt_id)}/evidence")
        return [GradedEvidence.from_wire(item) for item in data]

    async def attest(
        self,
        url: str,
        *,
        result: str,
        kind: str | None = None,
        note: str | None = None,
        observed_at: datetime | str | None = None,
    ) -> Attestation:
        """CI's word (scope `attest`): it observed `url` (a commit or pull request) `result`
        pass or fail at `observed_at` (default: now; a URL's attestations are ordered by it).
        A pass grades one attempt's evidence with that URL `ci` (of the key's lane when the
        key is lane-limited); never the key's own hand's (`attest_own_evidence`). The same
        observation again changes nothing (`duplicate`)."""
        when = observed_at.isoformat() if isinstance(observed_at, datetime) else observed_at
        body = _drop_none(
            {"url": url, "result": result, "kind": kind, "note": note, "observed_at": when}
        )
        return Attestation.from_wire(await self.request("POST", "attestations", json=body))

    async def fences_verify(self, fences: Iterable[str]) -> list[FenceAnswer]:
        """Where each `<resource>@<fence>` (or `<resource>@<fence> <holder>`, as a commit's
        trailer carries it) stands (scope `verify`, `leases` or `supervise`), in the order
        given: `current`, `superseded`, `unknown` or `not_holder` (at most 500 in one call)."""
        body = {"fences": list(fences)}
        data = await self.request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).fences

    async def paths_verify(self, paths: Iterable[str]) -> list[PathAnswer]:
        """For files by their lease names (at most 500): the held tenures over each now, and
        whether this hand's own last tenure over it lapsed (lost or broken) while it holds none
        over it (`POST /fences/verify`, scope `verify`, `leases` or `supervise`)."""
        body = {"paths": list(paths)}
        data = await self.request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).paths

    async def fences_receipts(
        self,
        repository: str,
        commits: Iterable[Mapping[str, Any]],
        *,
        process_id: str | None = None,
    ) -> ReceiptsRecorded:
        """Judge a push's commits now and record a signed receipt of each (scope `leases`): each
        commit `{sha, fences, paths}` (its trailers, and the files it touches by their lease
        names), at most 100 commits and 2,000 fences and paths in one call. A commit is accepted
        when every fence is current and this hand's, and no path is under another hand's
        tenure or this hand's own lapsed one; an accepted receipt is final (a re-push answers
        with it, `duplicate`)."""
        body = _drop_none(
            {"repository": repository, "process_id": process_id, "commits": list(commits)}
        )
        data = await self.request("POST", "fences/receipts", json=body, decision=True)
        return ReceiptsRecorded.from_wire(data)

    async def fences_receipts_lookup(
        self, repository: str, shas: Iterable[str]
    ) -> list[StoredReceipt]:
        """The receipts on record for these commits of `repository` (at most 100; scope
        `verify`, `leases` or `supervise`), each with `signature_valid`."""
        params = {"repository": repository, "sha": list(shas)}
        data = await self.request("GET", "fences/receipts", params=params, decision=True)
        return ReceiptsFound.from_wire(data).receipts
