"""Run the demo fleet: simulated hands that use the real REST API against a running server."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from demo import fleet as demo


class Command(BaseCommand):
    help = (
        "Prepare the demo workspace (a lane, runs with short intervals, four hands with fresh "
        "keys) and run the hands against the server at --url until interrupted: one healthy, "
        "one that goes quiet (late, stalled, lost), one that finishes with a pull request, one "
        "that is denied a resource lease and waits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
        parser.add_argument("--workspace", default="demo")
        parser.add_argument(
            "--duration",
            type=float,
            default=None,
            help="stop after this many seconds (default: run until interrupted)",
        )
        parser.add_argument(
            "--fast",
            action="store_true",
            help="second-long intervals (for tests): every state within seconds",
        )
        parser.add_argument(
            "--wait-for-server",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="how long to wait for the server to answer first",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"]
        if not demo.wait_for_server(url, timeout_s=options["wait_for_server"]):
            raise CommandError(f"no server answered at {url}")
        timings = demo.FAST if options["fast"] else demo.Timings()
        plan = demo.setup(workspace_name=options["workspace"], timings=timings)
        fleet = demo.DemoFleet(plan, url=url, timings=timings, say=self._say)
        done = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: done.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        self._say(
            f"demo fleet: {len(fleet.hands)} hands working in workspace "
            f"{options['workspace']!r} against {url}"
        )
        try:
            fleet.start()
            done.wait(options["duration"])
        finally:
            fleet.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._say("demo fleet: stopped")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
