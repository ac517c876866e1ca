from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from fleet.models import Lane
        from fleet.selectors import forget_lane

        post_save.connect(forget_lane, sender=Lane, dispatch_uid="fleet.forget_lane.save")
        post_delete.connect(forget_lane, sender=Lane, dispatch_uid="fleet.forget_lane.delete")
