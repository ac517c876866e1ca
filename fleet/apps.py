from django.apps import AppConfig


class FleetConfig(AppConfig):
    """The work: work packages, runs and slots, attempts and reports, the sweep."""

    name = "fleet"
    verbose_name = "Fleet"

    def ready(self) -> None:
        from fleet import errors  # noqa: F401 - the codes the OpenAPI error answers name
        from fleet.attempts.services import attempts_end_revoked
        from leases.services import slot_tenures_ended

        # A key's revocation ends the slot tenures taken with it (leases); their attempts end
        # here, in its transaction.
        slot_tenures_ended.connect(attempts_end_revoked, dispatch_uid="fleet.attempts_end_revoked")
