"""Serve the embedded default: the development web server plus the in-process scheduler."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from groundcontrol.scheduler import start_embedded


class Command(BaseCommand):
    help = (
        "Run the web server and, on the embedded default (no REDIS_URL), the periodic jobs "
        "(sweep, key revocation, webhooks, retention) on a timer in the same process."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, *args: Any, **options: Any) -> None:
        scheduler = start_embedded()
        if scheduler is not None:
            jobs = ", ".join(f"{job.name} every {job.interval_s:g}s" for job in scheduler.jobs)
            self.stdout.write(f"embedded scheduler: {jobs}")
        else:
            self.stdout.write(
                "embedded scheduler off: run `celery -A groundcontrol beat` and workers"
            )
        # No autoreloader: it would fork a second process, and the scheduler with it.
        call_command("runserver", options["addrport"], use_reloader=False)
