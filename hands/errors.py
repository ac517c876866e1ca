"""The refusals of keys and of replayed creating calls, with the contract's codes. A missing or
unknown key (`key_invalid`) and a missing scope (`scope_denied`) are `apikit.errors`: the API
answers them for DRF's own refusals too."""

from __future__ import annotations

from apikit.errors import GroundControlError


class KeyRevoked(GroundControlError):
    """The key was revoked (`revoked_at`): every call with it is refused at once."""

    code = "key_revoked"
    http_status = 401


class KeyExpired(GroundControlError):
    """The key's expiry has passed (`expired_at`)."""

    code = "key_expired"
    http_status = 401


class IdempotencyConflict(GroundControlError):
    """An Idempotency-Key used before for a different call: a new call needs a new key."""

    code = "idempotency_conflict"
    http_status = 409
