from django.contrib import admin

from fleet.models import Attempt, Budget, BudgetHit, Report, Run, Slot, WorkPackage
from leases.admin import StampedAdmin


@admin.register(WorkPackage)
class WorkPackageAdmin(StampedAdmin):
    list_display = ("key", "title", "lane", "state")
    list_filter = ("state",)


@admin.register(Run)
class RunAdmin(StampedAdmin):
    list_display = ("title", "work_package", "slot_count", "state", "heartbeat_interval_s")
    list_filter = ("state",)


@admin.register(Slot)
class SlotAdmin(StampedAdmin):
    list_display = ("run", "index", "lease")
    readonly_fields = ("run", "index", "lease")


@admin.register(Attempt)
class AttemptAdmin(StampedAdmin):
    list_display = ("id", "hand", "run", "slot", "fence", "directive", "end", "claimed_at")
    list_filter = ("end", "directive")
    readonly_fields = [f.name for f in Attempt._meta.fields]


@admin.register(Report)
class ReportAdmin(StampedAdmin):
    """Shown only: a report is the hand's word, written by its call (a checkpoint edited here
    could be text no successor can read)."""

    list_display = ("attempt", "kind", "at", "renewed", "percent")
    list_filter = ("kind", "renewed")
    readonly_fields = [f.name for f in Report._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(Budget)
class BudgetAdmin(StampedAdmin):
    """Shown only: budgets change through their service (REST, the lane page), which lifts a
    period's hit when its limits change."""

    list_display = ("lane", "period", "limit_usd", "limit_tokens", "action")
    list_filter = ("period", "action")
    readonly_fields = [f.name for f in Budget._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(BudgetHit)
class BudgetHitAdmin(admin.ModelAdmin):
    list_display = ("budget", "period_start", "at", "spent_usd", "spent_tokens")
    readonly_fields = [f.name for f in BudgetHit._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False
