"""The REST API, mounted at /api/v1/ (CONTRACT.md). Paths carry no trailing slash, as written in
the contract; the schema and the docs are at schema/ and docs/. Any other path under /api/v1/
answers not_found with the uniform error body. The three hot calls are `fleet.hot.serving`: one
statement, else their DRF view."""

from django.urls import URLPattern, URLResolver, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from evidence import api as evidence
from fleet import api as fleet
from fleet import hot
from groundcontrol.api import NotFoundView

urlpatterns: list[URLPattern | URLResolver] = [
    # Hand calls
    path("me", fleet.MeApi.as_view(), name="api-me"),
    path("runs", fleet.RunsIndexApi.as_view(), name="api-runs-index"),
    path("runs/<int:run_id>/slots", fleet.SlotsApi.as_view(), name="api-slots"),
    path(
        "runs/<int:run_id>/slots/<int:index>/reopen",
        fleet.SlotReopenApi.as_view(),
        name="api-slot-reopen",
    ),
    path("runs/<int:run_id>/claim", fleet.ClaimApi.as_view(), name="api-claim"),
    path("attempts/<int:attempt_id>", fleet.AttemptApi.as_view(), name="api-attempt"),
    path("attempts/<int:attempt_id>/brief", fleet.BriefApi.as_view(), name="api-brief"),
    path(
        "attempts/<int:attempt_id>/reports",
        hot.serving(fleet.ReportApi, hot.report),
        name="api-reports",
    ),
    path("attempts/<int:attempt_id>/finish", evidence.FinishApi.as_view(), name="api-finish"),
    path("attempts/<int:attempt_id>/release", fleet.ReleaseApi.as_view(), name="api-release"),
    path(
        "attempts/<int:attempt_id>/evidence",
        evidence.EvidenceListApi.as_view(),
        name="api-evidence",
    ),
    # Resource leases
    path("leases", fleet.LeaseListApi.as_view(), name="api-leases"),
    path(
        "leases/acquire",
        hot.serving(fleet.LeaseAcquireApi, hot.acquire),
        name="api-lease-acquire",
    ),
    path("leases/renew", hot.serving(fleet.LeaseRenewApi, hot.renew), name="api-lease-renew"),
    path("leases/release", fleet.LeaseReleaseApi.as_view(), name="api-lease-release"),
    path("leases/check", fleet.LeaseCheckApi.as_view(), name="api-lease-check"),
    path("leases/break", fleet.LeaseBreakApi.as_view(), name="api-lease-break"),
    # Supervisor calls
    path("lanes", fleet.LanesApi.as_view(), name="api-lanes"),
    path("lanes/<slug:slug>/work-packages", fleet.WorkPackagesApi.as_view(), name="api-wps"),
    path("work-packages/<int:work_package_id>/runs", fleet.RunsApi.as_view(), name="api-runs"),
    path("runs/<int:run_id>", fleet.RunApi.as_view(), name="api-run"),
    path("hands", fleet.HandsApi.as_view(), name="api-hands"),
    path("hands/<path:name>/keys", fleet.HandKeysApi.as_view(), name="api-hand-keys"),
    path("keys/<str:prefix>/revoke", fleet.KeyRevokeApi.as_view(), name="api-key-revoke"),
    path("attempts", fleet.AttemptsApi.as_view(), name="api-attempts"),
    path("attempts/<int:attempt_id>/directive", fleet.DirectiveApi.as_view(), name="api-directive"),
    path("refusals", fleet.RefusalsApi.as_view(), name="api-refusals"),
    path("events", fleet.EventsApi.as_view(), name="api-events"),
    # The schema and its interactive docs
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^.*$", NotFoundView.as_view(), name="api-not-found"),
]
