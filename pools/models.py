"""A lease pool: a named set of members in a workspace, such as ports `8001`...`8010` or test
databases `test_1`...`test_8`.

The pool holds no tenure itself. Each member's tenure is an ordinary resource lease
(`leases.models.Lease`, kind `resource`) named `pool/<pool>/<member>` (`member_resource`), made
free at fence 0 with the pool, so renew, release, check, break, the sweep, the events and the
lease lists all serve it unchanged. What this app adds is the take: the lowest free member, in
one conditional statement (`pools.services`).
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from hands.models import Workspace
from leases.names import POOL_TOP

# Every member's lease lives under this: `pool/<pool>/<member>`.
POOL_PREFIX = f"{POOL_TOP}/"


def pool_node(name: str) -> str:
    """A pool's node of the tree: its waiters wait on it, its members are below it."""
    return f"{POOL_PREFIX}{name}"


def member_resource(pool: str, member: str) -> str:
    """The resource name of a member's lease."""
    return f"{POOL_PREFIX}{pool}/{member}"


class Pool(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="pools")
    name = models.CharField(max_length=200)
    # In the order given (a capacity N is ["1", ..., "N"]): the take hands out the first free
    # one, since the members' lease rows are created in this order (their ids ascend with it).
    members = models.JSONField()
    created_at = models.DateTimeField(db_default=Now())
    # Who created it: the hand's name, or a dashboard user's.
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="pool_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({len(self.members)} members)"

    def resources(self) -> list[str]:
        return [member_resource(self.name, member) for member in self.members]
