"""Refusals from the server, as exceptions that carry the contract's code and fields.

Every non-2xx answer has the body `{"error": {"code", "message", "request_id", ...fields}}`; one
class per code, grouped under the categories a caller branches on:

- `Denied`: someone else has it, or the run does not take this hand (lease_held,
  no_open_slot, slot_taken, run_closed, capability_missing, run_waiting: it waits for other
  runs), or the lane's budget is spent
  (budget_reached). Wait, pick other work, or escalate.
- `TenureLost`: this tenure is over or not ours (lease_lost, stale_fence, process_mismatch,
  not_holder). Stop working on it.
- `AuthFailed`: the key is bad or lacks a scope, or may not do this (attest_own_evidence).
- `Unavailable`: worth retrying later (429, 502, 503, 504, the server unreachable). This is the
  one definition of transient: the client's own retries (`TRANSIENT_STATUSES`, `is_transient`)
  and the runtime's, up to a tenure's give-up point, both read it from here.
- The rest are refusals of their own, each with its `advice` (a handoff that is not needed or is
  for one's own lease, an answered request, a reused idempotency key, a pool that exists, a slot
  that is not done, a resource asked in the other mode than its tenure's), and the caller's own
  mistakes (validation, method, media type).

The server's schema lists every code it answers (`x-error-codes`); a test holds this table to it.
"""

from __future__ import annotations

import math
from typing import Any


class GroundControlError(Exception):
    """A refused or failed call. `code` is the contract's stable code; `fields` holds the extra
    fields the code adds (holder, fence, expires_in_s, current_fence, missing, ...)."""

    code = "error"
    # What to do, for a code whose sentence is its own (`describe`): "" for the category's.
    advice = ""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.request_id = request_id
        self.fields: dict[str, Any] = dict(fields or {})

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        """The contract's error body (what `gctl --json` prints)."""
        return {
            "code": self.code,
            "message": self.message,
            "request_id": self.request_id,
            "status": self.status,
            **self.fields,
        }

    def __str__(self) -> str:
        # A refusal printed says what to do. A lost tenure's str stays the server's own message:
        # the runtime writes it into a release reason ("lease lost: <why>") and a notice.
        return self.message if isinstance(self, TenureLost) else describe(self)


class Denied(GroundControlError):
    """Someone else holds what was asked for."""


class TenureLost(GroundControlError):
    """The tenure (slot attempt or resource lease) is over or is not this caller's."""


class AuthFailed(GroundControlError):
    """The key is missing, unknown, revoked, expired, or lacks the scope."""


class Unavailable(GroundControlError):
    """Transient: the server is unreachable, overloaded or rate limiting. Safe to try again."""


class ValidationFailed(GroundControlError):
    code = "validation_error"


class KeyInvalid(AuthFailed):
    code = "key_invalid"


class KeyRevoked(AuthFailed):
    code = "key_revoked"


class KeyExpired(AuthFailed):
    code = "key_expired"


class ScopeDenied(AuthFailed):
    code = "scope_denied"


class NotHolder(TenureLost):
    code = "not_holder"


class NotFound(GroundControlError):
    code = "not_found"


class LeaseHeld(Denied):
    code = "lease_held"


class NoOpenSlot(Denied):
    code = "no_open_slot"


class SlotTaken(Denied):
    code = "slot_taken"


class RunClosed(Denied):
    code = "run_closed"


class CapabilityMissing(Denied):
    """The run needs capabilities the hand lacks (`missing`): claim a run that fits."""

    code = "capability_missing"


class BudgetReached(Denied):
    """The lane's budget for this period is spent: claims wait for the next (`period_end`)."""

    code = "budget_reached"


class RunWaiting(Denied):
    """The run waits for runs not done yet (`waiting_for`: each one's run, title and state):
    its slots take claims once they are done; pick other work meanwhile (the ready queue)."""

    code = "run_waiting"


class LeaseLost(TenureLost):
    code = "lease_lost"


class StaleFence(TenureLost):
    code = "stale_fence"


class ProcessMismatch(TenureLost):
    code = "process_mismatch"


class PayloadTooLarge(GroundControlError):
    code = "payload_too_large"


class EvidenceMissing(GroundControlError):
    code = "evidence_missing"


class AttestOwnEvidence(AuthFailed):
    """The attesting key's own hand submitted evidence with that URL: a hand never grades its
    own work (give CI a hand and a key of its own)."""

    code = "attest_own_evidence"


class RateLimited(Unavailable):
    code = "rate_limited"


class DependencyUnavailable(Unavailable):
    code = "dependency_unavailable"


class Busy(Unavailable):
    """The database aborted the call for a conflict with concurrent calls on every try the
    server made; nothing was written, and the same call may be sent again (`retry_after_s`)."""

    code = "busy"


class ConnectionFailed(Unavailable):
    """The server could not be reached (or stopped answering) after every retry."""

    code = "connection_failed"


class GatewayUnavailable(Unavailable):
    """A reverse proxy in front of the server answered for it (502 Bad Gateway, 504 Gateway
    Timeout): the server is restarting or overloaded. Transient, like a failed connection."""

    code = "gateway_unavailable"


class ServerError(GroundControlError):
    """An answer outside the contract (a 500, a malformed body)."""

    code = "server_error"


class MalformedAnswer(ServerError):
    """A 2xx answer whose body does not hold what the contract says (a run that is not a number,
    a missing lease): the server or something between answered wrongly."""

    code = "malformed_answer"


class DecisionFromReplica(ServerError):
    """A decision's answer (which leases cover a path, whether a fence is current, which leases
    are a session's own) says it came from a read replica (`X-GC-Read-From: replica`), which may
    lag the primary by a lease or more: nothing is decided on it. The server answers decisions
    from the primary; an older server, or something between, answered this one."""

    code = "decision_from_replica"


class InternalError(ServerError):
    """The server failed on a bug (500): its request id identifies it in the server's logs."""

    code = "internal_error"


class ConfigError(GroundControlError):
    """GC_URL or GC_KEY is missing or malformed."""

    code = "config_error"


class HandoffNotNeeded(GroundControlError):
    """A handoff request for something nobody holds in the asker's way."""

    code = "handoff_not_needed"
    advice = "nothing stands in your way: acquire or claim it instead of asking."


class HandoffOwnLease(GroundControlError):
    """A handoff request for something the asker's own hand holds."""

    code = "handoff_own_lease"
    advice = (
        "your own hand holds it: use it, or release it from the process that holds it "
        "(or take it over); never ask yourself."
    )


class HandoffAnswered(GroundControlError):
    """The handoff request already has its answer (or lapsed)."""

    code = "handoff_answered"
    advice = "it takes no other answer; read it with gctl handoff show ID."


class HandoffLimit(GroundControlError):
    """The asker has as many open handoff requests as it may."""

    code = "handoff_limit"
    advice = "wait for an answer to your open requests before asking again, or pick other work."


class HeldInOtherMode(GroundControlError):
    """An acquire in one mode of a resource this process holds in the other (`mode`, `fence`):
    a tenure keeps its mode, so nothing was renewed or granted."""

    code = "held_in_other_mode"
    advice = "your tenure is unchanged: use it in its own mode, or release it first."


class SlotNotDone(GroundControlError):
    """Reopening a slot that is open or held: only a finished slot can be reopened."""

    code = "slot_not_done"
    advice = "only a finished (done) slot can be reopened; this one is open or held."


class DependencyCycle(GroundControlError):
    """Dependencies that would make runs wait for each other (`cycle`: the run ids, from the
    run changed back to it); nothing was written."""

    code = "dependency_cycle"
    advice = "a run cannot wait for itself; change the dependencies so that none loops back."


class IdempotencyConflict(GroundControlError):
    """An Idempotency-Key used before for a different call."""

    code = "idempotency_conflict"
    advice = "that Idempotency-Key was sent with another call; send a new call with a new key."


class PoolExists(GroundControlError):
    """A pool of that name exists with other members."""

    code = "pool_exists"
    advice = "a pool's members never change: use that pool, or create one under another name."


class SignatureInvalid(AuthFailed):
    """A webhook delivery whose signature is not the integration's."""

    code = "signature_invalid"


class MethodNotAllowed(GroundControlError):
    """The endpoint does not take this method."""

    code = "method_not_allowed"
    advice = "the endpoint does not take this method; fix the call."


class NotAcceptable(GroundControlError):
    """The endpoint cannot answer in the media type asked for."""

    code = "not_acceptable"
    advice = "ask for application/json; fix the call."


class UnsupportedMediaType(GroundControlError):
    """The body is not JSON."""

    code = "unsupported_media_type"
    advice = "send the body as JSON (Content-Type: application/json); fix the call."


def _every_class(root: type[GroundControlError]) -> list[type[GroundControlError]]:
    found, pending = [], list(root.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        found.append(cls)
    return found


# Every class with a code of its own (the categories have none): the server's codes and the
# client's own (connection_failed, malformed_answer, ...), which no server answer carries.
ERRORS_BY_CODE: dict[str, type[GroundControlError]] = {
    cls.code: cls for cls in _every_class(GroundControlError) if "code" in vars(cls)
}

# Codes the contract does not list, mapped by HTTP status so a new server code still lands in
# the right category.
_BY_STATUS: dict[int, type[GroundControlError]] = {
    401: AuthFailed,
    403: AuthFailed,
    404: NotFound,
    409: Denied,
    429: RateLimited,
    502: GatewayUnavailable,
    503: DependencyUnavailable,
    504: GatewayUnavailable,
}

# The statuses worth trying again: those whose error is `Unavailable` (derived, so the table
# above stays the one place that says it).
TRANSIENT_STATUSES = frozenset(s for s, cls in _BY_STATUS.items() if issubclass(cls, Unavailable))


def is_transient(error: BaseException) -> bool:
    """Worth trying again later, unchanged: the server unreachable, restarting behind a proxy,
    overloaded or rate limiting. A 500 is not (the same call would fail the same way), nor is
    any refusal. The client's retries and the runtime's (`tenure.is_transient`) both ask this."""
    return isinstance(error, Unavailable)


def error_from_response(status: int, body: Any) -> GroundControlError:
    """The exception for a non-2xx answer, from the contract's error body when there is one."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        cls = _BY_STATUS.get(status, ServerError)
        return cls(f"HTTP {status} without an error body", status=status)
    code = str(error.get("code") or "error")
    fields = {k: v for k, v in error.items() if k not in ("code", "message", "request_id")}
    cls = (
        ERRORS_BY_CODE.get(code)
        or _BY_STATUS.get(status)
        or (ServerError if status >= 500 else GroundControlError)
    )
    return cls(
        str(error.get("message") or code),
        code=code,
        status=status,
        request_id=error.get("request_id"),
        fields=fields,
    )


ADVICE_DENIED = "wait, pick other work, or escalate."
# Denied by another process (a session) of one's own hand: the same key, another identity.
ADVICE_OWN_HAND = (
    "wait, pick other work, or, if that session is gone, take the lease over (take_over, "
    "gctl --take-over); give each session its own key or at least its own process identity."
)
# A harness's session keeps a file for as long as it works: its holder is asked to hand it over.
ADVICE_SESSION = (
    "wait, pick other work, or ask its holder to hand it over (gctl handoff RESOURCE --reason ...)."
)


def _seconds(value: float) -> str:
    """A whole number of seconds, never negative; a moment under one reads as such."""
    value = max(float(value), 0.0)
    return "under 1 s" if 0 < value < 1 else f"{value:.0f} s"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _subject(resource: Any, default: str) -> str:
    """What a denial is about: a slot's resource (`run/12/slot/0`) as "slot 0 of run 12"."""
    if not isinstance(resource, str) or not resource:
        return default
    parts = resource.split("/")
    if len(parts) == 4 and parts[0] == "run" and parts[2] == "slot":
        return f"slot {parts[3]} of run {parts[1]}"
    return resource


def _clock_time(value: Any) -> str:
    """`17:10 UTC` of an ISO 8601 instant; "" if it is none."""
    from datetime import UTC, datetime

    try:
        return f"{datetime.fromisoformat(str(value)).astimezone(UTC):%H:%M} UTC" if value else ""
    except ValueError:
        return ""


# How a sentence names a hand the server did not name: another lane's, to a lane-limited key
# (its name reads null; docs/api.md, "Lanes").
ANOTHER_LANE = "a hand of another lane"
QUOTE = "'"


def hand_called(name: Any, *, quote: str = "") -> str:
    """`hand a` (with `quote="'"`: `hand 'a'`), or, for a hand the server did not name, "a hand
    of another lane"."""
    return f"hand {quote}{name}{quote}" if name else ANOTHER_LANE


def describe_holder(fields: dict[str, Any]) -> str:
    """Who holds it and how its tenure stands, from a denial's fields: `expires_in_s` is only
    the end of the holder's current renewal window (a live holder renews and keeps it), so it
    is said as that, never as "free in N s".

        hand a (fence 2), renewing; its current window ends in 58 s
        hand a (fence 2), late: its window ended 3 s ago; it is lost in 12 s unless it renews
        your own hand a in another process (claude-code:…) (fence 2), renewing; …
    """
    session = fields.get("session")
    if isinstance(session, str) and session:
        # A harness's session keeps it for as long as it works: since when, never its window.
        whose = "your own hand" if fields.get("own_hand") is True else "hand"
        since = _clock_time(fields.get("since"))
        held = f" since {since}" if since else ""
        return (
            f"session {session} of {whose} {fields.get('holder')}{held}, for its session "
            f"(fence {fields.get('fence')})"
        )
    if fields.get("own_hand") is True:
        who = (
            f"your own hand {fields.get('holder')} in another process ({fields.get('process_id')})"
        )
    else:
        who = hand_called(fields.get("holder"))
    if fields.get("fence") is not None:
        who += f" (fence {fields.get('fence')})"
    state = fields.get("state")
    expires = _number(fields.get("expires_in_s"))
    lost_in = _number(fields.get("lost_in_s"))
    if state in ("late", "stalled") or (state is None and expires is not None and expires < 0):
        ended = f" {_seconds(-expires)} ago" if expires is not None and expires < 0 else ""
        loss = (
            f"it is lost in {_seconds(lost_in)} unless it renews"
            if lost_in is not None
            else "it is lost if it does not renew within its grace"
        )
        return f"{who}, {state or 'late'}: its window ended{ended}; {loss}"
    if expires is not None:
        return f"{who}, renewing; its current window ends in {_seconds(expires)}"
    return who


_ORDINALS = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
]


def _ordinal(n: int) -> str:
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


def _about(seconds: float) -> str:
    """An estimate, said as one: "about 40 s", "about 2 minutes", "about 3 hours"."""
    if seconds < 90:
        return f"about {max(round(seconds), 1)} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} minutes"
    return f"about {round(seconds / 3600)} hours"


def _names(hands: list[str]) -> str:
    if not all(hands):  # some not named to this key: each said on its own
        said = [hand_called(hand) for hand in hands]
        return said[0] if len(said) == 1 else ", ".join(said[:-1]) + f" and {said[-1]}"
    if len(hands) == 1:
        return f"hand {hands[0]}"
    return "hands " + ", ".join(hands[:-1]) + f" and {hands[-1]}"


def describe_line(fields: dict[str, Any], resource: Any) -> str:
    """Where a denied request stands, from its `ahead` and `estimated_wait_s`:

    third in line for `tests` behind hands a and b, about 2 minutes
    """
    ahead = [str(hand) if hand else "" for hand in fields.get("ahead") or []]
    place = f"{_ordinal(len(ahead) + 1)} in line for `{resource}`"
    if ahead:
        place += f" behind {_names(ahead)}"
    estimate = _number(fields.get("estimated_wait_s"))
    return f"{place}, {_about(estimate)}" if estimate is not None else place


# Members a full pool's sentence names one by one (the refusal's `members` lists them all).
_POOL_NAMED = 4


def describe_pool(pool: Any, members: list[Any]) -> str:
    """A full pool, from its denial's `members`: "pool ports is full (3 members): 8001 held by
    hand a (fence 2), renewing; its current window ends in 58 s; 8002 ..." (the soonest first)."""
    held = [
        m
        for m in members
        if isinstance(m, dict) and (m.get("holder") or m.get("state") not in (None, "free"))
    ]
    held.sort(key=lambda m: _number(m.get("expires_in_s")) or 0.0)
    named = [f"{m.get('member')} held by {describe_holder(m)}" for m in held[:_POOL_NAMED]]
    more = len(held) - len(named)
    text = f"pool {pool} is full ({len(members)} member{'' if len(members) == 1 else 's'})"
    if named:
        text += ": " + "; ".join(named) + (f"; and {more} more" if more > 0 else "")
    return text


def describe_slots(fields: dict[str, Any]) -> str:
    """How a run's slots stand, from a no_open_slot refusal's fields (those present):
    "3 slots: 2 held, 1 done; the soonest holder's current window ends in 40 s"."""
    total = fields.get("slots")
    if not isinstance(total, int) or isinstance(total, bool):
        return ""
    text = f"{total} slot{'' if total == 1 else 's'}"
    counts = [
        f"{fields[name]} {name}"
        for name in ("held", "done")
        if isinstance(fields.get(name), int) and fields[name]
    ]
    if counts:
        text += ": " + ", ".join(counts)
    soonest = _number(fields.get("next_expires_in_s"))
    if soonest is not None:
        text += f"; the soonest holder's current window ends in {_seconds(soonest)}"
    return text


def describe_fields(fields: Any) -> str:
    """A validation_error's per-field messages as one line: "wait_s: At most 60." """
    if not isinstance(fields, dict) or not fields:
        return ""
    parts = []
    for name, messages in fields.items():
        items = messages if isinstance(messages, list) else [messages]
        text = " ".join(describe_fields(m) if isinstance(m, dict) else str(m) for m in items)
        parts.append(f"{name}: {text if text.endswith('.') else text + '.'}")
    return " ".join(parts)


def describe(error: GroundControlError, *, subject: str | None = None) -> str:
    """The one sentence a model or a person can act on: what happened and what to do.

    gctl prints it, the MCP server answers it, and a denial's `str()` is it. `subject` names
    what was asked for when the refusal itself does not (gctl knows the resource it asked).
    """
    said = _describe(error, subject=subject)
    kept = _number(error.get("ticket_kept_s"))
    if isinstance(error, LeaseHeld) and isinstance(error.get("ticket"), int) and kept:
        said += (
            f" Your place in line is kept for {_seconds(kept)}: asking again within that time, "
            "with the denial's ticket, keeps it."
        )
    return said


def _tenure_in_the_way(error: GroundControlError) -> bool:
    """A denial by a tenure: its holder, or, for a hand the server did not name (another
    lane's), the tenure's state."""
    return bool(error.get("holder")) or error.get("state") in ("live", "late", "stalled")


def _describe(error: GroundControlError, *, subject: str | None) -> str:
    if error.advice:
        return f"{error.message}: {error.advice}"
    if isinstance(error, LeaseHeld) and isinstance(error.get("members"), list):
        return f"{describe_pool(error.get('pool'), error.get('members'))}: {ADVICE_DENIED}"
    # In line behind other waiters: where it stands first (alone, the holder says it all).
    position = _number(error.get("position"))
    if isinstance(error, LeaseHeld) and position is not None and position > 1:
        asked = error.get("requested") or subject or error.get("resource") or "it"
        line = describe_line(error.fields, asked)
        if _tenure_in_the_way(error):
            what = _subject(error.get("resource"), asked)
            return f"{line}: {what} is held by {describe_holder(error.fields)}; {ADVICE_DENIED}"
        return f"{line}: {ADVICE_DENIED}"
    if isinstance(error, LeaseHeld | SlotTaken) and _tenure_in_the_way(error):
        default = subject or ("the slot" if isinstance(error, SlotTaken) else "it")
        what = _subject(error.get("resource"), default)
        advice = ADVICE_OWN_HAND if error.get("own_hand") is True else ADVICE_DENIED
        if error.get("session"):
            advice = ADVICE_SESSION
        return f"{what} is held by {describe_holder(error.fields)}: {advice}"
    if isinstance(error, NoOpenSlot):
        slots = describe_slots(error.fields)
        if not slots:
            return f"{error.message}: {ADVICE_DENIED}"
        # The counts say it all: keep only the server's "run 12 has no open slot" head.
        return f"{error.message.partition(':')[0]} ({slots}): {ADVICE_DENIED}"
    if isinstance(error, CapabilityMissing):
        return f"{error.message}: pick a run that fits (gctl runs lists only those), or escalate."
    if isinstance(error, RunWaiting):
        # The server's sentence names each run it waits for and says what to do.
        return f"{error.message.rstrip('.')}; `gctl runs --ready` lists the runs that take claims."
    if isinstance(error, RunClosed):
        return f"{error.message.rstrip('.')}; it takes no claims: pick other work, or escalate."
    if isinstance(error, Denied):
        return f"{error.message}: {ADVICE_DENIED}"
    if isinstance(error, ProcessMismatch):
        return (
            f"{error.message}: another process holds this claim, and only its reports renew it; "
            "report from that process, or record a report without a process identity."
        )
    if isinstance(error, TenureLost):
        return f"{error.message}: stop working on it; your work there is no longer accepted."
    if isinstance(error, AuthFailed):
        return f"{error.message}: this key cannot do that; escalate to your supervisor."
    if isinstance(error, RateLimited) and _number(error.get("retry_after_s")) is not None:
        # Rounded up: a retry a moment early is refused again.
        wait = math.ceil(float(error.get("retry_after_s")))
        return f"{error.message}: too many calls; try again in {wait} s."
    if isinstance(error, Unavailable):
        return f"{error.message}: Ground Control is unavailable; try again shortly."
    if isinstance(error, ValidationFailed) and describe_fields(error.get("fields")):
        return f"invalid input: {describe_fields(error.get('fields'))} Fix the call and try again."
    if isinstance(error, EvidenceMissing) and isinstance(error.get("grades_needed"), dict):
        # The server's message names each kind, the grade it needs and the best it had.
        if "ci" in error.get("grades_needed").values():
            advice = (
                "once CI has attested its URL (POST /attestations), finish again with the "
                "same evidence: the tenure stays held while you keep heartbeating"
            )
        else:
            advice = "finish with evidence seen that way (gctl run's finish is the wrapper's)"
        return f"{error.message}: {advice}; or release with a reason."
    if isinstance(error, EvidenceMissing) and error.get("missing"):
        kinds = ", ".join(map(str, error.get("missing")))
        return (
            f"{error.message}: the brief asks for evidence of kind {kinds}; finish with it, or "
            "release with a reason."
        )
    return error.message


# The name the MCP server and older callers use; the same sentence builder.
describe_denial = describe
