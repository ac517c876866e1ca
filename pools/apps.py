from django.apps import AppConfig


class PoolsConfig(AppConfig):
    """Lease pools: a named set of members (ports, test databases), each its own resource lease,
    handed out one free member at a time."""

    name = "pools"
    verbose_name = "Pools"

    def ready(self) -> None:
        from pools import errors  # noqa: F401 - the codes the OpenAPI error answers name
