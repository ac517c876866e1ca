from django.apps import AppConfig


class EvidenceConfig(AppConfig):
    name = "evidence"
    verbose_name = "Evidence"

    def ready(self) -> None:
        from evidence import errors  # noqa: F401 - the codes the OpenAPI error answers name
