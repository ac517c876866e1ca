"""Operations endpoints: liveness, readiness and Prometheus metrics.

    /healthz   the process is up (no dependency is touched: a load balancer restarts on this)
    /readyz    the database and Redis answer; 503 otherwise (take the node out of rotation)
    /metrics   attempts and leases by state, reports, refusals by code (and of them the
               unauthenticated ones), jobs, sweep lag

Redis being down makes a node unready but never wrong: leases live in PostgreSQL, so the API
stays correct and only notifications wait (docs/deploy.md).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Iterator

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ops.jobs import metrics_snapshot
from ops.models import JobRun

logger = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as error:
        logger.warning("readyz: database unreachable: %s", error)
        return f"unavailable ({type(error).__name__})"
    return "ok"


def _check_redis() -> str:
    if not settings.REDIS_URL:
        return "not configured"
    import redis

    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL,
            socket_connect_timeout=CHECK_TIMEOUT_S,
            socket_timeout=CHECK_TIMEOUT_S,
        )
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as error:
        logger.warning("readyz: redis unreachable: %s", error)
        return f"unavailable ({type(error).__name__})"
    return "ok"


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"database": _check_database(), "redis": _check_redis()}
    ready = all(value in ("ok", "not configured") for value in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )


def _by(
    name: str, documentation: str, label: str, counts: dict[str, int], keys: Iterable[str]
) -> GaugeMetricFamily:
    """One gauge per key, zero for keys with no rows (so a state that empties shows 0)."""
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for key in keys:
        family.add_metric([key], counts.get(key, 0))
    return family


_JOB_GAUGES: list[tuple[str, str, Callable[[JobRun], float]]] = [
    (
        "gc_job_last_duration_seconds",
        "Duration of the job's last run",
        lambda job: job.last_duration_s,
    ),
    (
        "gc_job_last_finished_timestamp_seconds",
        "When the job's last run finished (database clock)",
        lambda job: job.last_finished_at.timestamp() if job.last_finished_at else 0.0,
    ),
    ("gc_job_last_processed", "Rows the job's last run handled", lambda job: job.last_processed),
    ("gc_job_last_failed", "Rows the job's last run pushed back", lambda job: job.last_failed),
    (
        "gc_job_last_lag_seconds",
        "In the last sweep, the longest a threshold had passed before it was recorded",
        lambda job: job.last_lag_s,
    ),
]


class FleetCollector(Collector):
    """Reads the fleet's numbers from the database at scrape time (every web node answers the
    same, so scrape any one of them)."""

    def collect(self) -> Iterator[Metric]:
        snap = metrics_snapshot()
        yield _by(
            "gc_attempts",
            "Attempts by state (live, late, stalled, lost, finished, released)",
            "state",
            snap.attempts,
            ("live", "late", "stalled", "lost", "finished", "released"),
        )
        leases = GaugeMetricFamily(
            "gc_leases", "Leases by kind (slot, resource) and state", labels=["kind", "state"]
        )
        for kind in ("slot", "resource"):
            for state in ("live", "late", "stalled", "lost", "free"):
                leases.add_metric([kind, state], snap.leases.get((kind, state), 0))
        yield leases
        yield CounterMetricFamily(
            "gc_reports",
            "Reports received (heartbeats, progress, blockers, notes)",
            value=snap.reports_total,
        )
        yield _by(
            "gc_refusals",
            "Refused calls on record (within retention), by code",
            "code",
            snap.refusals,
            sorted(snap.refusals),
        )
        yield _by(
            "gc_refusals_unauthenticated",
            "Of gc_refusals, the calls that reached no workspace (no valid key, an unknown path), "
            "counted per client address",
            "code",
            snap.address_refusals,
            sorted(snap.address_refusals),
        )
        yield GaugeMetricFamily(
            "gc_events_undispatched",
            "Events not yet handed to the webhook dispatcher",
            value=snap.undispatched_events,
        )
        yield _by(
            "gc_webhook_deliveries",
            "Webhook deliveries on record, by status",
            "status",
            snap.deliveries,
            ("pending", "delivered", "failed"),
        )
        yield GaugeMetricFamily(
            "gc_sweep_lag_seconds",
            "How long the oldest unrecorded lease transition has been waiting for a sweep",
            value=snap.sweep_lag_s,
        )
        sweep = next((job for job in snap.jobs if job.name == "sweep_leases"), None)
        yield GaugeMetricFamily(
            "gc_sweep_duration_seconds",
            "Duration of the last lease sweep",
            value=sweep.last_duration_s if sweep else 0.0,
        )
        runs = CounterMetricFamily("gc_job_runs", "Runs of each periodic job", labels=["job"])
        for job in snap.jobs:
            runs.add_metric([job.name], job.runs)
        yield runs
        for name, documentation, value in _JOB_GAUGES:
            family = GaugeMetricFamily(name, documentation, labels=["job"])
            for job in snap.jobs:
                family.add_metric([job.name], value(job))
            yield family


def _authorized(request: HttpRequest) -> bool:
    """The bearer token when one is set; without one, only if opened (GC_METRICS_OPEN)."""
    token = settings.GC_METRICS_TOKEN
    if not token:
        return bool(settings.GC_METRICS_OPEN)
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _authorized(request):
        return HttpResponse(
            "metrics need the bearer token (GC_METRICS_TOKEN), or GC_METRICS_OPEN=1\n",
            status=401,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector())
    try:
        body = generate_latest(registry)
    except DatabaseError as error:
        logger.warning("metrics: database unreachable: %s", error)
        return HttpResponse("database unavailable\n", status=503, content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
