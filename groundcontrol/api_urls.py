"""The REST API, mounted at /api/v1/ (CONTRACT.md). Paths carry no trailing slash, as written in
the contract; the schema and the docs are at schema/ and docs/. Any other path under /api/v1/
answers not_found with the uniform error body. The hot calls (acquire, renew, renew-all, a report)
are `leasing.hot.HotCallView`s: their POST is one statement, outside DRF's request machinery."""

from django.urls import URLPattern, URLResolver, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from apikit.api import NotFoundView
from evidence import api as evidence
from fleet.api import attempts as attempts_api
from fleet.api import costs as costs_api
from fleet.api import fences as fences_api
from fleet.api import handoffs as handoffs_api
from fleet.api import records as records_api
from fleet.api import runs as runs_api
from fleet.api import timeline as timeline_api
from friction import api as friction_api
from hands import api as hands_api
from harnesses import api as harnesses_api
from leasing import api as resources_api
from pools import api as pools_api
from schedules import api as schedules_api

urlpatterns: list[URLPattern | URLResolver] = [
    # Hand calls
    path("me", hands_api.MeApi.as_view(), name="api-me"),
    path("runs", runs_api.RunsIndexApi.as_view(), name="api-runs-index"),
    path("runs/<int:run_id>/slots", runs_api.SlotsApi.as_view(), name="api-slots"),
    path(
        "runs/<int:run_id>/slots/<int:index>/reopen",
        runs_api.SlotReopenApi.as_view(),
        name="api-slot-reopen",
    ),
    path("runs/<int:run_id>/claim", attempts_api.ClaimApi.as_view(), name="api-claim"),
    path("attempts/<int:attempt_id>", attempts_api.AttemptApi.as_view(), name="api-attempt"),
    path("attempts/<int:attempt_id>/brief", attempts_api.BriefApi.as_view(), name="api-brief"),
    path(
        "attempts/<int:attempt_id>/reports",
        resources_api.ReportApi.as_view(),
        name="api-reports",
    ),
    path("attempts/<int:attempt_id>/finish", evidence.FinishApi.as_view(), name="api-finish"),
    path("attestations", evidence.AttestationsApi.as_view(), name="api-attestations"),
    path(
        "attempts/<int:attempt_id>/release", attempts_api.ReleaseApi.as_view(), name="api-release"
    ),
    path(
        "attempts/<int:attempt_id>/evidence",
        evidence.EvidenceListApi.as_view(),
        name="api-evidence",
    ),
    # The harnesses' hooks, answered in each harness's own format
    path("hooks/<str:harness>", harnesses_api.HookApi.as_view(), name="api-hooks"),
    # Resource leases
    path("leases", resources_api.LeaseListApi.as_view(), name="api-leases"),
    path(
        "leases/acquire",
        resources_api.LeaseAcquireApi.as_view(),
        name="api-lease-acquire",
    ),
    path("leases/renew", resources_api.LeaseRenewApi.as_view(), name="api-lease-renew"),
    path("leases/queue", resources_api.LeaseQueueApi.as_view(), name="api-lease-queue"),
    path(
        "leases/renew-all",
        resources_api.LeaseRenewAllApi.as_view(),
        name="api-lease-renew-all",
    ),
    path("leases/release", resources_api.LeaseReleaseApi.as_view(), name="api-lease-release"),
    path("leases/check", resources_api.LeaseCheckApi.as_view(), name="api-lease-check"),
    path("leases/break", resources_api.LeaseBreakApi.as_view(), name="api-lease-break"),
    # Handoffs: a refused hand asks the holder (issue 22)
    path("leases/handoff", handoffs_api.HandoffAskApi.as_view(), name="api-handoff-ask"),
    path("leases/handoffs", handoffs_api.HandoffsApi.as_view(), name="api-handoffs"),
    path("leases/handoff/<int:handoff_id>", handoffs_api.HandoffApi.as_view(), name="api-handoff"),
    path(
        "leases/handoff/<int:handoff_id>/decline",
        handoffs_api.HandoffDeclineApi.as_view(),
        name="api-handoff-decline",
    ),
    path(
        "leases/handoff/<int:handoff_id>/withdraw",
        handoffs_api.HandoffWithdrawApi.as_view(),
        name="api-handoff-withdraw",
    ),
    path(
        "leases/handoff/<int:handoff_id>/grant",
        handoffs_api.HandoffGrantApi.as_view(),
        name="api-handoff-grant",
    ),
    # Fences at the repository: are a commit's fences still current?
    path("fences/verify", fences_api.FencesVerifyApi.as_view(), name="api-fences-verify"),
    path("fences/receipts", fences_api.FenceReceiptsApi.as_view(), name="api-fences-receipts"),
    # Pools: a free member of a named set, as a lease of its own
    path("pools", pools_api.PoolsApi.as_view(), name="api-pools"),
    path("pools/<str:name>", pools_api.PoolApi.as_view(), name="api-pool"),
    path("pools/<str:name>/acquire", pools_api.PoolAcquireApi.as_view(), name="api-pool-acquire"),
    # Supervisor calls
    path("lanes", hands_api.LanesApi.as_view(), name="api-lanes"),
    path("lanes/<slug:slug>/work-packages", runs_api.WorkPackagesApi.as_view(), name="api-wps"),
    path("lanes/<slug:slug>/schedules", schedules_api.SchedulesApi.as_view(), name="api-schedules"),
    path(
        "lanes/<slug:slug>/schedules/<int:schedule_id>",
        schedules_api.ScheduleApi.as_view(),
        name="api-schedule",
    ),
    path(
        "lanes/<slug:slug>/schedules/<int:schedule_id>/tries",
        schedules_api.ScheduleTriesApi.as_view(),
        name="api-schedule-tries",
    ),
    path(
        "lanes/<slug:slug>/github-integrations",
        schedules_api.GitHubIntegrationsApi.as_view(),
        name="api-github-integrations",
    ),
    path(
        "lanes/<slug:slug>/github-integrations/<int:integration_id>",
        schedules_api.GitHubIntegrationApi.as_view(),
        name="api-github-integration",
    ),
    # GitHub's webhook deliveries: trusted by their signature, not by a key
    path(
        "integrations/github/<int:integration_id>",
        schedules_api.GitHubDeliveryApi.as_view(),
        name="api-github-delivery",
    ),
    path("work-packages/<int:work_package_id>/runs", runs_api.RunsApi.as_view(), name="api-runs"),
    path("runs/<int:run_id>", runs_api.RunApi.as_view(), name="api-run"),
    path(
        "runs/<int:run_id>/timeline",
        timeline_api.RunTimelineApi.as_view(),
        name="api-run-timeline",
    ),
    path("hands", hands_api.HandsApi.as_view(), name="api-hands"),
    path("hands/<path:name>/keys", hands_api.HandKeysApi.as_view(), name="api-hand-keys"),
    path("hands/<path:name>", hands_api.HandApi.as_view(), name="api-hand"),
    path("keys/<str:prefix>/revoke", hands_api.KeyRevokeApi.as_view(), name="api-key-revoke"),
    path("attempts", attempts_api.AttemptsApi.as_view(), name="api-attempts"),
    path(
        "attempts/<int:attempt_id>/directive",
        attempts_api.DirectiveApi.as_view(),
        name="api-directive",
    ),
    path("costs", costs_api.CostsApi.as_view(), name="api-costs"),
    path("costs/reports", costs_api.CostReportsApi.as_view(), name="api-cost-reports"),
    path(
        "costs/reports/<int:report_id>/void",
        costs_api.ReportVoidApi.as_view(),
        name="api-cost-report-void",
    ),
    path("budgets", costs_api.BudgetsApi.as_view(), name="api-budgets"),
    path("budgets/<int:budget_id>", costs_api.BudgetApi.as_view(), name="api-budget"),
    path("refusals", records_api.RefusalsApi.as_view(), name="api-refusals"),
    path("events", records_api.EventsApi.as_view(), name="api-events"),
    # Friction: what got in the way, and the refused calls it refers to
    path("friction", friction_api.FrictionApi.as_view(), name="api-friction"),
    path("friction/export", friction_api.FrictionExportApi.as_view(), name="api-friction-export"),
    # The schema and its interactive docs
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    # Any path at all, a newline in it too (`.` alone would not match one, and Django's HTML 404
    # page would answer under the API).
    re_path(r"^[\s\S]*$", NotFoundView.as_view(), name="api-not-found"),
]
