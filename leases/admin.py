from django.contrib import admin

from leases.models import AddressRefusal, Event, FenceVerification, KeyTally, Lease, Refusal


class StampedAdmin(admin.ModelAdmin):
    """Fields the database fills (`db_default`, such as created_at) are shown, never asked for:
    a form would require them and refuse to save the object."""

    def get_readonly_fields(self, request, obj=None):  # noqa: ANN001, ANN201
        readonly = tuple(super().get_readonly_fields(request, obj))
        stamped = [f.name for f in self.model._meta.fields if f.has_db_default()]
        return readonly + tuple(name for name in stamped if name not in readonly)


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin):
    list_display = ("resource", "workspace_id", "kind", "status", "holder", "fence", "deadline")
    list_filter = ("kind", "status")
    search_fields = ("resource", "holder")
    # Leases change only through the engine's conditional statements.
    readonly_fields = [f.name for f in Lease._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("at", "kind", "workspace_id", "hand", "resource", "fence", "actor", "actor_key")
    list_filter = ("kind",)
    search_fields = ("hand", "resource")
    readonly_fields = [f.name for f in Event._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(Refusal)
class RefusalAdmin(admin.ModelAdmin):
    list_display = ("at", "code", "workspace_id", "hand", "key_prefix", "method", "path")
    list_filter = ("code",)
    search_fields = ("hand", "key_prefix", "request_id")
    readonly_fields = [f.name for f in Refusal._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(FenceVerification)
class FenceVerificationAdmin(admin.ModelAdmin):
    """What each `POST /fences/verify` was told, one row per fence asked about."""

    list_display = ("at", "resource", "fence", "status", "current_fence", "workspace_id", "hand")
    list_filter = ("status",)
    search_fields = ("resource", "hand", "key_prefix")
    readonly_fields = [f.name for f in FenceVerification._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(AddressRefusal)
class AddressRefusalAdmin(admin.ModelAdmin):
    """Refused calls that reached no workspace (no valid key, an unknown path), counted per client
    address, code and minute: where a flood shows, as one line per address and minute."""

    list_display = ("minute", "address", "code", "count", "method", "path", "key_prefix", "last_at")
    list_filter = ("code",)
    search_fields = ("address", "key_prefix", "path")
    date_hierarchy = "minute"
    ordering = ("-minute", "-count")
    readonly_fields = [f.name for f in AddressRefusal._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(KeyTally)
class KeyTallyAdmin(admin.ModelAdmin):
    """Each key's refused calls and the fences it asked about, counted per minute: the first
    of each kind a minute are rows of their own (refusals, fence verifications); `past_limit`
    holds the rest, by code or status."""

    list_display = ("minute", "record", "key_prefix", "hand", "workspace_id", "count", "last_at")
    list_filter = ("record",)
    search_fields = ("key_prefix", "hand")
    date_hierarchy = "minute"
    ordering = ("-minute", "-count")
    readonly_fields = [f.name for f in KeyTally._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False
