"""The pools' refusals (a full pool is the leases' own `lease_held`)."""

from __future__ import annotations

from apikit.errors import GroundControlError


class PoolExists(GroundControlError):
    """A pool of that name exists with other members: a pool's members never change under the
    hands that hold them (creating it again with the same members answers the pool, 200)."""

    code = "pool_exists"
    http_status = 409
