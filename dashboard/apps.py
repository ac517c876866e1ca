from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The supervisors' pages: reads in `pages`, writes through the apps' services."""

    name = "dashboard"
    verbose_name = "Dashboard"
