from django.contrib import admin

from evidence.models import Attestation, Evidence
from leases.admin import StampedAdmin


@admin.register(Evidence)
class EvidenceAdmin(StampedAdmin):
    list_display = ("attempt", "kind", "url", "grade", "observed_by", "at")
    list_filter = ("kind", "grade")


@admin.register(Attestation)
class AttestationAdmin(StampedAdmin):
    """CI's word on a URL (`POST /attestations`): who said it, when, pass or fail."""

    list_display = ("url", "result", "kind", "hand", "key_prefix", "at")
    list_filter = ("result",)
