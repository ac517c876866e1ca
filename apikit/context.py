"""The call being served, and the signal that a call was refused.

The request-id middleware sets the call context (method, path, request id, the client's address)
once per request and the authentication adds the key, hand and workspace; whoever records
refusals reads it. The API's exception handler sends `refused` for every refusal it answers; the
audit log (`leases.audit`) receives it, so this package imports no app.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from django.dispatch import Signal


@dataclass(frozen=True)
class CallContext:
    workspace_id: int | None = None
    hand: str = ""
    key_prefix: str = ""
    method: str = ""
    path: str = ""
    request_id: str = ""
    # The client's address (`apikit.clients.client_address`); empty outside an HTTP request.
    address: str = ""
    # Of the names it is given, those of hands the caller may not read (a lane-limited key: the
    # hands of other lanes); None when it may read every name. Set by the authentication, from
    # the lane rule (`hands.selectors.hands_elsewhere`); applied by `apikit.concealing`.
    conceal: Callable[[frozenset[str]], frozenset[str]] | None = None


# CallContext is frozen, so sharing one default instance is safe.
_call: ContextVar[CallContext] = ContextVar("gc_call", default=CallContext())  # noqa: B039


def current_call() -> CallContext:
    return _call.get()


@contextmanager
def call_context(**fields: Any) -> Iterator[CallContext]:
    """Describe the call being served, for the refusals it may cause."""
    token = _call.set(replace(_call.get(), **fields))
    try:
        yield _call.get()
    finally:
        _call.reset(token)


# Sent with `error=` (a GroundControlError) for every refusal the API answers. A receiver must
# record it at most once (`error.recorded`) and never raise.
refused = Signal()
