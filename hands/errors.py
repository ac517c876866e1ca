"""The refusals of keys and of replayed creating calls, with the contract's codes. A missing or
unknown key (`key_invalid`) and a missing scope (`scope_denied`) are `apikit.errors`: the API
answers them for DRF's own refusals too."""

from __future__ import annotations

from apikit.errors import GroundControlError


class KeyRevoked(GroundControlError):
    code = "key_revoked"
    http_status = 401


class KeyExpired(GroundControlError):
    code = "key_expired"
    http_status = 401


class IdempotencyConflict(GroundControlError):
    code = "idempotency_conflict"
    http_status = 409
