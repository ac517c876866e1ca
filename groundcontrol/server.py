"""The web server: granian serving Django's WSGI application, configured from the environment.

    python -m groundcontrol.server            # the Procfile's web line, compose's and the image's

Chosen by measurement against gunicorn's gthread worker (docs/performance.md, "Choosing the web
server"): granian parses HTTP and holds connections in Rust, so a connection costs no Python
thread until its request's head has arrived, a slow head times out (a setting, below), and each
call cost less of the workers' CPU. It has no timeout for a slow body, which holds a thread while
Django reads it: the proxy in front must buffer bodies (docs/deploy.md). Every value comes from
the environment, and a malformed one stops the process with a message:

- `GC_BIND` (`127.0.0.1:$PORT`, `PORT` 8000): where to listen; `0.0.0.0:8000` beyond loopback.
- `WEB_CONCURRENCY` (cores + 1): worker processes.
- `GC_WEB_THREADS` (12): Python threads per worker, each with its database connection.
- `GC_WEB_HEADER_TIMEOUT_S` (10): a request's head must arrive within this, or the connection
  is closed.
- `GC_WEB_GRACEFUL_TIMEOUT_S` (30): on SIGTERM, how long workers may finish their requests.
- `GC_WEB_ACCESS_LOG` (off): `1` for a line per request on stdout.
- `GC_WEB_LOG_LEVEL` (`info`): the server's own log.

The web tier is stateless (leases live in PostgreSQL): run as many as you like behind a proxy
that checks /readyz (docs/deploy.md says what the proxy must do).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from groundcontrol.env import env_bool, env_float, env_int, env_str

# Granian accepts a header timeout of 1 ms to 60 s.
MAX_HEADER_TIMEOUT_S = 60.0


def web_threads() -> int:
    """`GC_WEB_THREADS` (12): Python threads per worker; the waits' cap per process is half
    of them (settings.GC_WAITS_PER_PROCESS), and one workspace's waits half of that
    (leasing/waits.py)."""
    return env_int("GC_WEB_THREADS", 12, minimum=1)


def bind_address() -> tuple[str, int]:
    """`GC_BIND` as (host, port); loopback on `PORT` (8000) unless told otherwise."""
    raw = env_str("GC_BIND", "").strip()
    if not raw:
        raw = f"127.0.0.1:{env_int('PORT', 8000, minimum=1)}"
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ImproperlyConfigured(f"GC_BIND={raw!r} is not host:port (e.g. 127.0.0.1:8000)")
    return host.strip("[]"), int(port)


def options() -> dict[str, Any]:
    """Granian's settings for Ground Control, from the environment."""
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    host, port = bind_address()
    # One process per core and one more: each runs Python on one core at a time (the GIL), and
    # its threads wait on the database and Redis meanwhile (docs/performance.md).
    workers = env_int("WEB_CONCURRENCY", (os.cpu_count() or 1) + 1, minimum=1)
    threads = web_threads()
    header_timeout_s = env_float("GC_WEB_HEADER_TIMEOUT_S", 10.0, minimum=0.001)
    graceful_s = env_int("GC_WEB_GRACEFUL_TIMEOUT_S", 30, minimum=1)
    access_log = env_bool("GC_WEB_ACCESS_LOG", False)
    log_level = env_str("GC_WEB_LOG_LEVEL", "info").lower()
    if header_timeout_s > MAX_HEADER_TIMEOUT_S:
        raise ImproperlyConfigured(
            f"GC_WEB_HEADER_TIMEOUT_S={header_timeout_s:g} is above granian's limit, "
            f"{MAX_HEADER_TIMEOUT_S:g}"
        )
    if log_level not in {level.value for level in LogLevels}:
        raise ImproperlyConfigured(f"GC_WEB_LOG_LEVEL={log_level!r} is not a log level")
    return {
        "address": host,
        "port": port,
        "interface": Interfaces.WSGI,
        # HTTP/1.1 only: TLS and HTTP/2 are the proxy's (docs/deploy.md), and HTTP/1's header
        # timeout is the one that bounds a slow client.
        "http": HTTPModes.http1,
        "websockets": False,
        "workers": workers,
        # A fixed number of threads per worker: granian's default for WSGI is hundreds, and each
        # thread keeps a database connection (DB_CONN_MAX_AGE), so a burst of 64 calls opened
        # more connections than PostgreSQL's 100 (measured). Budget workers x threads connections
        # per web node. Requests beyond the threads wait inside granian, costing no thread.
        # granian warns at start that this is more threads than cores: they wait on PostgreSQL,
        # Redis and `wait_s` far more than they compute, so it is intended.
        "blocking_threads": threads,
        "http1_settings": HTTP1Settings(header_read_timeout=round(header_timeout_s * 1000)),
        # A worker that dies is started again; one that dies again within 5.5 s of that is
        # taken for a crash loop, and granian stops for its supervisor to restart it.
        "respawn_failed_workers": True,
        "workers_kill_timeout": graceful_s,
        "log_access": access_log,
        "log_level": LogLevels(log_level),
        "factory": True,
    }


def worker_application() -> Callable[..., Any]:
    """Each worker's application (granian calls it once per worker process). On the embedded
    default (no Redis, so no beat) each worker also runs the periodic jobs on a timer; with
    REDIS_URL set that does nothing and Celery beat and workers run them."""
    from groundcontrol.scheduler import start_embedded
    from groundcontrol.wsgi import application

    start_embedded()
    return application


TARGET = "groundcontrol.server:worker_application"


def serve(**overrides: Any) -> None:
    """Run the server in this process (its workers are child processes) until SIGTERM/SIGINT."""
    from granian import Granian

    # Each worker thread keeps its database connection between requests (DB_CONN_MAX_AGE, in
    # seconds): opening one per request cost more than the request itself (docs/performance.md).
    os.environ.setdefault("DB_CONN_MAX_AGE", "600")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "groundcontrol.settings")
    Granian(TARGET, **{**options(), **overrides}).serve()


if __name__ == "__main__":
    serve()
