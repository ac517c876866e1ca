"""Reads: the workspace's pools, and each member's lease as of one database time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from leases import engine
from leases.clock import db_now
from leases.engine import LeaseSnapshot
from leases.models import Lease, LeaseState
from pools.models import POOL_PREFIX, Pool


def pools_list(*, workspace_id: int) -> QuerySet[Pool]:
    """The workspace's pools, unordered (the API pages them newest first, pages by name)."""
    return Pool.objects.filter(workspace_id=workspace_id)


def members_sql(pool: Pool) -> tuple[str, dict[str, Any]]:
    """`resource IN (...)` over the pool's member leases, with its parameters."""
    params = {f"member{i}": resource for i, resource in enumerate(pool.resources())}
    return "resource IN (" + ", ".join(f"%({p})s" for p in params) + ")", params


def member_of(pool: Pool, resource: str) -> str:
    """The member a lease of `pool` is on."""
    return resource[len(POOL_PREFIX) + len(pool.name) + 1 :]


def read_members(pool: Pool) -> list[LeaseSnapshot]:
    """Each member's lease as one statement sees it, with the database's time, in pool order."""
    members, params = members_sql(pool)
    with connection.cursor() as cursor:
        cursor.execute(
            engine.render(
                "SELECT {columns}, {now} FROM {table} WHERE workspace_id = %(workspace_id)s "
                f"AND {members}"
            ),
            {"workspace_id": pool.workspace_id, **params},
        )
        found = {s.resource: s for s in map(engine.snapshot, cursor.fetchall())}
    return [found[r] for r in pool.resources() if r in found]


def member_json(pool: Pool, lease: LeaseSnapshot) -> dict[str, Any]:
    """A member and its lease's state, holder, fence and window (free: no holder, no window)."""
    held = lease.state != LeaseState.FREE
    return {
        "member": member_of(pool, lease.resource),
        "resource": lease.resource,
        "state": str(lease.state),
        "holder": (lease.holder or None) if held else None,
        "fence": lease.fence,
        "expires_in_s": lease.expires_in_s if held else None,
    }


@dataclass(frozen=True)
class PoolView:
    """A pool with each member's lease (in the pool's order) at the database time `now`."""

    pool: Pool
    leases: list[LeaseSnapshot]
    now: datetime

    @property
    def available(self) -> int:
        """Members a take would grant now: free, or held by a lost holder."""
        return sum(1 for lease in self.leases if not lease.held)


def pool_views(pools: list[Pool]) -> list[PoolView]:
    """Each pool with its members' leases: two queries (the clock, the leases) however many
    pools and members."""
    if not pools:
        return []
    now = db_now()
    wanted = {r for pool in pools for r in pool.resources()}
    workspaces = {pool.workspace_id for pool in pools}
    found = {
        (lease.workspace_id, lease.resource): LeaseSnapshot.from_model(lease, now)
        for lease in Lease.objects.filter(
            workspace_id__in=workspaces, resource__startswith=POOL_PREFIX, resource__in=wanted
        )
    }
    return [
        PoolView(
            pool,
            [
                found[(pool.workspace_id, r)]
                for r in pool.resources()
                if (pool.workspace_id, r) in found
            ],
            now,
        )
        for pool in pools
    ]
