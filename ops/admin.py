from django.contrib import admin

from leases.admin import StampedAdmin
from ops.models import JobRun


@admin.register(JobRun)
class JobRunAdmin(StampedAdmin):
    list_display = (
        "name",
        "runs",
        "last_finished_at",
        "last_duration_s",
        "last_processed",
        "last_failed",
        "last_lag_s",
    )
    readonly_fields = [f.name for f in JobRun._meta.fields]
