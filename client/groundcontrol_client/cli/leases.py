"""gctl's one-shot commands for resource leases: `gctl lease acquire|renew|release|check|list`,
and the line of waiters, `gctl lease queue`."""

from __future__ import annotations

import argparse

from groundcontrol_client.cli.environment import lease_fence_for, process_id_for
from groundcontrol_client.cli.handoffs import DECLINE
from groundcontrol_client.cli.output import Result, UsageError, commented, export_line
from groundcontrol_client.core.models import describe_lease
from groundcontrol_client.core.pools import describe_waiter
from groundcontrol_client.core.when import now_utc
from groundcontrol_client.http import Client


def cmd_lease_acquire(client: Client, args: argparse.Namespace) -> Result:
    if args.export and args.json:
        raise UsageError("--export prints shell lines; it does not mix with --json")
    process_id = process_id_for(args)
    lease = client.lease_acquire(
        args.resource,
        ttl_s=args.ttl,
        process_id=process_id,
        wait_s=args.wait,
        mode="shared" if args.shared else None,
        take_over=args.take_over,
    )
    exports = export_line(GC_RESOURCE=lease.resource, GC_FENCE=lease.fence)
    if args.export:
        return lease.raw, exports
    summary = (
        f"acquired {describe_lease(lease)}\n"
        f"it lapses unless renewed within {lease.ttl_s:g} s (`gctl lease renew`); "
        "`gctl hold` renews it for as long as a command runs"
    )
    return lease.raw, f"{commented(summary)}\n{exports}"


def cmd_lease_renew(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_renew(
        args.resource, fence=lease_fence_for(args), process_id=process_id_for(args)
    )
    asks = "".join(f"\n{r.sentence(lease.resource)}{DECLINE}" for r in lease.handoff_requests)
    return lease.raw, f"renewed {describe_lease(lease)}{asks}"


def cmd_lease_release(client: Client, args: argparse.Namespace) -> Result:
    client.lease_release(args.resource, fence=lease_fence_for(args))
    return {"released": True}, f"released {args.resource}"


def cmd_lease_check(client: Client, args: argparse.Namespace) -> Result:
    lease = client.lease_check(args.resource, fence=lease_fence_for(args))
    return {"valid": True, "lease": lease.raw}, f"valid: {describe_lease(lease)}"


def cmd_lease_list(client: Client, args: argparse.Namespace) -> Result:
    leases = client.leases(prefix=args.prefix, holder=args.holder, state=args.state)
    return [lease.raw for lease in leases], "\n".join(map(describe_lease, leases)) or "no leases"


def cmd_lease_queue(client: Client, args: argparse.Namespace) -> Result:
    waiters, now = client.lease_queue(args.resource), now_utc()
    text = "\n".join(describe_waiter(w, now) for w in waiters)
    where = f" on {args.resource}'s line" if args.resource else ""
    return [w.raw for w in waiters], text or f"no request is waiting{where}"
