from django.contrib import admin

from friction.models import FrictionRefusal, FrictionReport
from leases.admin import StampedAdmin


class FrictionRefusalInline(admin.TabularInline):
    model = FrictionRefusal
    extra = 0
    can_delete = False
    readonly_fields = ("request_id", "refusal_id", "code", "at", "hand", "method", "path")
    fields = readonly_fields

    def has_add_permission(self, request, obj=None):  # noqa: ANN001, ANN201
        return False


@admin.register(FrictionReport)
class FrictionReportAdmin(StampedAdmin):
    """Friction reports as filed. Read-only: a report is filed through the API with its event,
    and is the filer's word."""

    list_display = ("at", "workspace", "lane", "hand", "minutes", "what")
    list_filter = ("lane",)
    search_fields = ("what", "instead", "hand")
    readonly_fields = (
        "workspace",
        "lane",
        "run",
        "attempt",
        "hand",
        "key_prefix",
        "what",
        "instead",
        "minutes",
        "at",
    )
    inlines = [FrictionRefusalInline]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False
