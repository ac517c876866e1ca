from django.contrib import admin

from evidence.models import Evidence


@admin.register(Evidence)
class EvidenceAdmin(admin.ModelAdmin):
    list_display = ("attempt", "kind", "url", "at")
    list_filter = ("kind",)
