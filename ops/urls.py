"""Operations endpoints, mounted at the root: /healthz, /readyz, /metrics."""

from django.urls import URLPattern, URLResolver, path

from ops import views as ops

urlpatterns: list[URLPattern | URLResolver] = [
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
]
