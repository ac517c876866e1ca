from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Leases"

    def ready(self) -> None:
        from leases import checks  # noqa: F401 - registers the system checks
