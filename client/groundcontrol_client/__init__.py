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
    "AsyncClient": "groundcontrol_client.http",
    "AsyncClaimedAttempt": "groundcontrol_client.runtime.async_hand",
    "AsyncHand": "groundcontrol_client.runtime.async_hand",
    "AsyncHeldLease": "groundcontrol_client.runtime.async_hand",
    "Client": "groundcontrol_client.http",
    "RetryPolicy": "groundcontrol_client.core.sending",
    "__version__": "groundcontrol_client.core.sending",
    "run_plan": "groundcontrol_client.core.calls",
    "AttestOwnEvidence": "groundcontrol_client.core.errors",
    "AuthFailed": "groundcontrol_client.core.errors",
    "BudgetReached": "groundcontrol_client.core.errors",
    "Busy": "groundcontrol_client.core.errors",
    "CapabilityMissing": "groundcontrol_client.core.errors",
    "ConfigError": "groundcontrol_client.core.errors",
    "ConnectionFailed": "groundcontrol_client.core.errors",
    "DecisionFromReplica": "groundcontrol_client.core.errors",
    "Denied": "groundcontrol_client.core.errors",
    "DependencyCycle": "groundcontrol_client.core.errors",
    "DependencyUnavailable": "groundcontrol_client.core.errors",
    "EvidenceMissing": "groundcontrol_client.core.errors",
    "GatewayUnavailable": "groundcontrol_client.core.errors",
    "GroundControlError": "groundcontrol_client.core.errors",
    "KeyExpired": "groundcontrol_client.core.errors",
    "KeyInvalid": "groundcontrol_client.core.errors",
    "KeyRevoked": "groundcontrol_client.core.errors",
    "LeaseHeld": "groundcontrol_client.core.errors",
    "LeaseLost": "groundcontrol_client.core.errors",
    "MalformedAnswer": "groundcontrol_client.core.errors",
    "NoOpenSlot": "groundcontrol_client.core.errors",
    "NotFound": "groundcontrol_client.core.errors",
    "NotHolder": "groundcontrol_client.core.errors",
    "PayloadTooLarge": "groundcontrol_client.core.errors",
    "ProcessMismatch": "groundcontrol_client.core.errors",
    "RateLimited": "groundcontrol_client.core.errors",
    "RunClosed": "groundcontrol_client.core.errors",
    "RunWaiting": "groundcontrol_client.core.errors",
    "ScopeDenied": "groundcontrol_client.core.errors",
    "ServerError": "groundcontrol_client.core.errors",
    "SlotTaken": "groundcontrol_client.core.errors",
    "StaleFence": "groundcontrol_client.core.errors",
    "TenureLost": "groundcontrol_client.core.errors",
    "Unavailable": "groundcontrol_client.core.errors",
    "ValidationFailed": "groundcontrol_client.core.errors",
    "FrictionReport": "groundcontrol_client.core.friction",
    "LinkedRefusal": "groundcontrol_client.core.friction",
    "Attestation": "groundcontrol_client.core.grades",
    "GradedEvidence": "groundcontrol_client.core.grades",
    "describe_evidence": "groundcontrol_client.core.grades",
    "process_identity": "groundcontrol_client.core.identity",
    "Attempt": "groundcontrol_client.core.models",
    "Brief": "groundcontrol_client.core.models",
    "Evidence": "groundcontrol_client.core.models",
    "FenceAnswer": "groundcontrol_client.core.models",
    "Lease": "groundcontrol_client.core.models",
    "Me": "groundcontrol_client.core.models",
    "NotRenewed": "groundcontrol_client.core.models",
    "RenewedAll": "groundcontrol_client.core.models",
    "ReportResult": "groundcontrol_client.core.models",
    "Run": "groundcontrol_client.core.models",
    "Slot": "groundcontrol_client.core.models",
    "SlotCounts": "groundcontrol_client.core.models",
    "AsyncPoolLease": "groundcontrol_client.runtime.async_hand",
    "PoolLease": "groundcontrol_client.runtime.hand",
    "ClaimedAttempt": "groundcontrol_client.runtime.hand",
    "Hand": "groundcontrol_client.runtime.hand",
    "HeldLease": "groundcontrol_client.runtime.hand",
    "LeaseUnconfirmed": "groundcontrol_client.runtime.hand",
    "StopRequested": "groundcontrol_client.runtime.hand",
    "LaneRecord": "groundcontrol_client.core.plans",
    "TimelineEntry": "groundcontrol_client.core.plans",
    "WorkPackage": "groundcontrol_client.core.plans",
    "HandRecord": "groundcontrol_client.core.people",
    "IssuedKey": "groundcontrol_client.core.people",
    "KeyRecord": "groundcontrol_client.core.people",
    "PoolMember": "groundcontrol_client.core.pools",
    "PoolRecord": "groundcontrol_client.core.pools",
    "Waiter": "groundcontrol_client.core.pools",
    "Budget": "groundcontrol_client.core.records",
    "CostRow": "groundcontrol_client.core.records",
    "Costs": "groundcontrol_client.core.records",
    "Event": "groundcontrol_client.core.records",
    "Refusal": "groundcontrol_client.core.records",
    "Spend": "groundcontrol_client.core.records",
    "GitHubIntegration": "groundcontrol_client.core.schedules",
    "Schedule": "groundcontrol_client.core.schedules",
    "ScheduleTry": "groundcontrol_client.core.schedules",
}

if TYPE_CHECKING:  # what a type checker and an IDE see: the names, imported
    from groundcontrol_client.core.calls import (
        run_plan,
    )
    from groundcontrol_client.core.errors import (
        AttestOwnEvidence,
        AuthFailed,
        BudgetReached,
        Busy,
        CapabilityMissing,
        ConfigError,
        ConnectionFailed,
        DecisionFromReplica,
        Denied,
        DependencyCycle,
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
        RunWaiting,
        ScopeDenied,
        ServerError,
        SlotTaken,
        StaleFence,
        TenureLost,
        Unavailable,
        ValidationFailed,
    )
    from groundcontrol_client.core.friction import (
        FrictionReport,
        LinkedRefusal,
    )
    from groundcontrol_client.core.grades import (
        Attestation,
        GradedEvidence,
        describe_evidence,
    )
    from groundcontrol_client.core.identity import (
        process_identity,
    )
    from groundcontrol_client.core.models import (
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
    from groundcontrol_client.core.people import (
        HandRecord,
        IssuedKey,
        KeyRecord,
    )
    from groundcontrol_client.core.plans import (
        LaneRecord,
        TimelineEntry,
        WorkPackage,
    )
    from groundcontrol_client.core.pools import (
        PoolMember,
        PoolRecord,
        Waiter,
    )
    from groundcontrol_client.core.records import (
        Budget,
        CostRow,
        Costs,
        Event,
        Refusal,
        Spend,
    )
    from groundcontrol_client.core.schedules import (
        GitHubIntegration,
        Schedule,
        ScheduleTry,
    )
    from groundcontrol_client.core.sending import (
        RetryPolicy,
        __version__,
    )
    from groundcontrol_client.http import (
        AsyncClient,
        Client,
    )
    from groundcontrol_client.runtime.async_hand import (
        AsyncClaimedAttempt,
        AsyncHand,
        AsyncHeldLease,
        AsyncPoolLease,
    )
    from groundcontrol_client.runtime.hand import (
        ClaimedAttempt,
        Hand,
        HeldLease,
        LeaseUnconfirmed,
        PoolLease,
        StopRequested,
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
    "HandRecord",
    "IssuedKey",
    "KeyRecord",
    "PoolMember",
    "PoolRecord",
    "Waiter",
    "Budget",
    "CostRow",
    "Costs",
    "Event",
    "Refusal",
    "Spend",
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
    "DependencyCycle",
    "DependencyUnavailable",
    "Evidence",
    "EvidenceMissing",
    "FenceAnswer",
    "FrictionReport",
    "GatewayUnavailable",
    "GitHubIntegration",
    "GradedEvidence",
    "LaneRecord",
    "TimelineEntry",
    "WorkPackage",
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
    "RunWaiting",
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
