from django.contrib import admin

from leases.admin import StampedAdmin
from schedules.models import GitHubDelivery, GitHubIntegration, Schedule, ScheduleTry


@admin.register(Schedule)
class ScheduleAdmin(StampedAdmin):
    # Written through the API or the lane page, which validate the expression and the template.
    list_display = ("id", "lane", "cron", "key_pattern", "active", "next_period_at")
    list_filter = ("active",)
    readonly_fields = (
        "workspace",
        "lane",
        "cron",
        "key_pattern",
        "title_pattern",
        "runs",
        "periods_after",
        "next_period_at",
        "created_at",
        "created_by",
    )

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(ScheduleTry)
class ScheduleTryAdmin(StampedAdmin):
    list_display = ("id", "schedule", "date_key", "at", "outcome", "work_package")
    list_filter = ("outcome",)


@admin.register(GitHubIntegration)
class GitHubIntegrationAdmin(StampedAdmin):
    list_display = ("id", "lane", "label", "active", "created_at", "created_by")
    # Shown once at creation (POST /lanes/<slug>/github-integrations).
    exclude = ("secret",)
    readonly_fields = ("workspace", "lane", "created_at", "created_by")

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(GitHubDelivery)
class GitHubDeliveryAdmin(StampedAdmin):
    list_display = ("id", "integration", "event", "action", "outcome", "received_at")
    list_filter = ("event", "outcome")
