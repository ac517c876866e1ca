from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """A workspace's webhooks: its events, signed and delivered with retries."""

    name = "webhooks"
    verbose_name = "Webhooks"
