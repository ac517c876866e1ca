"""Ground Control's client for agents (no Django): a typed REST client, the runtime that holds
leases for an agent (`Hand`), the `gctl` CLI and its MCP server.

The names below are imported when first used (PEP 562), so that a part that needs little (a
harness's hook command, `groundcontrol_client.hooks.command`, which must answer in
milliseconds from a cold start) does not pay for httpx, pydantic and the MCP SDK."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it
_WHERE = {
    "AsyncClient": "groundcontrol_client.async_client",
    "AsyncClaimedAttempt": "groundcontrol_client.async_runtime",
    "AsyncHand": "groundcontrol_client.async_runtime",
    "AsyncHeldLease": "groundcontrol_client.async_runtime",
    "Client": "groundcontrol_client.client",
    "RetryPolicy": "groundcontrol_client.client",
    "__version__": "groundcontrol_client.client",
    "run_plan": "groundcontrol_client.client",
    "AttestOwnEvidence": "groundcontrol_client.errors",
    "AuthFailed": "groundcontrol_client.errors",
    "BudgetReached": "groundcontrol_client.errors",
    "Busy": "groundcontrol_client.errors",
    "CapabilityMissing": "groundcontrol_client.errors",
    "ConfigError": "groundcontrol_client.errors",
    "ConnectionFailed": "groundcontrol_client.errors",
    "DecisionFromReplica": "groundcontrol_client.errors",
    "Denied": "groundcontrol_client.errors",
    "DependencyUnavailable": "groundcontrol_client.errors",
    "EvidenceMissing": "groundcontrol_client.errors",
    "GatewayUnavailable": "groundcontrol_client.errors",
    "GroundControlError": "groundcontrol_client.errors",
    "KeyExpired": "groundcontrol_client.errors",
    "KeyInvalid": "groundcontrol_client.errors",
    "KeyRevoked": "groundcontrol_client.errors",
    "LeaseHeld": "groundcontrol_client.errors",
    "LeaseLost": "groundcontrol_client.errors",
    "MalformedAnswer": "groundcontrol_client.errors",
    "NoOpenSlot": "groundcontrol_client.errors",
    "NotFound": "groundcontrol_client.errors",
    "NotHolder": "groundcontrol_client.errors",
    "PayloadTooLarge": "groundcontrol_client.errors",
    "ProcessMismatch": "groundcontrol_client.errors",
    "RateLimited": "groundcontrol_client.errors",
    "RunClosed": "groundcontrol_client.errors",
    "ScopeDenied": "groundcontrol_client.errors",
    "ServerError": "groundcontrol_client.errors",
    "SlotTaken": "groundcontrol_client.errors",
    "StaleFence": "groundcontrol_client.errors",
    "TenureLost": "groundcontrol_client.errors",
    "Unavailable": "groundcontrol_client.errors",
    "ValidationFailed": "groundcontrol_client.errors",
    "FrictionReport": "groundcontrol_client.friction",
    "LinkedRefusal": "groundcontrol_client.friction",
    "Attestation": "groundcontrol_client.grades",
    "GradedEvidence": "groundcontrol_client.grades",
    "describe_evidence": "groundcontrol_client.grades",
    "process_identity": "groundcontrol_client.identity",
    "Attempt": "groundcontrol_client.models",
    "Brief": "groundcontrol_client.models",
    "Evidence": "groundcontrol_client.models",
    "FenceAnswer": "groundcontrol_client.models",
    "Lease": "groundcontrol_client.models",
    "Me": "groundcontrol_client.models",
    "NotRenewed": "groundcontrol_client.models",
    "RenewedAll": "groundcontrol_client.models",
    "ReportResult": "groundcontrol_client.models",
    "Run": "groundcontrol_client.models",
    "Slot": "groundcontrol_client.models",
    "SlotCounts": "groundcontrol_client.models",
    "AsyncPoolLease": "groundcontrol_client.pool_leases",
    "PoolLease": "groundcontrol_client.pool_leases",
    "ClaimedAttempt": "groundcontrol_client.runtime",
    "Hand": "groundcontrol_client.runtime",
    "HeldLease": "groundcontrol_client.runtime",
    "LeaseUnconfirmed": "groundcontrol_client.runtime",
    "StopRequested": "groundcontrol_client.runtime",
    "GitHubIntegration": "groundcontrol_client.schedule_models",
    "Schedule": "groundcontrol_client.schedule_models",
    "ScheduleTry": "groundcontrol_client.schedule_models",
}

if TYPE_CHECKING:  # what a type checker and an IDE see: the names, imported
    from groundcontrol_client.async_client import (
        AsyncClient,
    )
    from groundcontrol_client.async_runtime import (
        AsyncClaimedAttempt,
        AsyncHand,
        AsyncHeldLease,
    )
    from groundcontrol_client.client import (
        Client,
        RetryPolicy,
        __version__,
        run_plan,
    )
    from groundcontrol_client.errors import (
        AttestOwnEvidence,
        AuthFailed,
        BudgetReached,
        Busy,
        CapabilityMissing,
        ConfigError,
        ConnectionFailed,
        DecisionFromReplica,
        Denied,
        DependencyUnavailable,
        EvidenceMissing,
        GatewayUnavailable,
        GroundControlError,
        KeyExpired,
        KeyInvalid,
        KeyRevoked,
        LeaseHeld,
        LeaseLost,
        MalformedAnswer,
        NoOpenSlot,
        NotFound,
        NotHolder,
        PayloadTooLarge,
        ProcessMismatch,
        RateLimited,
        RunClosed,
        ScopeDenied,
        ServerError,
        SlotTaken,
        StaleFence,
        TenureLost,
        Unavailable,
        ValidationFailed,
    )
    from groundcontrol_client.friction import (
        FrictionReport,
        LinkedRefusal,
    )
    from groundcontrol_client.grades import (
        Attestation,
        GradedEvidence,
        describe_evidence,
    )
    from groundcontrol_client.identity import (
        process_identity,
    )
    from groundcontrol_client.models import (
        Attempt,
        Brief,
        Evidence,
        FenceAnswer,
        Lease,
        Me,
        NotRenewed,
        RenewedAll,
        ReportResult,
        Run,
        Slot,
        SlotCounts,
    )
    from groundcontrol_client.pool_leases import (
        AsyncPoolLease,
        PoolLease,
    )
    from groundcontrol_client.runtime import (
        ClaimedAttempt,
        Hand,
        HeldLease,
        LeaseUnconfirmed,
        StopRequested,
    )
    from groundcontrol_client.schedule_models import (
        GitHubIntegration,
        Schedule,
        ScheduleTry,
    )


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'groundcontrol_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # once: the next use finds it here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "AsyncClaimedAttempt",
    "AsyncClient",
    "AsyncHand",
    "AsyncHeldLease",
    "AsyncPoolLease",
    "Attempt",
    "AttestOwnEvidence",
    "Attestation",
    "AuthFailed",
    "Brief",
    "CapabilityMissing",
    "Busy",
    "ClaimedAttempt",
    "Client",
    "ConfigError",
    "ConnectionFailed",
    "DecisionFromReplica",
    "Denied",
    "DependencyUnavailable",
    "Evidence",
    "EvidenceMissing",
    "FenceAnswer",
    "FrictionReport",
    "GatewayUnavailable",
    "GitHubIntegration",
    "GradedEvidence",
    "GroundControlError",
    "Hand",
    "HeldLease",
    "KeyExpired",
    "KeyInvalid",
    "KeyRevoked",
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "LeaseUnconfirmed",
    "LinkedRefusal",
    "MalformedAnswer",
    "Me",
    "NoOpenSlot",
    "NotFound",
    "NotHolder",
    "NotRenewed",
    "PayloadTooLarge",
    "PoolLease",
    "ProcessMismatch",
    "RateLimited",
    "RenewedAll",
    "ReportResult",
    "RetryPolicy",
    "Run",
    "RunClosed",
    "Schedule",
    "ScheduleTry",
    "BudgetReached",
    "ScopeDenied",
    "ServerError",
    "Slot",
    "SlotCounts",
    "SlotTaken",
    "StaleFence",
    "StopRequested",
    "TenureLost",
    "Unavailable",
    "ValidationFailed",
    "__version__",
    "describe_evidence",
    "process_identity",
    "run_plan",
]
