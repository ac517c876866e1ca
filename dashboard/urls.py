"""The supervisors' dashboard, mounted at the site root, and its login."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, path

from dashboard import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("login/", views.ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.board, name="board"),
    path("chart/", views.fleet_chart, name="fleet-chart"),
    path("workspace/", views.workspace_switch, name="workspace-switch"),
    path("lanes/", views.lanes, name="lanes"),
    path("lanes/<slug:slug>/", views.lane_detail, name="lane"),
    path("work-packages/<int:pk>/", views.work_package_detail, name="work-package"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("runs/<int:pk>/close/", views.run_close, name="run-close"),
    path("runs/<int:pk>/slots/new/", views.run_add_slots, name="run-add-slots"),
    path("runs/<int:pk>/slots/<int:index>/reopen/", views.slot_reopen, name="slot-reopen"),
    path("attempts/<int:pk>/directive/", views.attempt_directive, name="attempt-directive"),
    path("hands/", views.hands, name="hands"),
    path("hands/<int:pk>/", views.hand_detail, name="hand"),
    path("hands/<int:pk>/keys/new/", views.key_issue, name="key-issue"),
    path("keys/<str:prefix>/revoke/", views.key_revoke, name="key-revoke"),
    path("leases/", views.leases, name="leases"),
    path("leases/break/", views.lease_break, name="lease-break"),
    path("refusals/", views.refusals, name="refusals"),
    path("events/", views.events, name="events"),
    path("members/", views.members, name="members"),
]
