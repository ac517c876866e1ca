"""A typed client for every hand and resource-lease call of the contract (and a supervisor's
schedules and GitHub integrations: `supervisor.SupervisorCalls`).

Retries: a transient failure (`errors.is_transient`: a 429, 502, 503 or 504 answer, or a
connection that failed) is retried with exponential backoff and jitter (never a 409: a denial is an
answer, not a fault). A call that is not safe to repeat (a claim: a second one would take a second
slot) is retried only when the request surely never reached the server (the connection could not
be opened, or the server itself said 503 or 429; a proxy's 502 or 504 may come after the server
acted); every other hand call is idempotent on the server (a retried finish or release answers as
the first did; a retried acquire by the holder renews and keeps the fence).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx

from groundcontrol_client.core.decisions import decided_on_primary, decision_headers
from groundcontrol_client.core.errors import (
    TRANSIENT_STATUSES,
    ConfigError,
    ConnectionFailed,
    Denied,
    GroundControlError,
    LeaseHeld,
    NoOpenSlot,
    ServerError,
    SlotTaken,
    error_from_response,
    is_transient,
)
from groundcontrol_client.core.friction import FrictionCalls
from groundcontrol_client.core.grades import Attestation, GradedEvidence
from groundcontrol_client.core.handoff_calls import HandoffCalls
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
from groundcontrol_client.core.supervisor import SupervisorCalls
from groundcontrol_client.core.waits import LongWait

__version__ = "0.1.0"
DEFAULT_TIMEOUT_S = 10.0
# The answers retried (those `errors.is_transient` calls transient), from `errors`' one table.
RETRY_STATUSES = TRANSIENT_STATUSES
# Errors raised before the request left this machine: repeating it cannot act twice.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# A proxy's answers for a server it could not reach in time: the request may have reached the
# server and been acted on, so a call that is not safe to repeat is not repeated after one.
_MAYBE_APPLIED = frozenset({502, 504})


def retryable_answer(status: int, error: GroundControlError, *, idempotent: bool) -> bool:
    """Whether a non-2xx answer is tried again (the sync and async clients share this)."""
    if not is_transient(error):
        return False
    return idempotent or status not in _MAYBE_APPLIED


# A server's Retry-After is honoured up to this; past it, the call fails and the caller decides.
MAX_RETRY_AFTER_S = 60.0
MAX_PAGES = 100


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` more tries after the first; delays double from `backoff_s` up to
    `max_backoff_s`, each drawn from the upper half of its range (jitter that keeps a floor, so
    a fleet that failed together does not come back together)."""

    retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, *, hint: float | None, rand: Callable[[], float]) -> float:
        ceiling = min(self.max_backoff_s, self.backoff_s * (2**attempt))
        delay = ceiling / 2 + rand() * ceiling / 2
        if hint is not None:
            delay = max(delay, min(hint, MAX_RETRY_AFTER_S))
        return delay


# `claim(wait_s=)` polls for an open slot: 0.5 s doubling to 5 s, jittered like the retries, so
# a fleet waiting on one run does not poll in step.
CLAIM_POLL = RetryPolicy(retries=0, backoff_s=0.5, max_backoff_s=5.0)
# Fields of a refusal that move on every poll; the rest say whether the answer changed.
_MOVING_FIELDS = ("expires_in_s", "next_expires_in_s", "lost_in_s", "server_time")


def denial_key(error: GroundControlError) -> tuple[Any, ...]:
    """What a refusal says, without the clock: two polls with the same key gave the same
    answer (the same holder at the same fence, the same counts), only later."""
    fields = sorted((k, repr(v)) for k, v in error.fields.items() if k not in _MOVING_FIELDS)
    return (error.code, *fields)


def _base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"GC_URL must be an http(s) URL, not {url!r}")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    return url + "/api/v1/"


def _retry_hint(response: httpx.Response, error: GroundControlError) -> float | None:
    hint = error.get("retry_after_s")
    if isinstance(hint, int | float) and not isinstance(hint, bool):
        return float(hint)
    header = response.headers.get("retry-after")
    try:
        return float(header) if header else None
    except ValueError:
        return None


def _env_number(
    env: Mapping[str, str], name: str, kind: type[int] | type[float], minimum: float = 0
) -> float:
    try:
        value = kind(env[name])
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError(f"{name} must be a number of at least {minimum:g}, not {env[name]!r}")
    return value


def _evidence_items(evidence: Iterable[Evidence | Mapping[str, str]]) -> list[dict[str, str]]:
    return [e.to_wire() if isinstance(e, Evidence) else dict(e) for e in evidence]


def run_plan(
    *,
    title: str,
    brief: str = "",
    slots: int = 1,
    evidence_required: Iterable[str] = (),
    heartbeat_interval_s: int | None = None,
    grace_s: int | None = None,
    evidence_grades: Mapping[str, str] | None = None,
    capabilities: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The body that plans a run (`run_create`); unset timings take the lane's."""
    return _drop_none(
        {
            "title": title,
            "brief": brief,
            "slots": slots,
            "evidence_required": list(evidence_required),
            "heartbeat_interval_s": heartbeat_interval_s,
            "grace_s": grace_s,
            "evidence_grades": dict(evidence_grades) if evidence_grades else None,
            "capabilities": list(capabilities) if capabilities is not None else None,
        }
    )


def pool_path(pool: str) -> str:
    """The acquire path of `pool`, its name quoted as one path segment."""
    return f"pools/{quote(pool, safe='')}/acquire"


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}


def renew_all_body(process_id: str, held: Iterable[tuple[str, int]] | None) -> dict[str, Any]:
    """A renew-all's body: the process, and the tenures it believes it holds (if given)."""
    body: dict[str, Any] = {"process_id": process_id}
    if held is not None:
        body["held"] = [{"resource": resource, "fence": fence} for resource, fence in held]
    return body


class Client(FrictionCalls, SupervisorCalls, HandoffCalls):
    """One hand's connection to Ground Control. Thread-safe: the runtime's heartbeat threads
    share it with the agent's own calls."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
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
        self._http = httpx.Client(
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
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> Client:
        """Configured from `GC_URL` and `GC_KEY`; optional `GC_TIMEOUT` (seconds per request)
        and `GC_RETRIES` (tries after the first on a transient failure)."""
        env = os.environ if env is None else env
        url = env.get("GC_URL", "")
        if not url:
            raise ConfigError("GC_URL is not set: the Ground Control server's URL")
        if "timeout" not in kwargs and env.get("GC_TIMEOUT"):
            kwargs["timeout"] = _env_number(env, "GC_TIMEOUT", float, minimum=0.1)
        if "retry" not in kwargs and env.get("GC_RETRIES"):
            kwargs["retry"] = RetryPolicy(retries=int(_env_number(env, "GC_RETRIES", int)))
        return cls(url, env.get("GC_KEY", ""), **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def request(self, method: str, path: str, **options: Any) -> Any:
        """Send one call (see `_send` for the options); the decoded JSON answer."""
        return self._decode(self._send(method, path, **options))

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = True,
        give_up_at: float | None = None,
        timeout: float | None = None,
        decision: bool = False,
    ) -> httpx.Response:
        """Send one call, retrying transient failures; the successful response.

        `give_up_at` (a `time.monotonic()` instant) stops retrying once the next try would start
        after it: a heartbeat that can no longer arrive in time is not worth waiting for.
        `decision`: the caller decides on the answer, which must come from the primary."""
        headers = decision_headers(headers) if decision else headers
        tries = 0
        while True:
            try:
                response = self._http.request(
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
                    # The request may have been applied; only the caller can find out.
                    raise error from exc
            else:
                if response.is_success:
                    if decision:
                        decided_on_primary(response, method, path)
                    return response
                error = error_from_response(response.status_code, self._body(response))
                if not retryable_answer(response.status_code, error, idempotent=idempotent):
                    raise error
                hint = _retry_hint(response, error)
            if tries >= self.retry.retries:
                raise error
            delay = self.retry.delay(tries, hint=hint, rand=self._rand)
            if give_up_at is not None and time.monotonic() + delay >= give_up_at:
                raise error
            self._sleep(delay)
            tries += 1

    @staticmethod
    def _body(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            return None

    @staticmethod
    def _decode(response: httpx.Response) -> Any:
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ServerError(
                f"HTTP {response.status_code} with a body that is not JSON",
                status=response.status_code,
            ) from None

    def _list(
        self, path: str, params: Mapping[str, Any] | None = None, *, decision: bool = False
    ) -> list[dict[str, Any]]:
        """Every item of a list endpoint: a JSON array per page, the next page's URL in the
        `Link: <...>; rel="next"` header."""
        items: list[dict[str, Any]] = []
        next_url: str | None = path
        for _ in range(MAX_PAGES):
            if next_url is None:
                break
            response = self._send("GET", next_url, params=params, decision=decision)
            items.extend(self._decode(response) or [])
            next_url, params = response.links.get("next", {}).get("url"), None
        return items

    # --- hand calls (scope `work`) ------------------------------------------------------------

    def me(self) -> Me:
        return Me.from_wire(self.request("GET", "me"))

    def slots(self, run_id: int, *, state: str | None = "open") -> list[Slot]:
        return [
            Slot.from_wire(s) for s in self._list(f"runs/{int(run_id)}/slots", {"state": state})
        ]

    def claim(
        self,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait_s: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> Attempt:
        """Claim the lowest open slot of the run (or `slot`).

        With `wait_s`, a refusal that says every slot is taken (`no_open_slot`, or
        `slot_taken` for `slot`) is asked again, with backoff, until a claim is granted or
        `wait_s` has passed; then the last refusal is raised. `on_wait` hears each refusal that
        says something new (another holder, other counts), not every poll. Nothing else is
        waited on: a run that is closed or done (`run_closed`) never opens, and a claim that
        may have reached the server (the answer was lost) is never sent again, since a second
        claim would take a second slot.
        """
        body = _drop_none({"process_id": process_id, "slot": slot})
        give_up_at = self._clock() + wait_s if wait_s else None
        polls = 0
        heard: tuple[Any, ...] | None = None
        while True:
            try:
                data = self.request(
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
                self._sleep(min(CLAIM_POLL.delay(polls, hint=None, rand=self._rand), remaining))
                polls += 1

    def runs(self, *, state: str | None = "open", lane: str | None = None) -> list[Run]:
        """The runs this key may see (a lane-limited key: its lane's), newest first; `state`
        is open, closed or done (None: every state)."""
        return [Run.from_wire(r) for r in self._list("runs", {"state": state, "lane": lane})]

    def run(self, run_id: int) -> Run:
        """One run: its brief, timings and how its slots stand (a `work` or `plan` key)."""
        return Run.from_wire(self.request("GET", f"runs/{int(run_id)}"))

    def run_create(self, work_package_id: int, **plan: Any) -> Run:
        """Plan a run in a work package (a `plan` key); `plan` is `run_plan`'s. Never resent:
        a create whose answer was lost may have been applied, so it raises ConnectionFailed and
        the caller looks before planning again."""
        return Run.from_wire(
            self.request(
                "POST",
                f"work-packages/{int(work_package_id)}/runs",
                json=run_plan(**plan),
                idempotent=False,
            )
        )

    def attempt(self, attempt_id: int) -> Attempt:
        return Attempt.from_wire(self.request("GET", f"attempts/{int(attempt_id)}"))

    def brief(self, attempt_id: int) -> Brief:
        return Brief.from_wire(self.request("GET", f"attempts/{int(attempt_id)}/brief"))

    def report(
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
        """A report; with the claim's `process_id` it renews the lease (`renewed`)."""
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
        data = self.request(
            "POST",
            f"attempts/{int(attempt_id)}/reports",
            json=body,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return ReportResult.from_wire(data)

    def finish(
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
        return Attempt.from_wire(
            self.request("POST", f"attempts/{int(attempt_id)}/finish", json=body)
        )

    def release(self, attempt_id: int, *, fence: int, process_id: str, reason: str) -> Attempt:
        body = {"fence": fence, "process_id": process_id, "reason": reason}
        return Attempt.from_wire(
            self.request("POST", f"attempts/{int(attempt_id)}/release", json=body)
        )

    # --- resource leases (scope `leases`) -----------------------------------------------------

    def lease_acquire(
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
        """Take `resource`, or raise `LeaseHeld` saying which lease is in the way (on the same
        name, a directory above it or a name below it), its holder, fence and window, and where
        this request stands in line. `mode="shared"` coexists with other shared leases. With
        `wait_s` (any length: the server's limit a call is `LIMITS["wait_s"]`, and a longer wait
        is several calls, each from the place in line the last one kept, `waits.LongWait`) the
        request waits in a first-come, first-served queue until the way is clear or the wait
        ends; its final denial's `ticket`, passed back as `ticket` within its `ticket_kept_s`,
        keeps its place for a later call. A lease is held by a process: this hand's lease held
        by another `process_id` is in the way too (the denial's `own_hand`), unless
        `take_over`, which moves it to this process at a new fence (the other's next renewal is
        refused `lease_lost`)."""
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
                data = self.request("POST", "leases/acquire", json=body, timeout=timeout)
            except LeaseHeld as denied:
                if not wait.again(denied):
                    raise
                continue
            return Lease.from_wire(data)

    def lease_from_pool(
        self, pool: str, *, ttl_s: float, process_id: str, wait_s: float | None = None
    ) -> Lease:
        """One free member of `pool` as a lease of its own (`member`, `resource`, `fence`), or
        `LeaseHeld` naming every member's holder and window (`members`). Renew, release and
        check it as any lease, by its `resource`. A second call by the same process renews the
        member it holds."""
        body = _drop_none({"ttl_s": ttl_s, "process_id": process_id, "wait_s": wait_s})
        timeout = self.timeout + (wait_s or 0)
        data = self.request("POST", pool_path(pool), json=body, timeout=timeout)
        return Lease.from_wire(data)

    def lease_renew(
        self,
        resource: str,
        *,
        fence: int,
        process_id: str,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> Lease:
        body = {"resource": resource, "fence": fence, "process_id": process_id}
        data = self.request(
            "POST", "leases/renew", json=body, give_up_at=give_up_at, timeout=timeout
        )
        return Lease.from_wire(data)

    def lease_renew_all(
        self,
        *,
        process_id: str,
        held: Iterable[tuple[str, int]] | None = None,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> RenewedAll:
        """Renew, in one call, every live resource lease this hand holds as `process_id`. With
        `held` (the `(resource, fence)` tenures this process believes it holds), each of them
        not renewed is in `not_renewed` with its reason (taken over by another process of the
        hand, released, broken: `lease_lost`, `stale_fence`, ...)."""
        data = self.request(
            "POST",
            "leases/renew-all",
            json=renew_all_body(process_id, held),
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return RenewedAll.from_wire(data)

    def lease_release(self, resource: str, *, fence: int, process_id: str | None = None) -> bool:
        """End the tenure `fence`; with `process_id`, only if that process holds it."""
        body: dict[str, object] = {"resource": resource, "fence": fence}
        if process_id is not None:
            body["process_id"] = process_id
        data = self.request("POST", "leases/release", json=body)
        return Released.from_wire(data).released

    def lease_check(self, resource: str, *, fence: int) -> Lease:
        """The lease if `fence` is its current, unlost tenure; else `StaleFence` or `LeaseLost`.
        Ask this right before a write that must not come from a stale holder."""
        body = {"resource": resource, "fence": fence}
        data = self.request("POST", "leases/check", json=body, decision=True)
        return Checked.from_wire(data).lease

    def leases(
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
        return [Lease.from_wire(i) for i in self._list("leases", params, decision=decision)]

    def evidence(self, attempt_id: int) -> list[GradedEvidence]:
        """The evidence an attempt left, each with its grade (hand < wrapper < ci)."""
        data = self.request("GET", f"attempts/{int(attempt_id)}/evidence")
        return [GradedEvidence.from_wire(item) for item in data]

    def attest(
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
        return Attestation.from_wire(self.request("POST", "attestations", json=body))

    def fences_verify(self, fences: Iterable[str]) -> list[FenceAnswer]:
        """Where each `<resource>@<fence>` (or `<resource>@<fence> <holder>`, as a commit's
        trailer carries it) stands (scope `verify`, `leases` or `supervise`), in the order
        given: `current`, `superseded`, `unknown` or `not_holder` (at most 500 in one call)."""
        body = {"fences": list(fences)}
        data = self.request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).fences

    def paths_verify(self, paths: Iterable[str]) -> list[PathAnswer]:
        """For files by their lease names (at most 500): the held tenures over each now, and
        whether this hand's own last tenure over it lapsed (lost or broken) while it holds none
        over it (`POST /fences/verify`, scope `verify`, `leases` or `supervise`)."""
        body = {"paths": list(paths)}
        data = self.request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).paths

    def fences_receipts(
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
        data = self.request("POST", "fences/receipts", json=body, decision=True)
        return ReceiptsRecorded.from_wire(data)

    def fences_receipts_lookup(self, repository: str, shas: Iterable[str]) -> list[StoredReceipt]:
        """The receipts on record for these commits of `repository` (at most 100; scope
        `verify`, `leases` or `supervise`), each with `signature_valid`."""
        params = {"repository": repository, "sha": list(shas)}
        data = self.request("GET", "fences/receipts", params=params, decision=True)
        return ReceiptsFound.from_wire(data).receipts
