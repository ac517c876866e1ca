from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Leases"

    def ready(self) -> None:
        from leases import audit, checks, errors  # noqa: F401 - the refusal receiver, checks, codes
