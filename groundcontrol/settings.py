"""Ground Control settings.

Everything comes from the environment (see groundcontrol/env.py). With nothing set this is the
embedded default: a PostgreSQL server of its own under var/postgres, no Redis, the periodic jobs
run in-process, and a secret key minted once and kept in var/secret_key. Production sets
DATABASE_URL (PostgreSQL), REDIS_URL, SECRET_KEY (required there), DEBUG=0, ALLOWED_HOSTS and,
behind a proxy that terminates TLS, GC_TLS=1 (docs/deploy.md).
"""

from __future__ import annotations

from pathlib import Path

from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from groundcontrol import embedded_postgres
from groundcontrol.env import (
    database_settings,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    env_url,
    var_dir,
)
from groundcontrol.secret_key import secret_key
from groundcontrol.server import web_threads

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = var_dir()

DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_htmx",
    "template_partials",
    "csp",
    "leases",
    "hands",
    "fleet",
    "leasing",
    "pools",
    "evidence",
    "webhooks",
    "schedules",
    "friction",
    "harnesses",
    "dashboard",
    "ops",
    "demo",
    "groundcontrol",
]

MIDDLEWARE = [
    # Outermost, so that it sees every answer: `Connection: close` on one that leaves its
    # request's body unread (apikit/api.py).
    "apikit.api.CloseUnreadBodyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header on every answer (CONTENT_SECURITY_POLICY, below;
    # django-csp's, its policy built once: groundcontrol/middleware.py).
    "groundcontrol.middleware.CSPMiddleware",
    # Request ids and the call context for refusals (apikit/api.py).
    "apikit.api.RequestIdMiddleware",
    # A database outage answers the pages 503, also when a middleware below fails on it.
    "dashboard.outage.DatabaseOutageMiddleware",
    "apikit.api.RefuseNulMiddleware",
    # The pages' own, skipped on the API's paths (groundcontrol/middleware.py).
    "groundcontrol.middleware.WhiteNoiseMiddleware",
    # Django's own, on every path: `check --deploy` looks for these three by name, and on an
    # API call they cost little (the session is never loaded there, and CSRF returns at once
    # for the exempt API views).
    "django.contrib.sessions.middleware.SessionMiddleware",
    "groundcontrol.middleware.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "groundcontrol.middleware.AuthenticationMiddleware",
    "groundcontrol.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "groundcontrol.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "groundcontrol.urls"
WSGI_APPLICATION = "groundcontrol.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------------
# PostgreSQL everywhere. Without DATABASE_URL, the embedded default's own server under
# VAR_DIR/postgres, started by the first connection that needs it (groundcontrol/embedded_postgres).
DATABASE_URL = env_url("DATABASE_URL", "", schemes=("postgres", "postgresql"))
EMBEDDED = not DATABASE_URL
DATABASES = {
    "default": embedded_postgres.settings(VAR_DIR) if EMBEDDED else database_settings(DATABASE_URL)
}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 0, minimum=0)
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Outgrowing one machine (docs/scale.md) -------------------------------------------------------
# GC_DB_POOLER=transaction: DATABASE_URL is a pooler in transaction mode (PgBouncer), which hands a
# client's transactions to any of its server connections. Then nothing may rely on a session:
# no named prepared statements (unless the pooler keeps them: PgBouncer 1.21+ with
# max_prepared_statements, GC_DB_PREPARE=1), no server-side cursors, and the two session-long
# features of a `wait_s` acquire (LISTEN, and the wait permits' session advisory locks) go
# over DATABASE_DIRECT_URL, a connection straight to the primary.
_POSTGRES = ("postgres", "postgresql")
GC_DB_POOLER = env_str("GC_DB_POOLER", "").strip().lower()
if GC_DB_POOLER not in ("", "transaction"):
    raise ImproperlyConfigured(
        f"GC_DB_POOLER={GC_DB_POOLER!r}: use 'transaction' or leave it unset"
    )
# The hot views prepare their statements on each connection (leasing/hot.py).
GC_DB_PREPARE = env_bool("GC_DB_PREPARE", GC_DB_POOLER != "transaction")
DATABASE_DIRECT_URL = env_url("DATABASE_DIRECT_URL", "", schemes=_POSTGRES)
DATABASE_REPLICA_URL = env_url("DATABASE_REPLICA_URL", "", schemes=_POSTGRES)
if GC_DB_POOLER == "transaction":
    if not DATABASE_DIRECT_URL:
        raise ImproperlyConfigured(
            "GC_DB_POOLER=transaction needs DATABASE_DIRECT_URL (a connection to the primary that "
            "bypasses the pooler) for the LISTEN and the wait permits of `wait_s` acquires"
        )
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True


def _extra_database(url: str) -> dict[str, object]:
    # Read as DATABASE_URL is (several hosts and target_session_attrs included).
    extra = database_settings(url)
    extra["CONN_MAX_AGE"] = DATABASES["default"]["CONN_MAX_AGE"]
    extra.setdefault("OPTIONS", {}).setdefault("connect_timeout", env_int("DB_CONNECT_TIMEOUT", 5))
    # Tests run it against the test database, never against the one the URL names.
    extra["TEST"] = {"MIRROR": "default"}
    return extra


if DATABASE_DIRECT_URL:
    DATABASES["direct"] = _extra_database(DATABASE_DIRECT_URL)
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = _extra_database(DATABASE_REPLICA_URL)
# Reads go to the replica only where a page or list opts in (apikit/reads.py); decisions never.
DATABASE_ROUTERS = ["apikit.reads.ReplicaRouter"]
# Past this lag the replica is not read; the pages read the primary and say "live".
GC_REPLICA_MAX_LAG_S = env_float("GC_REPLICA_MAX_LAG_S", 10.0, minimum=0.0)
# A replica found down or unusable is asked again after this long (a connect timeout each time).
GC_REPLICA_RETRY_S = env_float("GC_REPLICA_RETRY_S", 10.0, minimum=0.1)

# --- Secret key (groundcontrol/secret_key.py) -----------------------------------------------------
# The environment's; on the embedded default without one, a key minted once and kept in
# VAR_DIR/secret_key; with a DATABASE_URL and none (or with GC_REQUIRE_SECRET_KEY=1 anywhere), the
# process refuses to start. The development key earlier versions shipped is refused wherever it is
# given, and with DEBUG off so is a weak one (`secret_key.weakness`: `SECRET_KEY=x`).
SECRET_KEY = secret_key(
    given=env_str("SECRET_KEY", ""),
    embedded=EMBEDDED,
    require=env_bool("GC_REQUIRE_SECRET_KEY", False),
    var_dir=VAR_DIR,
    debug=DEBUG,
)

# --- Redis and Celery ---------------------------------------------------------------------------
REDIS_URL = env_url("REDIS_URL", "", schemes=("redis", "rediss", "unix"))
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
GC_SWEEP_INTERVAL_S = env_float("GC_SWEEP_INTERVAL_S", 5.0, minimum=0.1)
# The embedded default has no beat: the same jobs run on a timer inside the web process.
GC_EMBEDDED_SCHEDULER = env_bool("GC_EMBEDDED_SCHEDULER", not REDIS_URL)

CACHES = {
    "default": (
        # Django's Redis cache with a one-round-trip incr (the rate limiter's per-call count).
        {"BACKEND": "apikit.cache.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# --- Auth ---------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("GC_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# WhiteNoise warns on every start when STATIC_ROOT is missing; before `collectstatic` has run
# (development, tests) it is simply empty, and the finders serve the files.
try:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
except OSError:
    pass
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if not DEBUG and env_bool("GC_MANIFEST_STATIC", False)
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = True

# --- Security -----------------------------------------------------------------------------------
# GC_TLS=1: the site is served over HTTPS by a proxy that terminates TLS and forwards plain HTTP
# with `X-Forwarded-Proto` (docs/deploy.md). Then Django takes that header for the scheme, sends
# its cookies secure only, redirects plain HTTP to HTTPS and sends HSTS. Each setting below can
# still be set on its own. GC_BEHIND_TLS_PROXY=1 is the older name for trusting the header.
GC_TLS = env_bool("GC_TLS", False)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https")
    if GC_TLS or env_bool("GC_BEHIND_TLS_PROXY", False)
    else None
)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", GC_TLS)
# The load balancer's health checks and the scraper may call a web process directly over plain
# HTTP: a redirect would fail them.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", GC_TLS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", GC_TLS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if GC_TLS else 0, minimum=0)
# HSTS sent by the host Ground Control is served at covers that host and its own subdomains,
# never its parent domain's other hosts.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", GC_TLS)
# Preloading commits a whole registered domain, and anyone may submit a domain that sends the
# flag: that is for the domain's owner to decide (SECURE_HSTS_PRELOAD=1), so the deploy check's
# reminder of it is silenced until then.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# django-csp: scripts and styles from this origin, or inline with the request's nonce (the
# API docs' page: templates/drf_spectacular/); no plugins, no framing, forms post here only.
# The dashboard has no inline script or style (static/js/dashboard.js; htmx is told not to
# insert its own style and not to evaluate attributes: templates/base.html).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        # Swagger UI's stylesheet draws its icons as data: URLs.
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}

# --- API ----------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "apikit.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ground Control API",
    "DESCRIPTION": "Leases, fences and a work record for fleets of AI agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}
GC_MAX_BODY_BYTES = env_int("GC_MAX_BODY_BYTES", 256 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = GC_MAX_BODY_BYTES

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}

# --- Periodic jobs, webhooks, retention and metrics (ops/jobs.py, fleet/jobs.py, webhooks/) ------
# One table of jobs serves both topologies: Celery beat enqueues it in production, and the
# embedded scheduler (groundcontrol/scheduler.py) runs the same tasks on a timer in-process.
GC_REVOKE_KEYS_INTERVAL_S = env_float("GC_REVOKE_KEYS_INTERVAL_S", 30.0, minimum=0.1)
# How often the idle sweep flags hands that heartbeat without progress
# (fleet/attempts/idle_sweep.py).
GC_IDLE_INTERVAL_S = env_float("GC_IDLE_INTERVAL_S", 30.0, minimum=0.1)
GC_WEBHOOK_INTERVAL_S = env_float("GC_WEBHOOK_INTERVAL_S", 2.0, minimum=0.1)
GC_RETENTION_INTERVAL_S = env_float("GC_RETENTION_INTERVAL_S", 3600.0, minimum=1.0)
# How often the beat job makes the schedules' due packages (schedules/jobs.py): a period's
# package appears at most this long after its time.
GC_SCHEDULE_INTERVAL_S = env_float("GC_SCHEDULE_INTERVAL_S", 30.0, minimum=1.0)
# Rows per sweep transaction, and how far a row that made the sweep fail is pushed back.
GC_SWEEP_BATCH = env_int("GC_SWEEP_BATCH", 500, minimum=1)
GC_SWEEP_RETRY_S = env_float("GC_SWEEP_RETRY_S", 60.0, minimum=0.1)
# Reports, events, refusals and finished webhook deliveries older than this are pruned.
GC_RETENTION_DAYS = env_float("GC_RETENTION_DAYS", 90.0, minimum=0.001)
GC_RETENTION_REPORTS_DAYS = env_float("GC_RETENTION_REPORTS_DAYS", GC_RETENTION_DAYS, minimum=0.001)
GC_RETENTION_EVENTS_DAYS = env_float("GC_RETENTION_EVENTS_DAYS", GC_RETENTION_DAYS, minimum=0.001)
GC_RETENTION_REFUSALS_DAYS = env_float(
    "GC_RETENTION_REFUSALS_DAYS", GC_RETENTION_DAYS, minimum=0.001
)
GC_RETENTION_BATCH = env_int("GC_RETENTION_BATCH", 5000, minimum=1)
GC_WEBHOOK_TIMEOUT_S = env_float("GC_WEBHOOK_TIMEOUT_S", 5.0, minimum=0.1)
GC_WEBHOOK_MAX_ATTEMPTS = env_int("GC_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
GC_WEBHOOK_BACKOFF_S = env_float("GC_WEBHOOK_BACKOFF_S", 10.0, minimum=0.01)
GC_WEBHOOK_BACKOFF_MAX_S = env_float("GC_WEBHOOK_BACKOFF_MAX_S", 3600.0, minimum=0.01)
# Webhooks go to public addresses only; these hosts (names, IP addresses or networks such as
# 10.1.0.0/16) may receive them although loopback or private (webhooks/targets.py).
GC_WEBHOOK_ALLOWED_HOSTS = env_list("GC_WEBHOOK_ALLOWED_HOSTS", [])
# With Celery workers, jobs that write events enqueue webhook delivery right after commit; the
# embedded scheduler simply runs delivery on its next tick.
GC_NOTIFY_ON_COMMIT = env_bool("GC_NOTIFY_ON_COMMIT", not GC_EMBEDDED_SCHEDULER)
# When set, /metrics requires `Authorization: Bearer <token>`.
GC_METRICS_TOKEN = env_str("GC_METRICS_TOKEN", "")
# Without a token /metrics answers only when opened on purpose (a private network's scraper).
GC_METRICS_OPEN = env_bool("GC_METRICS_OPEN", False)

CELERY_TASK_DEFAULT_QUEUE = env_str("GC_CELERY_QUEUE", "groundcontrol")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
if REDIS_URL:
    # Redis is advisory for the request path (rate-limit counts): a Redis that hangs must cost a
    # request at most a second, never stall it.
    CACHES["default"].setdefault("OPTIONS", {"socket_connect_timeout": 1.0, "socket_timeout": 1.0})
# Installs that share one Redis keep their counts (rate limits, login throttle) apart.
CACHES["default"]["KEY_PREFIX"] = env_str("GC_CACHE_KEY_PREFIX", "")


def _every(task: str, interval_s: float) -> dict[str, object]:
    # A run that waited in the queue longer than two intervals is stale: the next one is coming.
    return {"task": task, "schedule": interval_s, "options": {"expires": interval_s * 2}}


CELERY_BEAT_SCHEDULE = {
    "sweep-leases": _every("fleet.sweep_leases", GC_SWEEP_INTERVAL_S),
    "revoke-keys": _every("fleet.revoke_keys", GC_REVOKE_KEYS_INTERVAL_S),
    "flag-idle": _every("fleet.flag_idle", GC_IDLE_INTERVAL_S),
    "deliver-webhooks": _every("fleet.deliver_webhooks", GC_WEBHOOK_INTERVAL_S),
    "prune-records": _every("fleet.prune_records", GC_RETENTION_INTERVAL_S),
    "plan-schedules": _every("schedules.plan", GC_SCHEDULE_INTERVAL_S),
}
# Planning runs on a queue of its own, served by a worker of its own (the Procfile's `planner`),
# so however long a run of it takes it never holds a worker slot the sweep waits for; the
# embedded scheduler gives each queue a thread of its own (groundcontrol/scheduler.py).
GC_PLAN_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.plan"
CELERY_TASK_ROUTES = {"schedules.plan": {"queue": GC_PLAN_QUEUE}}

# --- REST API limits and schema (apikit/, each app's api) -----------------------------------
# The interactive docs' assets are served from here (the sidecar), not from a CDN.
INSTALLED_APPS += ["drf_spectacular_sidecar"]
# Calls per key per minute before 429 rate_limited (0 turns the limit off). Heartbeats and
# renewals count, so leave room for a hand that renews several leases every few seconds.
GC_RATE_LIMIT_PER_MINUTE = env_int("GC_RATE_LIMIT_PER_MINUTE", 1200, minimum=0)
# `wait_s` acquires that may sleep at once, per key, per workspace and per web process; over a
# cap the call is refused at once (429 rate_limited). A process's cap leaves the other half of
# its threads to calls that do not wait, and one workspace takes at most half of a process's
# waits, since its own cap is larger (leasing/waits.py).
GC_WAITS_PER_KEY = env_int("GC_WAITS_PER_KEY", 4, minimum=1)
GC_WAITS_PER_WORKSPACE = env_int("GC_WAITS_PER_WORKSPACE", 16, minimum=1)
GC_WAITS_PER_PROCESS = env_int("GC_WAITS_PER_PROCESS", max(1, web_threads() // 2), minimum=1)
SPECTACULAR_SETTINGS.update(
    {
        "SCHEMA_PATH_PREFIX": "/api/v1",
        # Every error code, with its status and meaning, at the schema's root (x-error-codes).
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "apikit.openapi.error_codes_hook",
            "groundcontrol.limits.limits_hook",
        ],
        "COMPONENT_SPLIT_REQUEST": True,
        "SWAGGER_UI_DIST": "SIDECAR",
        "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
        "REDOC_DIST": "SIDECAR",
        # Four different "state" enums: name each after what it is the state of.
        "ENUM_NAME_OVERRIDES": {
            "AttemptStateEnum": "fleet.attempts.selectors.ATTEMPT_STATES",
            "LeaseStateEnum": "leases.selectors.LEASE_STATES",
            "SlotStateEnum": "fleet.api.inputs.SLOT_STATES",
            "PlanStateEnum": "fleet.models.PlanState",
            "RunStateEnum": "fleet.models.RunState",
            "EvidenceGradeEnum": "fleet.models.GRADE_ORDER",
            "ObservedByEnum": "evidence.services.OBSERVERS",
            "AttestationResultEnum": "evidence.models.AttestationResult",
            "BudgetActionEnum": "fleet.models.BudgetAction",
            "BudgetPeriodEnum": "fleet.models.BudgetPeriod",
            "IdleDirectiveEnum": "fleet.models.IdleDirective",
            "FenceStatusEnum": "leases.models.FenceStatus",
        },
        "TAGS": [
            {"name": "hand", "description": "A hand's calls on its slots and attempts (work)."},
            {"name": "leases", "description": "Leases on any named resource (leases)."},
            {"name": "plan", "description": "Lanes, work packages and runs (plan)."},
            {"name": "hands", "description": "Hands and their keys (hands)."},
            {"name": "supervisor", "description": "Watch and steer the fleet (supervise)."},
            {"name": "ci", "description": "CI's word on commits and pull requests (attest)."},
        ],
    }
)

# --- Dashboard ------------------------------------------------------------------------------------
# Seconds between the fleet board's HTMX polls; a hidden tab polls at most every 30 s.
GC_DASHBOARD_POLL_S = env_float("GC_DASHBOARD_POLL_S", 5.0, minimum=1.0)

# --- Unauthenticated callers (apikit/clients.py, apikit/ratelimit.py) ---------------------------
# Behind N trusted proxies, each appending the address it saw to X-Forwarded-For, the client's
# address is the N-th entry from the right; 0 (the default) reads REMOTE_ADDR and ignores the
# header, which any client can send (docs/deploy.md).
GC_TRUSTED_PROXY_HOPS = env_int("GC_TRUSTED_PROXY_HOPS", 0, minimum=0)
# Unauthenticated API calls (no key, a malformed, unknown or wrong one, an unknown path) per client
# address per minute before 429 rate_limited (0 turns the limit off). Valid keys are not counted.
GC_UNAUTHENTICATED_PER_MINUTE = env_int("GC_UNAUTHENTICATED_PER_MINUTE", 120, minimum=0)
