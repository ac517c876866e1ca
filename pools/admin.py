from django.contrib import admin

from leases.admin import StampedAdmin
from pools.models import Pool


@admin.register(Pool)
class PoolAdmin(StampedAdmin):
    """Pools with their members. Read-only: a pool is made through the API (which makes each
    member's lease with it), and its members never change under the hands that hold them; each
    member's lease is in Leases (`pool/<name>/<member>`)."""

    list_display = ("name", "workspace", "size", "members_shown", "created_by", "created_at")
    search_fields = ("name",)
    readonly_fields = ("workspace", "name", "members", "created_by", "created_at")

    @admin.display(description="size")
    def size(self, pool: Pool) -> int:
        return len(pool.members)

    @admin.display(description="members")
    def members_shown(self, pool: Pool) -> str:
        shown = ", ".join(pool.members[:10])
        return shown + (f", … ({len(pool.members) - 10} more)" if len(pool.members) > 10 else "")

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False

    def has_delete_permission(self, request, obj=None):  # noqa: ANN001, ANN201
        return False
