from django.apps import AppConfig


class FrictionConfig(AppConfig):
    """Friction reports: what a hand or a supervisor hit, what it did instead and the minutes
    it lost, linked to the refused calls it refers to."""

    name = "friction"
    verbose_name = "Friction"
