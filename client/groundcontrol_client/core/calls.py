"""Every call of the contract a client makes, written once as steps (`core.steps`): the hand's
calls, resource leases, fences and evidence here, a supervisor's schedules and integrations, the
handoffs and friction reports in their mixins. `Client` and `AsyncClient` (`groundcontrol_client
.http`) are these calls with a way to send."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from groundcontrol_client.core.costs import CostReport, ReportVoided
from groundcontrol_client.core.errors import (
    Denied,
    GroundControlError,
    LeaseHeld,
    NoOpenSlot,
    SlotTaken,
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
from groundcontrol_client.core.sending import RetryPolicy, drop_none
from groundcontrol_client.core.steps import Sleep, Steps, call
from groundcontrol_client.core.supervisor import SupervisorCalls
from groundcontrol_client.core.waits import LongWait

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
    progress_timeout_s: int | None = None,
    idle_directive: str | None = None,
    priority: int | None = None,
    depends_on: Iterable[int] | None = None,
) -> dict[str, Any]:
    """The body that plans a run (`run_create`); unset timings take the lane's. `priority`:
    0 first in the ready queue (the server's default 2); `depends_on`: the runs whose end its
    slots wait for (ids of runs the key can see)."""
    return drop_none(
        {
            "title": title,
            "brief": brief,
            "slots": slots,
            "evidence_required": list(evidence_required),
            "heartbeat_interval_s": heartbeat_interval_s,
            "grace_s": grace_s,
            "evidence_grades": dict(evidence_grades) if evidence_grades else None,
            "capabilities": list(capabilities) if capabilities is not None else None,
            "progress_timeout_s": progress_timeout_s,
            "idle_directive": idle_directive,
            "priority": priority,
            "depends_on": [int(run) for run in depends_on] if depends_on is not None else None,
        }
    )


def pool_path(pool: str) -> str:
    """The acquire path of `pool`, its name quoted as one path segment."""
    return f"pools/{quote(pool, safe='')}/acquire"


def renew_all_body(process_id: str, held: Iterable[tuple[str, int]] | None) -> dict[str, Any]:
    """A renew-all's body: the process, and the tenures it believes it holds (if given)."""
    body: dict[str, Any] = {"process_id": process_id}
    if held is not None:
        body["held"] = [{"resource": resource, "fence": fence} for resource, fence in held]
    return body


class Calls(FrictionCalls, SupervisorCalls, HandoffCalls):
    """One hand's calls; a shell (`Client`, `AsyncClient`) sends them."""

    # --- hand calls (scope `work`) ------------------------------------------------------------

    @call
    def me(self) -> Steps[Me]:
        data = yield from self._request("GET", "me")
        return Me.from_wire(data)

    @call
    def slots(self, run_id: int, *, state: str | None = "open") -> Steps[list[Slot]]:
        items = yield from self._list(f"runs/{int(run_id)}/slots", {"state": state})
        return [Slot.from_wire(s) for s in items]

    @call
    def claim(
        self,
        run_id: int,
        *,
        process_id: str,
        slot: int | None = None,
        wait_s: float | None = None,
        on_wait: Callable[[Denied], None] | None = None,
    ) -> Steps[Attempt]:
        """Claim the lowest open slot of the run (or `slot`).

        With `wait_s`, a refusal that says every slot is taken (`no_open_slot`, or
        `slot_taken` for `slot`) is asked again, with backoff, until a claim is granted or
        `wait_s` has passed; then the last refusal is raised. `on_wait` hears each refusal that
        says something new (another holder, other counts), not every poll. Nothing else is
        waited on: a run that is closed or done (`run_closed`) never opens, and a claim that
        may have reached the server (the answer was lost) is never sent again, since a second
        claim would take a second slot.
        """
        body = drop_none({"process_id": process_id, "slot": slot})
        give_up_at = self._clock() + wait_s if wait_s else None
        polls = 0
        heard: tuple[Any, ...] | None = None
        while True:
            try:
                data = yield from self._request(
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
                yield Sleep(min(CLAIM_POLL.delay(polls, hint=None, rand=self._rand), remaining))
                polls += 1

    @call
    def runs(
        self, *, state: str | None = "open", lane: str | None = None, ready: bool = False
    ) -> Steps[list[Run]]:
        """The runs this key may see (a lane-limited key: its lane's), newest first; `state`
        is open, closed or done (None: every state). `ready`: the ready queue instead, the open
        runs that wait for nothing and have an open slot, by priority (0 first), then oldest."""
        params = {"state": state, "lane": lane, "ready": "true" if ready else None}
        items = yield from self._list("runs", params)
        return [Run.from_wire(r) for r in items]

    @call
    def run(self, run_id: int) -> Steps[Run]:
        """One run: its brief, timings and how its slots stand (a `work` or `plan` key)."""
        data = yield from self._request("GET", f"runs/{int(run_id)}")
        return Run.from_wire(data)

    @call
    def run_create(self, work_package_id: int, **plan: Any) -> Steps[Run]:
        """Plan a run in a work package (a `plan` key); `plan` is `run_plan`'s. Never resent:
        a create whose answer was lost may have been applied, so it raises ConnectionFailed and
        the caller looks before planning again."""
        data = yield from self._request(
            "POST",
            f"work-packages/{int(work_package_id)}/runs",
            json=run_plan(**plan),
            idempotent=False,
        )
        return Run.from_wire(data)

    @call
    def attempt(self, attempt_id: int) -> Steps[Attempt]:
        data = yield from self._request("GET", f"attempts/{int(attempt_id)}")
        return Attempt.from_wire(data)

    @call
    def brief(self, attempt_id: int) -> Steps[Brief]:
        data = yield from self._request("GET", f"attempts/{int(attempt_id)}/brief")
        return Brief.from_wire(data)

    @call
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
        checkpoint: Any = None,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> Steps[ReportResult]:
        """A report; with the claim's `process_id` it renews the lease (`renewed`).
        `checkpoint`: where the work stands, any JSON value (None: none), at most the
        `checkpoint_bytes` limit as compact JSON; the next attempt on the slot reads the last
        one (`Attempt.checkpoint`)."""
        body = drop_none(
            {
                "fence": fence,
                "process_id": process_id,
                "kind": kind,
                "message": message,
                "percent": percent,
                "details": dict(details) if details is not None else None,
                "checkpoint": checkpoint,
                **cost_fields(tokens_in, tokens_out, cost_usd),
            }
        )
        data = yield from self._request(
            "POST",
            f"attempts/{int(attempt_id)}/reports",
            json=body,
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return ReportResult.from_wire(data)

    @call
    def cost_reports(
        self,
        *,
        lane: str | None = None,
        run_id: int | None = None,
        attempt_id: int | None = None,
    ) -> Steps[list[CostReport]]:
        """The costed reports (a `plan` or `supervise` key; voided ones too), newest first."""
        params = drop_none(
            {
                "lane": lane,
                "run": None if run_id is None else int(run_id),
                "attempt": None if attempt_id is None else int(attempt_id),
            }
        )
        items = yield from self._list("costs/reports", params)
        return [CostReport.from_wire(item) for item in items]

    @call
    def report_void(self, report_id: int, *, reason: str) -> Steps[ReportVoided]:
        """Void a costed report's cost (a `supervise` key): no total or budget counts it from
        now on, and a budget hit it caused is lifted (`lifted`: those budgets). Safe to repeat:
        a repeat changes nothing and answers the first void (`voided` false)."""
        data = yield from self._request(
            "POST", f"costs/reports/{int(report_id)}/void", json={"reason": reason}
        )
        return ReportVoided.from_wire(data)

    @call
    def finish(
        self,
        attempt_id: int,
        *,
        fence: int,
        process_id: str,
        evidence: Iterable[Evidence | Mapping[str, str]],
        summary: str | None = None,
        observed_by: str | None = None,
    ) -> Steps[Attempt]:
        """`observed_by="wrapper"`: the caller ran the command and read its evidence (the
        server takes the client's word); None: the hand's word."""
        body = drop_none(
            {
                "fence": fence,
                "process_id": process_id,
                "evidence": _evidence_items(evidence),
                "summary": summary,
                "observed_by": observed_by,
            }
        )
        data = yield from self._request("POST", f"attempts/{int(attempt_id)}/finish", json=body)
        return Attempt.from_wire(data)

    @call
    def release(
        self, attempt_id: int, *, fence: int, process_id: str, reason: str
    ) -> Steps[Attempt]:
        body = {"fence": fence, "process_id": process_id, "reason": reason}
        data = yield from self._request("POST", f"attempts/{int(attempt_id)}/release", json=body)
        return Attempt.from_wire(data)

    # --- resource leases (scope `leases`) -----------------------------------------------------

    @call
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
    ) -> Steps[Lease]:
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
            body = drop_none(
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
                data = yield from self._request(
                    "POST", "leases/acquire", json=body, timeout=timeout
                )
            except LeaseHeld as denied:
                if not wait.again(denied):
                    raise
                continue
            return Lease.from_wire(data)

    @call
    def lease_from_pool(
        self, pool: str, *, ttl_s: float, process_id: str, wait_s: float | None = None
    ) -> Steps[Lease]:
        """One free member of `pool` as a lease of its own (`member`, `resource`, `fence`), or
        `LeaseHeld` naming every member's holder and window (`members`). Renew, release and
        check it as any lease, by its `resource`. A second call by the same process renews the
        member it holds."""
        body = drop_none({"ttl_s": ttl_s, "process_id": process_id, "wait_s": wait_s})
        timeout = self.timeout + (wait_s or 0)
        data = yield from self._request("POST", pool_path(pool), json=body, timeout=timeout)
        return Lease.from_wire(data)

    @call
    def lease_renew(
        self,
        resource: str,
        *,
        fence: int,
        process_id: str,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> Steps[Lease]:
        body = {"resource": resource, "fence": fence, "process_id": process_id}
        data = yield from self._request(
            "POST", "leases/renew", json=body, give_up_at=give_up_at, timeout=timeout
        )
        return Lease.from_wire(data)

    @call
    def lease_renew_all(
        self,
        *,
        process_id: str,
        held: Iterable[tuple[str, int]] | None = None,
        give_up_at: float | None = None,
        timeout: float | None = None,
    ) -> Steps[RenewedAll]:
        """Renew, in one call, every live resource lease this hand holds as `process_id`. With
        `held` (the `(resource, fence)` tenures this process believes it holds), each of them
        not renewed is in `not_renewed` with its reason (taken over by another process of the
        hand, released, broken: `lease_lost`, `stale_fence`, ...)."""
        data = yield from self._request(
            "POST",
            "leases/renew-all",
            json=renew_all_body(process_id, held),
            give_up_at=give_up_at,
            timeout=timeout,
        )
        return RenewedAll.from_wire(data)

    @call
    def lease_release(
        self, resource: str, *, fence: int, process_id: str | None = None
    ) -> Steps[bool]:
        """End the tenure `fence`; with `process_id`, only if that process holds it."""
        body: dict[str, object] = {"resource": resource, "fence": fence}
        if process_id is not None:
            body["process_id"] = process_id
        data = yield from self._request("POST", "leases/release", json=body)
        return Released.from_wire(data).released

    @call
    def lease_check(self, resource: str, *, fence: int) -> Steps[Lease]:
        """The lease if `fence` is its current, unlost tenure; else `StaleFence` or `LeaseLost`.
        Ask this right before a write that must not come from a stale holder."""
        body = {"resource": resource, "fence": fence}
        data = yield from self._request("POST", "leases/check", json=body, decision=True)
        return Checked.from_wire(data).lease

    @call
    def leases(
        self,
        *,
        prefix: str | None = None,
        holder: str | None = None,
        state: str | None = None,
        covering: Iterable[str] | None = None,
        decision: bool = False,
    ) -> Steps[list[Lease]]:
        """The workspace's resource leases; `covering`: only those on these names or a directory
        above one (at most 100 names). A covering read is a decision, as is any with `decision`:
        the primary must answer it (else `DecisionFromReplica`)."""
        params: dict[str, Any] = {"prefix": prefix, "holder": holder, "state": state}
        if covering is not None:
            params["covering"], decision = list(covering), True
        items = yield from self._list("leases", params, decision=decision)
        return [Lease.from_wire(i) for i in items]

    @call
    def evidence(self, attempt_id: int) -> Steps[list[GradedEvidence]]:
        """The evidence an attempt left, each with its grade (hand < wrapper < ci)."""
        data = yield from self._request("GET", f"attempts/{int(attempt_id)}/evidence")
        return [GradedEvidence.from_wire(item) for item in data]

    @call
    def attest(
        self,
        url: str,
        *,
        result: str,
        kind: str | None = None,
        note: str | None = None,
        observed_at: datetime | str | None = None,
    ) -> Steps[Attestation]:
        """CI's word (scope `attest`): it observed `url` (a commit or pull request) `result`
        pass or fail at `observed_at` (default: now; a URL's attestations are ordered by it).
        A pass grades one attempt's evidence with that URL `ci` (of the key's lane when the
        key is lane-limited); never the key's own hand's (`attest_own_evidence`). The same
        observation again changes nothing (`duplicate`)."""
        when = observed_at.isoformat() if isinstance(observed_at, datetime) else observed_at
        body = drop_none(
            {"url": url, "result": result, "kind": kind, "note": note, "observed_at": when}
        )
        data = yield from self._request("POST", "attestations", json=body)
        return Attestation.from_wire(data)

    @call
    def fences_verify(self, fences: Iterable[str]) -> Steps[list[FenceAnswer]]:
        """Where each `<resource>@<fence>` (or `<resource>@<fence> <holder>`, as a commit's
        trailer carries it) stands (scope `verify`, `leases` or `supervise`), in the order
        given: `current`, `superseded`, `unknown` or `not_holder` (at most 500 in one call)."""
        body = {"fences": list(fences)}
        data = yield from self._request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).fences

    @call
    def paths_verify(self, paths: Iterable[str]) -> Steps[list[PathAnswer]]:
        """For files by their lease names (at most 500): the held tenures over each now, and
        whether this hand's own last tenure over it lapsed (lost or broken) while it holds none
        over it (`POST /fences/verify`, scope `verify`, `leases` or `supervise`)."""
        body = {"paths": list(paths)}
        data = yield from self._request("POST", "fences/verify", json=body, decision=True)
        return FencesVerified.from_wire(data).paths

    @call
    def fences_receipts(
        self,
        repository: str,
        commits: Iterable[Mapping[str, Any]],
        *,
        process_id: str | None = None,
    ) -> Steps[ReceiptsRecorded]:
        """Judge a push's commits now and record a signed receipt of each (scope `leases`): each
        commit `{sha, fences, paths}` (its trailers, and the files it touches by their lease
        names), at most 100 commits and 2,000 fences and paths in one call. A commit is accepted
        when every fence is current and this hand's, and no path is under another hand's
        tenure or this hand's own lapsed one; an accepted receipt is final (a re-push answers
        with it, `duplicate`)."""
        body = drop_none(
            {"repository": repository, "process_id": process_id, "commits": list(commits)}
        )
        data = yield from self._request("POST", "fences/receipts", json=body, decision=True)
        return ReceiptsRecorded.from_wire(data)

    @call
    def fences_receipts_lookup(
        self, repository: str, shas: Iterable[str]
    ) -> Steps[list[StoredReceipt]]:
        """The receipts on record for these commits of `repository` (at most 100; scope
        `verify`, `leases` or `supervise`), each with `signature_valid`."""
        params = {"repository": repository, "sha": list(shas)}
        data = yield from self._request("GET", "fences/receipts", params=params, decision=True)
        return ReceiptsFound.from_wire(data).receipts
