from django.contrib import admin, messages

from fleet import services
from fleet.models import (
    Attempt,
    Hand,
    HandKey,
    IdempotencyRecord,
    JobRun,
    Lane,
    Membership,
    Report,
    Run,
    Slot,
    Webhook,
    WebhookDelivery,
    WorkPackage,
    Workspace,
)


class StampedAdmin(admin.ModelAdmin):
    """Fields the database fills (`db_default`, such as created_at) are shown, never asked for:
    a form would require them and refuse to save the object."""

    def get_readonly_fields(self, request, obj=None):  # noqa: ANN001, ANN201
        readonly = tuple(super().get_readonly_fields(request, obj))
        stamped = [f.name for f in self.model._meta.fields if f.has_db_default()]
        return readonly + tuple(name for name in stamped if name not in readonly)


@admin.register(Workspace)
class WorkspaceAdmin(StampedAdmin):
    list_display = ("name", "created_at")


@admin.register(Membership)
class MembershipAdmin(StampedAdmin):
    list_display = ("user", "workspace", "role")
    list_filter = ("role",)


@admin.register(Lane)
class LaneAdmin(StampedAdmin):
    list_display = ("slug", "name", "workspace", "heartbeat_interval_s", "grace_s")

    def get_readonly_fields(self, request, obj=None):  # noqa: ANN001, ANN201
        # A lane's slug and workspace are its for good: paths, keys and the hot path's answer
        # name it by them (fleet.selectors.lane_slug).
        readonly = super().get_readonly_fields(request, obj)
        return ("workspace", "slug", *readonly) if obj is not None else readonly


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


@admin.register(Hand)
class HandAdmin(StampedAdmin):
    list_display = ("name", "workspace", "lane", "is_supervisor")


@admin.action(description="Revoke the selected keys now")
def revoke_keys(modeladmin, request, queryset):  # noqa: ANN001, ANN201
    count = 0
    for key in queryset.select_related("hand"):
        services.key_revoke(
            workspace_id=key.hand.workspace_id,
            prefix=key.prefix,
            actor=request.user.get_username(),
            reason="revoked in the admin",
        )
        count += 1
    modeladmin.message_user(request, f"Revoked {count} key(s).", messages.SUCCESS)


@admin.register(HandKey)
class HandKeyAdmin(StampedAdmin):
    list_display = ("prefix", "hand", "scopes", "expires_at", "revoked_at", "last_used_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "hand__name")
    actions = [revoke_keys]
    # Keys are minted through the API or the dashboard (shown once); the hash is never editable.
    exclude = ("secret_hash",)
    readonly_fields = (
        "prefix",
        "hand",
        "created_at",
        "created_by",
        "revoked_at",
        "revoked_by",
        "revoke_reason",
        "last_used_at",
    )

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(Attempt)
class AttemptAdmin(StampedAdmin):
    list_display = ("id", "hand", "run", "slot", "fence", "directive", "end", "claimed_at")
    list_filter = ("end", "directive")
    readonly_fields = [f.name for f in Attempt._meta.fields]


@admin.register(Report)
class ReportAdmin(StampedAdmin):
    list_display = ("attempt", "kind", "at", "renewed", "percent")
    list_filter = ("kind", "renewed")


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(StampedAdmin):
    list_display = ("idempotency_key", "key_prefix", "method", "path", "status_code", "created_at")


# --- Webhooks and periodic jobs (fleet/webhooks.py, fleet/jobs.py) ----------------------------


@admin.register(Webhook)
class WebhookAdmin(StampedAdmin):
    list_display = ("url", "workspace", "kinds", "active", "created_at", "created_by")
    list_filter = ("active",)
    # Registered with `manage.py webhook_add`, which validates the URL and kinds and shows the
    # secret once; here a webhook can only be paused, resumed or described.
    exclude = ("secret",)
    readonly_fields = ("workspace", "url", "kinds", "created_at", "created_by")

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(StampedAdmin):
    list_display = ("id", "webhook", "kind", "event_id", "status", "attempts", "last_status_code",
                    "next_attempt_at", "delivered_at")
    list_filter = ("status", "kind")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False


@admin.register(JobRun)
class JobRunAdmin(StampedAdmin):
    list_display = ("name", "runs", "last_finished_at", "last_duration_s", "last_processed",
                    "last_failed", "last_lag_s")
    readonly_fields = [f.name for f in JobRun._meta.fields]
