from django.contrib import admin

from leases.models import Event, Lease, Refusal


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
    list_display = ("at", "kind", "workspace_id", "hand", "resource", "fence", "actor")
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
