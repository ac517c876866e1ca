from django.contrib import admin, messages

from hands import services as hand_services
from hands.models import Hand, HandKey, IdempotencyRecord, Lane, Membership, Workspace
from leases.admin import StampedAdmin


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
        # name it by them (hands.selectors.lane_slug).
        readonly = super().get_readonly_fields(request, obj)
        return ("workspace", "slug", *readonly) if obj is not None else readonly


@admin.register(Hand)
class HandAdmin(StampedAdmin):
    list_display = ("name", "workspace", "lane", "is_supervisor")


@admin.action(description="Revoke the selected keys now")
def revoke_keys(modeladmin, request, queryset):  # noqa: ANN001, ANN201
    count = 0
    for key in queryset.select_related("hand"):
        hand_services.key_revoke(
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


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(StampedAdmin):
    list_display = ("idempotency_key", "key_prefix", "method", "path", "status_code", "created_at")
