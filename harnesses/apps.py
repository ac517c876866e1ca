from django.apps import AppConfig


class HarnessesConfig(AppConfig):
    """The tool layer's server side: the agent harnesses' hooks answered by the server itself
    (`POST /api/v1/hooks/{harness}`), each harness's session a process identity whose leases
    every event renews."""

    name = "harnesses"
    verbose_name = "Harness hooks"
