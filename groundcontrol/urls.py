"""URL map. Each area has its own module: the REST API (groundcontrol/api_urls.py), operations
endpoints (ops/urls.py) and the supervisors' dashboard (dashboard/urls.py)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("groundcontrol.api_urls")),
    path("", include("ops.urls")),
    path("", include("dashboard.urls")),
]
