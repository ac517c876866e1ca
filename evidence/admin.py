from django.contrib import admin

from evidence.models import Evidence
from leases.admin import StampedAdmin


@admin.register(Evidence)
class EvidenceAdmin(StampedAdmin):
    list_display = ("attempt", "kind", "url", "at")
    list_filter = ("kind",)
