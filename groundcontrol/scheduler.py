"""The embedded scheduler: on the embedded default (no Redis, no Celery beat) the web process runs
the same periodic jobs on a timer, in one background thread, so a laptop install sweeps, revokes,
notifies and prunes exactly like production.

The table of jobs is the beat schedule (`settings.CELERY_BEAT_SCHEDULE`); each job calls the same
Celery task in-process. It is started by each web worker (`groundcontrol/server.py`, which
`manage.py serve` and `scripts/run` use) only when `GC_EMBEDDED_SCHEDULER` is on (the default
without REDIS_URL), and never by `migrate`, tests or other commands. Several processes running
it at once is harmless: every job is safe to run concurrently.

Each Celery queue the jobs are routed to (`settings.CELERY_TASK_ROUTES`) has a thread of its own,
as it has workers of its own in production: the schedules' planning never runs on the thread
that sweeps, so a long run of it delays no lease expiry.
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
    queue: str = ""  # the Celery queue its task is routed to: each has a thread of its own


def _task_runner(task_name: str) -> Callable[[], object]:
    def run() -> object:
        import ops.tasks  # noqa: F401 - registers the tasks
        from groundcontrol.celery import app

        # Calling a task object runs it here, in this thread, not through a broker.
        return app.tasks[task_name]()

    return run


def queue_of(task_name: str) -> str:
    """The queue a task is routed to, as Celery routes it (`CELERY_TASK_ROUTES`, else the
    default queue)."""
    route = settings.CELERY_TASK_ROUTES
    return str(route.get(task_name, {}).get("queue", settings.CELERY_TASK_DEFAULT_QUEUE))


def jobs_from_settings() -> list[Job]:
    return [
        Job(
            name=name,
            interval_s=float(entry["schedule"]),
            run=_task_runner(entry["task"]),
            queue=queue_of(entry["task"]),
        )
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
        self._threads: list[threading.Thread] = []

    @property
    def queues(self) -> list[str]:
        return list(dict.fromkeys(job.queue for job in self.jobs))

    def run_pending(self, queue: str | None = None) -> list[str]:
        """Run every job (of `queue`, or of every queue) whose time has come; one failing job
        never stops the others."""
        ran = []
        for job in self.jobs:
            if queue is not None and job.queue != queue:
                continue
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

    def _loop(self, queue: str) -> None:
        mine = [job for job in self.jobs if job.queue == queue]
        try:
            while not self._stop.is_set():
                self.run_pending(queue)
                wait = min(job.next_run for job in mine) - self._monotonic()
                self._stop.wait(min(max(wait, 0.01), MAX_SLEEP_S))
        finally:
            connection.close()  # this thread's own

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        for queue in self.queues:
            thread = threading.Thread(
                target=self._loop,
                args=(queue,),
                name=f"groundcontrol-scheduler-{queue}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()
        logger.info("embedded scheduler started: %s", ", ".join(j.name for j in self.jobs))

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    @property
    def running(self) -> bool:
        return bool(self._threads) and all(thread.is_alive() for thread in self._threads)


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
