"""The supervisors' dashboard, mounted at the site root, and its login."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path

from dashboard.views import (
    friction,
    loop,
    people,
    pools,
    records,
    schedules,
    timeline,
    waits,
    work,
)

urlpatterns: list[URLPattern | URLResolver] = [
    path("login/", people.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", work.board, name="board"),
    path("chart/", work.fleet_chart, name="fleet-chart"),
    path("board/handoffs/", work.board_handoffs, name="board-handoffs"),
    path("board/waiting/", waits.board_waits, name="board-waits"),
    path("workspace/", work.workspace_switch, name="workspace-switch"),
    path("lanes/", work.lanes, name="lanes"),
    path("lanes/<slug:slug>/", work.lane_detail, name="lane"),
    path("lanes/<slug:slug>/schedules/new/", schedules.schedule_create, name="schedule-create"),
    path(
        "lanes/<slug:slug>/schedules/<int:pk>/switch/",
        schedules.schedule_switch,
        name="schedule-switch",
    ),
    path(
        "lanes/<slug:slug>/schedules/<int:pk>/delete/",
        schedules.schedule_delete,
        name="schedule-delete",
    ),
    path(
        "lanes/<slug:slug>/integrations/new/",
        schedules.integration_create,
        name="integration-create",
    ),
    path(
        "lanes/<slug:slug>/integrations/<int:pk>/delete/",
        schedules.integration_delete,
        name="integration-delete",
    ),
    path("lanes/<slug:slug>/budgets/", loop.budget_save, name="budget-save"),
    path("work-packages/<int:pk>/", work.work_package_detail, name="work-package"),
    path("work-packages/<int:pk>/runs/new/", waits.run_create, name="run-create"),
    path("runs/<int:pk>/", work.run_detail, name="run"),
    path("runs/<int:pk>/timeline/", timeline.run_timeline, name="run-timeline"),
    path("runs/<int:pk>/timeline/at/", timeline.run_replay, name="run-replay"),
    path("runs/<int:pk>/timeline.jsonl", timeline.run_timeline_jsonl, name="run-timeline-jsonl"),
    path("runs/<int:pk>/close/", work.run_close, name="run-close"),
    path("runs/<int:pk>/idle/", loop.run_idle, name="run-idle"),
    path("runs/<int:pk>/slots/new/", work.run_add_slots, name="run-add-slots"),
    path("runs/<int:pk>/slots/<int:index>/reopen/", work.slot_reopen, name="slot-reopen"),
    path("attempts/<int:pk>/directive/", work.attempt_directive, name="attempt-directive"),
    path("hands/", people.hands, name="hands"),
    path("hands/<int:pk>/", people.hand_detail, name="hand"),
    path("hands/<int:pk>/keys/new/", people.key_issue, name="key-issue"),
    path("hands/<int:pk>/capabilities/", people.hand_capabilities, name="hand-capabilities"),
    path("keys/<str:prefix>/revoke/", people.key_revoke, name="key-revoke"),
    path("leases/", records.leases, name="leases"),
    path("leases/break/", records.lease_break, name="lease-break"),
    path("handoffs/<int:pk>/grant/", records.handoff_grant, name="handoff-grant"),
    path("pools/", pools.pools, name="pools"),
    path("refusals/", records.refusals, name="refusals"),
    path("events/", records.events, name="events"),
    path("friction/", friction.friction, name="friction"),
    path(
        "friction/export.<str:fmt>",
        friction.friction_export,
        name="friction-export",
    ),
    path("members/", people.members, name="members"),
]
