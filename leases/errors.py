"""Domain errors with the contract's stable codes. One API exception handler turns any of these
into the uniform error body; services raise them and never build HTTP responses."""

from __future__ import annotations

from typing import Any


class GroundControlError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields
        # Set once the refusal has been written, so no outer layer records it twice.
        self.recorded = False

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.fields}


class ValidationFailed(GroundControlError):
    code = "validation_error"
    http_status = 400


class KeyInvalid(GroundControlError):
    code = "key_invalid"
    http_status = 401


class KeyRevoked(GroundControlError):
    code = "key_revoked"
    http_status = 401


class KeyExpired(GroundControlError):
    code = "key_expired"
    http_status = 401


class ScopeDenied(GroundControlError):
    code = "scope_denied"
    http_status = 403


class NotHolder(GroundControlError):
    code = "not_holder"
    http_status = 403


class NotFound(GroundControlError):
    code = "not_found"
    http_status = 404


class LeaseHeld(GroundControlError):
    code = "lease_held"
    http_status = 409


class NoOpenSlot(GroundControlError):
    code = "no_open_slot"
    http_status = 409


class SlotTaken(GroundControlError):
    code = "slot_taken"
    http_status = 409


class LeaseLost(GroundControlError):
    code = "lease_lost"
    http_status = 409


class StaleFence(GroundControlError):
    code = "stale_fence"
    http_status = 409


class ProcessMismatch(GroundControlError):
    code = "process_mismatch"
    http_status = 409


class RunClosed(GroundControlError):
    code = "run_closed"
    http_status = 409


class SlotNotDone(GroundControlError):
    """Reopening a slot that is open or held: only a finished (done) slot can be reopened."""

    code = "slot_not_done"
    http_status = 409


class IdempotencyConflict(GroundControlError):
    code = "idempotency_conflict"
    http_status = 409


class PayloadTooLarge(GroundControlError):
    code = "payload_too_large"
    http_status = 413


class EvidenceMissing(GroundControlError):
    code = "evidence_missing"
    http_status = 422


class RateLimited(GroundControlError):
    code = "rate_limited"
    http_status = 429


class DependencyUnavailable(GroundControlError):
    code = "dependency_unavailable"
    http_status = 503
