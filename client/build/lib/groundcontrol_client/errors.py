"""Refusals from the server, as exceptions that carry the contract's code and fields.

Every non-2xx answer has the body `{"error": {"code", "message", "request_id", ...fields}}`; one
class per code, grouped under the categories a caller branches on:

- `Denied`: someone else has it (lease_held, no_open_slot, slot_taken, run_closed). Wait, pick
  other work, or escalate.
- `TenureLost`: this tenure is over or not ours (lease_lost, stale_fence, process_mismatch,
  not_holder). Stop working on it.
- `AuthFailed`: the key is bad or lacks a scope.
- `Unavailable`: worth retrying later (503, 429, the server unreachable).
"""

from __future__ import annotations

from typing import Any


class GroundControlError(Exception):
    """A refused or failed call. `code` is the contract's stable code; `fields` holds the extra
    fields the code adds (holder, fence, expires_in_s, current_fence, missing, ...)."""

    code = "error"

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
        return self.message


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


class RateLimited(Unavailable):
    code = "rate_limited"


class DependencyUnavailable(Unavailable):
    code = "dependency_unavailable"


class ConnectionFailed(Unavailable):
    """The server could not be reached (or stopped answering) after every retry."""

    code = "connection_failed"


class ServerError(GroundControlError):
    """An answer outside the contract (a 500, a proxy's HTML page)."""

    code = "server_error"


class ConfigError(GroundControlError):
    """GC_URL or GC_KEY is missing or malformed."""

    code = "config_error"


ERRORS_BY_CODE: dict[str, type[GroundControlError]] = {
    cls.code: cls
    for cls in (
        ValidationFailed,
        KeyInvalid,
        KeyRevoked,
        KeyExpired,
        ScopeDenied,
        NotHolder,
        NotFound,
        LeaseHeld,
        NoOpenSlot,
        SlotTaken,
        RunClosed,
        LeaseLost,
        StaleFence,
        ProcessMismatch,
        PayloadTooLarge,
        EvidenceMissing,
        RateLimited,
        DependencyUnavailable,
    )
}

# Codes the contract does not list, mapped by HTTP status so a new server code still lands in
# the right category.
_BY_STATUS: dict[int, type[GroundControlError]] = {
    401: AuthFailed,
    403: AuthFailed,
    404: NotFound,
    409: Denied,
    429: RateLimited,
    503: DependencyUnavailable,
}


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


def describe_denial(error: GroundControlError) -> str:
    """A plain sentence a model (or a person) can act on."""
    if isinstance(error, LeaseHeld | SlotTaken) and error.get("holder"):
        expires = error.get("expires_in_s")
        how_long = (
            f" for {max(float(expires), 0):.0f} s" if isinstance(expires, int | float) else ""
        )
        what = error.get("resource") or ("the slot" if isinstance(error, SlotTaken) else "it")
        return (
            f"{what} is held by hand {error.get('holder')} (fence {error.get('fence')}){how_long}: "
            "wait, pick other work, or escalate."
        )
    if isinstance(error, NoOpenSlot):
        return f"{error.message}: every slot is taken; wait, pick other work, or escalate."
    if isinstance(error, RunClosed):
        return f"{error.message}: pick other work, or escalate."
    if isinstance(error, TenureLost):
        return f"{error.message}: stop working on it; your work there is no longer accepted."
    if isinstance(error, AuthFailed):
        return f"{error.message}: this key cannot do that; escalate to your supervisor."
    if isinstance(error, Unavailable):
        return f"{error.message}: Ground Control is unavailable; try again shortly."
    return error.message
