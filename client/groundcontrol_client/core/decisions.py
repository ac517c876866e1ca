"""Reads a client decides on: whether a commit, a push or a write may go ahead, which leases are
a session's own to release. Each is asked with `DECISION_HEADER`, which the server answers from
the primary, never a read replica (apikit/reads.py, `is_decision`); an answer that says it came
from anywhere else (`READ_FROM_HEADER`) is refused (`decided_on_primary`), so nothing is decided
on rows that may lag a lease behind. `Client` and `AsyncClient` both send through these."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from groundcontrol_client.core.errors import DecisionFromReplica

DECISION_HEADER = "X-GC-Decision"
READ_FROM_HEADER = "X-GC-Read-From"


def decision_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """A decision's request headers: `headers` and the mark."""
    return {**(headers or {}), DECISION_HEADER: "1"}


def decided_on_primary(response: httpx.Response, method: str, path: str) -> None:
    """Raise `DecisionFromReplica` unless a decision's answer came from the primary (an answer
    that does not say where it read came from the primary: only a list that may read a replica
    says so)."""
    source = response.headers.get(READ_FROM_HEADER)
    if source is not None and source.strip().lower() != "primary":
        raise DecisionFromReplica(
            f"{method} {path.split('?')[0]} was answered from a read replica "
            f"({READ_FROM_HEADER}: {source}), which may not yet have a lease the primary holds: "
            "nothing was decided on it. The server must answer decisions from the primary "
            "(upgrade it, or route this call to the primary); then try again",
            status=response.status_code,
            request_id=response.headers.get("x-request-id"),
        )
