"""The embedded scheduler: on the embedded default (no Redis, no Celery beat) the web process runs
the same periodic jobs on a timer, in one background thread, so a laptop install sweeps, revokes,
notifies and prunes exactly like production.

The table of jobs is the beat schedule (`settings.CELERY_BEAT_SCHEDULE`); each job calls the same
Celery task in-process. It is started by each web worker (`groundcontrol/server.py`, which
`manage.py serve` and `scripts/run` use) only when `GC_EMBEDDED_SCHEDULER` is on (the default
without REDIS_URL), and never by `migrate`, tests or other commands. Several processes running
it at once is harmless: every job is safe to run concurrently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, connection

logger = logging.getLogger(__name__)

# The thread wakes at least this often, so stop() is prompt.
MAX_SLEEP_S = 0.5


@dataclass
class Job:
    name: str
    interval_s: float
    run: Callable[[], object]
    next_run: float = 0.0  # time.monotonic(); 0 runs it at once


def _task_runner(task_name: str) -> Callable[[], object]:
    def run() -> object:
        import ops.tasks  # noqa: F401 - registers the tasks
        from groundcontrol.celery import app

        # Calling a task object runs it here, in this thread, not through a broker.
        return app.tasks[task_name]()

    return run


def jobs_from_settings() -> list[Job]:
    return [
        Job(name=name, interval_s=float(entry["schedule"]), run=_task_runner(entry["task"]))
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
    ]


def _tidy_connections() -> None:
    # Between jobs, as between requests: drop connections past CONN_MAX_AGE or broken (a
    # database restart must not wedge the thread). Never inside a transaction a caller opened.
    if not connection.in_atomic_block:
        close_old_connections()


class Scheduler:
    def __init__(self, jobs: list[Job], *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.jobs = jobs
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_pending(self) -> list[str]:
        """Run every job whose time has come; one failing job never stops the others."""
        ran = []
        for job in self.jobs:
            now = self._monotonic()
            if now < job.next_run:
                continue
            job.next_run = now + job.interval_s
            _tidy_connections()
            try:
                job.run()
            except Exception:
                logger.exception("embedded scheduler: job %s failed", job.name)
            finally:
                _tidy_connections()
            ran.append(job.name)
        return ran

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_pending()
            wait = min(job.next_run for job in self.jobs) - self._monotonic()
            self._stop.wait(min(max(wait, 0.01), MAX_SLEEP_S))

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._loop, name="groundcontrol-scheduler", daemon=True
        )
        self._thread.start()
        logger.info("embedded scheduler started: %s", ", ".join(j.name for j in self.jobs))

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


_lock = threading.Lock()
_embedded: Scheduler | None = None


def start_embedded() -> Scheduler | None:
    """Start this process's scheduler once, if the embedded default is on; else None."""
    global _embedded
    if not settings.GC_EMBEDDED_SCHEDULER:
        return None
    with _lock:
        if _embedded is None:
            _embedded = Scheduler(jobs_from_settings())
            _embedded.start()
    return _embedded
