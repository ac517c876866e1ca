"""gunicorn settings for the web tier:

    gunicorn -c gunicorn.conf.py groundcontrol.wsgi:application

The web tier is stateless (leases live in PostgreSQL), so run as many of these as you like behind
a load balancer that checks /readyz. Every value can be overridden from the environment.
"""

from __future__ import annotations

import multiprocessing
import os

# Each worker thread keeps its database connection between requests (DB_CONN_MAX_AGE, in
# seconds): opening one per request cost more than the request itself (docs/performance.md).
# Budget workers x threads connections per web node against PostgreSQL's max_connections.
os.environ.setdefault("DB_CONN_MAX_AGE", "600")

bind = os.environ.get("GUNICORN_BIND") or f"0.0.0.0:{os.environ.get('PORT', '8000')}"
# One process per core and one more: each runs Python on one core at a time (the GIL), and its
# threads wait on the database and Redis meanwhile. The usual 2 x cores + 1 (for sync workers)
# measured 7 to 10 % fewer calls a second here (bench/, 16 clients on two cores): more
# processes than cores only switch between each other, and hold more database connections.
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() + 1))
# Threads, because a resource acquire may hold its request for up to 60 s (`wait_s`) without
# using a CPU; a sync worker would be blocked for the whole wait.
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = int(os.environ.get("GUNICORN_THREADS", "12"))
# Longer than the longest legitimate request (a 60 s wait) plus margin.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "90"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
keepalive = 5
# Recycle workers now and then, staggered so they never restart together. Rarely: a restart
# costs a second of Django start-up and new connections, which shows in every request's tail
# latency while it lasts (at 5,000 a busy worker restarted about once a minute under load).
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "100000"))
max_requests_jitter = max_requests // 10
# Off unless asked for ("-" is stdout): a line per request cost a fifth of a renewal's CPU
# (docs/performance.md); every refusal is recorded with its request id, and the load balancer
# in front logs requests anyway.
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# Trust X-Forwarded-* only from the proxy in front (set to its address, or * inside a private net).
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")


def post_worker_init(worker: object) -> None:
    """On the embedded default (no Redis, so no beat) each worker runs the periodic jobs on a
    timer; with REDIS_URL set this does nothing and Celery beat and workers run them."""
    from groundcontrol.scheduler import start_embedded

    start_embedded()
