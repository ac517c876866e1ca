from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Health, readiness and metrics for the machines that run Ground Control."""

    name = "ops"
    verbose_name = "Operations"
