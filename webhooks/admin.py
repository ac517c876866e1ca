from django.contrib import admin

from leases.admin import StampedAdmin
from webhooks.models import Webhook, WebhookDelivery


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
    list_display = (
        "id",
        "webhook",
        "kind",
        "event_id",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "kind")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request):  # noqa: ANN001, ANN201
        return False
