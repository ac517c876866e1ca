"""Production topology for real: a Celery worker and Celery beat, as separate processes, against
Redis and PostgreSQL, enforce a quiet hand's lease: late, stalled, lost, and its slot reopens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import settings

from fleet.attempts import services as attempt_services
from fleet.models import Attempt
from fleet.plan.selectors import run_slots
from leases.models import Event
from ops.models import JobRun
from tests.reliability.live import database_url as live_database_url

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("quiet_notifications"),
]

ROOT = Path(__file__).resolve().parents[2]
# Its own Redis database, so the test's broker traffic never meets anyone else's.
WORKER_REDIS_DB = 14


def _worker_redis_url() -> str:
    base = urlsplit(settings.REDIS_URL or "redis://127.0.0.1:6379/0")
    return urlunsplit((base.scheme, base.netloc, f"/{WORKER_REDIS_DB}", "", ""))


def _database_url() -> str:
    """The test database this test runs in, for the worker and beat processes."""
    return live_database_url(settings.DATABASES["default"])


@pytest.fixture
def celery_topology(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Start `celery worker` and `celery beat`; always stop them, and tidy the broker."""
    url = _worker_redis_url()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"needs Redis at {url}")
    queue = f"gc-test-{uuid.uuid4().hex[:12]}"
    env = {name: value for name, value in os.environ.items() if name != "GC_EMBEDDED_SCHEDULER"}
    env.update(
        DJANGO_SETTINGS_MODULE="groundcontrol.settings",
        DATABASE_URL=_database_url(),
        REDIS_URL=url,
        GC_CELERY_QUEUE=queue,
        GC_SWEEP_INTERVAL_S="0.25",
        PYTHONUNBUFFERED="1",
    )
    celery = [sys.executable, "-m", "celery", "-A", "groundcontrol"]
    commands = {
        "worker": [
            *celery,
            "worker",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
            "-n",
            f"{queue}@%h",
        ],
        "beat": [
            *celery,
            "beat",
            "--loglevel=INFO",
            "--max-interval=1",
            f"--schedule={tmp_path / 'beat-schedule'}",
            f"--pidfile={tmp_path / 'beat.pid'}",
        ],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    try:
        for name, command in commands.items():
            with logs[name].open("wb") as log:
                processes[name] = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                )
        yield {name: str(path) for name, path in logs.items()}
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        client = redis.Redis.from_url(url)
        # And the planner's queue, which beat fills and no worker here takes.
        for name in (queue, f"{queue}.plan"):
            client.delete(name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")
        client.close()


def _tail(logs: dict[str, str]) -> str:
    return "\n".join(
        f"--- {name}\n" + Path(path).read_text(errors="replace")[-3000:]
        for name, path in logs.items()
    )


def _wait_for(condition, timeout: float, logs: dict[str, str], what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}\n{_tail(logs)}")


def test_a_real_worker_and_beat_sweep_a_quiet_hand_and_reopen_its_slot(
    celery_topology, owner, teammate, make_run
) -> None:
    logs = celery_topology
    # Beat has enqueued and the worker has run at least one sweep: the topology is up.
    _wait_for(
        lambda: JobRun.objects.filter(name="sweep_leases", runs__gte=1).exists(),
        20,
        logs,
        "the first sweep",
    )
    run = make_run(heartbeat_interval_s=1, grace_s=2, slots=1)
    view = attempt_services.attempt_claim(hand=owner, run_id=run.pk, process_id="quiet:1")
    attempt_id = view.attempt.pk

    def recorded() -> list[str]:
        return list(
            Event.objects.filter(attempt_id=attempt_id)
            .exclude(kind="claimed")
            .order_by("id")
            .values_list("kind", flat=True)
        )

    _wait_for(lambda: "lost" in recorded(), 15, logs, "late, stalled and lost")
    time.sleep(1.0)  # four more sweeps: a second record of any transition would show now
    assert recorded() == ["late", "stalled", "lost"], _tail(logs)
    assert set(
        Event.objects.filter(
            attempt_id=attempt_id, kind__in=["late", "stalled", "lost"]
        ).values_list("actor", flat=True)
    ) == {"system"}
    attempt = Attempt.objects.get(pk=attempt_id)
    assert (attempt.end, attempt.end_reason) == ("lost", "no heartbeat within grace")
    assert [slot.state for slot in run_slots(run=run)] == ["open"]
    again = attempt_services.attempt_claim(hand=teammate, run_id=run.pk, process_id="next:1")
    assert (again.attempt.slot.index, again.lease.fence) == (0, 2)
