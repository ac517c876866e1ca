"""The errors every endpoint may answer, whatever app serves it, with the contract's stable codes.

Each app raises its own errors (subclasses of `GroundControlError` in its `errors.py`); the API's
one exception handler (`apikit.api`) turns any of them into the uniform error body. Services raise
them and never build HTTP responses.
"""

from __future__ import annotations

import re
from typing import Any

# What neither a UTF-8 answer nor a PostgreSQL text or jsonb column can hold: a lone surrogate
# (a JSON body can send one as an escape) and NUL. An error may quote what the caller sent.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` with every unstorable character in its strings (keys too) replaced by U+FFFD."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


class GroundControlError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        # Quoting the caller's input must never make the answer or its record fail.
        self.message = storable(message)
        self.fields = storable(fields)
        # Set once the refusal has been written, so no outer layer records it twice.
        self.recorded = False

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.fields}


class ValidationFailed(GroundControlError):
    """The input is invalid (`fields` says what is wrong with each field)."""

    code = "validation_error"
    http_status = 400


class KeyInvalid(GroundControlError):
    """No key, or not one of ours: also DRF's own "not authenticated"."""

    code = "key_invalid"
    http_status = 401


class ScopeDenied(GroundControlError):
    """The key may not do this: also DRF's own "permission denied"."""

    code = "scope_denied"
    http_status = 403


class NotFound(GroundControlError):
    """No such object in the caller's workspace (or lane), or no such endpoint."""

    code = "not_found"
    http_status = 404


class PayloadTooLarge(GroundControlError):
    """The body is over the limit (`limit_bytes`), refused before it is read."""

    code = "payload_too_large"
    http_status = 413


class RateLimited(GroundControlError):
    """Too many calls (or waits) for this key or address: try again after `retry_after_s`."""

    code = "rate_limited"
    http_status = 429


class DependencyUnavailable(GroundControlError):
    """The database or another service the call needs cannot be reached: nothing was written;
    try again shortly."""

    code = "dependency_unavailable"
    http_status = 503


class Busy(GroundControlError):
    """PostgreSQL aborted the call's transaction for a deadlock or a serialization failure on
    every try (`apikit.retries`): nothing was written, and the same call may simply be sent
    again after `retry_after_s`."""

    code = "busy"
    http_status = 503


# The framework's own refusals, answered with DRF's status and code (`apikit.api`), and a bug.
FRAMEWORK_CODES: dict[str, tuple[int, str]] = {
    "method_not_allowed": (405, "The endpoint does not take this method (`Allow` lists those)."),
    "not_acceptable": (406, "The endpoint cannot answer in the media type Accept asks for."),
    "unsupported_media_type": (415, "The body is not JSON (send Content-Type: application/json)."),
    "internal_error": (500, "A bug: the request id identifies it in the server's logs."),
}


def error_codes() -> dict[str, tuple[int, str]]:
    """Every code the API answers, with its HTTP status and what it means (the class's
    docstring, or its name): each app's errors (`GroundControlError`'s subclasses, from every
    installed app's `errors` module) and the framework's. The OpenAPI schema exports it
    (`x-error-codes`), and the client's table is checked against that."""
    from importlib import import_module
    from importlib.util import find_spec

    from django.apps import apps

    for app in apps.get_app_configs():
        if find_spec(f"{app.name}.errors") is not None:
            import_module(f"{app.name}.errors")
    codes = dict(FRAMEWORK_CODES)
    pending = list(GroundControlError.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        doc = " ".join((cls.__doc__ or "").split()) or cls.__name__
        codes[cls.code] = (cls.http_status, doc)
    return dict(sorted(codes.items()))
