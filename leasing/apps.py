from django.apps import AppConfig


class LeasingConfig(AppConfig):
    """Leases over HTTP: the resource lease API, its waits for a free name, and the hot calls
    (a renewal, an acquire, a renew-all, a renewing report), each one statement."""

    name = "leasing"
    verbose_name = "Leasing"
