"""The server's limits the client keeps to, by their names in the contract (the OpenAPI schema's
`x-limits`; a test holds this table to it), so that what the client sends (an MCP tool's
arguments, a release's reason) fits before it is sent. Values only: the server says what each
means."""

from __future__ import annotations

LIMITS: dict[str, int | float] = {
    "reason_length": 2000,
    "resource_length": 512,
    "ttl_s": 86_400,
    "wait_s": 60,
    "covering": 100,
    "verified_fences": 500,
    "tokens": 10**9,
    "cost_usd": 1_000,
    "friction_minutes": 2000,
    "friction_refusals": 20,
    "checkpoint_bytes": 16_384,
}
