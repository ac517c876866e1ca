from django.apps import AppConfig


class FleetConfig(AppConfig):
    """The work: work packages, runs and slots, attempts and reports, the sweep."""

    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from fleet import errors  # noqa: F401 - the codes the OpenAPI error answers name
