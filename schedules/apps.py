from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    """Plans that make themselves: a lane's schedules (a cron expression and a template of a work
    package and its runs, created each period by the beat job) and its GitHub integrations
    (issues become work packages; merged pull requests grade the evidence that names them)."""

    name = "schedules"
    verbose_name = "Schedules"

    def ready(self) -> None:
        from schedules import errors  # noqa: F401 - the codes the OpenAPI error answers name
