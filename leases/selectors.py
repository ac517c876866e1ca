"""Reads of leases for the API and the pages: snapshots on the database's clock, and lists filtered
in SQL (state, holder, prefix, the nodes that cover a name)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet

from leases import names
from leases.clock import db_now, now_expression
from leases.engine import LeaseSnapshot
from leases.models import Lease, LeaseKind, LeaseState
from leases.state import state_q

LEASE_STATES = [state.value for state in LeaseState]


def lease_snapshots(leases: list[Lease], now: datetime | None = None) -> list[LeaseSnapshot]:
    now = now or db_now()
    return [LeaseSnapshot.from_model(lease, now) for lease in leases]


def lease_state_q(state: str, *, prefix: str = "") -> Q:
    """Rows whose lease (at `prefix`) is in `state` now (`leases.state.state_q`)."""
    return state_q(state, now_expression(), prefix=prefix)


def covering_nodes(name: str) -> list[str]:
    """The nodes whose leases cover `name`: its own and every ancestor's."""
    node = names.node_of(name)
    return [*names.ancestors_of(node), node]


def leases_list(
    *,
    workspace_id: int,
    prefix: str = "",
    holder: str = "",
    state: str = "",
    kind: str = LeaseKind.RESOURCE,
    covering: list[str] | None = None,
) -> QuerySet[Lease]:
    """`covering`: only leases on those names' nodes or a directory above one (the leases that
    cover a file: `src/auth/` covers `src/auth/login.py`)."""
    leases = Lease.objects.filter(workspace_id=workspace_id, kind=kind)
    if covering:
        line = {node for name in covering for node in covering_nodes(name)}
        leases = leases.filter(node__in=sorted(line))
    if prefix:
        leases = leases.filter(resource__startswith=prefix)
    if holder:
        leases = leases.filter(holder=holder)
    if state:
        leases = leases.filter(lease_state_q(state))
    return leases
