"""Serve the embedded default: the production web server (granian, one worker) plus the
in-process scheduler."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from groundcontrol import server
from groundcontrol.scheduler import jobs_from_settings


class Command(BaseCommand):
    help = (
        "Run the web server (granian, as in production; one worker on 127.0.0.1:8000 unless "
        "given) and, on the embedded default (no REDIS_URL), the periodic jobs (sweep, key "
        "revocation, webhooks, retention) on a timer in its worker."
    )
    # The checks ran in `migrate`; a database check here would open a connection in the
    # process the workers are forked from.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "addrport", nargs="?", help="host:port (default: GC_BIND, else 127.0.0.1:$PORT or 8000)"
        )
        parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")

    def handle(self, *args: Any, **options: Any) -> None:
        overrides: dict[str, Any] = {"workers": max(1, options["workers"])}
        if options["addrport"]:
            host, sep, port = options["addrport"].rpartition(":")
            if not sep or not port.isdigit():
                raise CommandError(f"{options['addrport']!r} is not host:port")
            overrides.update(address=host.strip("[]") or "127.0.0.1", port=int(port))
        if settings.GC_EMBEDDED_SCHEDULER:
            jobs = ", ".join(
                f"{job.name} every {job.interval_s:g}s" for job in jobs_from_settings()
            )
            self.stdout.write(f"embedded scheduler: {jobs}")
        else:
            self.stdout.write(
                "embedded scheduler off: run `celery -A groundcontrol beat` and workers"
            )
        self.stdout.flush()
        # Each worker starts the scheduler when it loads the application
        # (`server.worker_application`), as in production without Redis.
        server.serve(**overrides)
