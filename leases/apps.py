from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Leases"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from leases import audit, checks, errors  # noqa: F401 - the refusal receiver, checks, codes
        from leases.epochs import on_connection_created

        # A new primary's epoch is recorded before its first connection serves a call.
        connection_created.connect(on_connection_created, dispatch_uid="leases.epochs")
