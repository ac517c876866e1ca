from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class HandsConfig(AppConfig):
    """Workspaces, members, lanes, hands and their keys: who may do what, where."""

    name = "hands"
    verbose_name = "Hands"

    def ready(self) -> None:
        from hands import errors  # noqa: F401 - the codes the OpenAPI error answers name
        from hands.models import Lane
        from hands.selectors import forget_lane

        post_save.connect(forget_lane, sender=Lane, dispatch_uid="hands.forget_lane.save")
        post_delete.connect(forget_lane, sender=Lane, dispatch_uid="hands.forget_lane.delete")
