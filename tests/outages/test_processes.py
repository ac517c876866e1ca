"""Processes that die or stop: a web server worker killed mid-request, a Celery worker killed
mid-sweep, and the whole control plane frozen for longer than a lease's TTL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection
from groundcontrol_client import Client, Hand, LeaseLost, RetryPolicy

from hands import services as hand_services
from leases.models import Event, Lease
from tests.outages.support import Load, assert_nothing_half_applied, fleet_setup
from tests.reliability.live import ROOT, Api, WebServer, database_url, server_env

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _boss_key(workspace) -> str:  # noqa: ANN001
    boss, _ = hand_services.hand_create(workspace=workspace, name="boss")
    return hand_services.key_issue(
        hand=boss, scopes=hand_services.ALL_SCOPES, actor="test"
    ).plaintext


def _started_at(pid: int) -> int:
    """A process's start time in clock ticks since boot (/proc/PID/stat, field 22)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[19])


def test_a_web_worker_killed_mid_request_leaves_no_partial_state(workspace, tmp_path: Path) -> None:  # noqa: ANN001
    url = database_url(settings.DATABASES["default"])
    rng = random.Random(3)
    kills = 0
    with WebServer(env=server_env(url), log=tmp_path / "server.log", workers=3) as server:
        load = Load(fleet_setup(server.url, _boss_key(workspace))).start()
        time.sleep(1)
        for _ in range(6):
            # Never the worker started last: granian takes a worker that dies again within
            # 5.5 s of its restart for a crash loop and stops altogether (for its supervisor to
            # restart), which is not the fault this test is about.
            workers = sorted(server.worker_pids(), key=_started_at)
            os.kill(rng.choice(workers[:-1]), signal.SIGKILL)
            kills += 1
            time.sleep(0.7)
        last_kill = time.monotonic()

        def served_again() -> bool:
            # The master has started new workers and they answer (on two loaded cores a
            # worker's start took longer than the 3 s this once waited).
            return any(a.status in (200, 201) and a.at > last_kill + 1 for a in list(load.answers))

        deadline = last_kill + 60
        while not served_again() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # and a few calls more on the new workers
        load.finish()
        log = server.tail()
    statuses = load.statuses()
    broken = sum(count for (status, _), count in statuses.items() if status is None)
    assert not [s for s in statuses if s[0] is not None and s[0] >= 500], (statuses, log)
    assert broken >= 1, statuses  # some calls really were cut off mid-request
    assert any(a.status in (200, 201) and a.at > last_kill + 1 for a in load.answers), statuses
    # A call cut off either happened whole or not at all; the rest are as answered.
    assert_nothing_half_applied(url, load, unknown_ok=True)
    assert kills == 6


@pytest.fixture
def celery_worker(tmp_path: Path) -> Iterator[dict[str, object]]:
    """`celery worker` processes against this test's database and a queue of its own; start
    as many as the test asks for, every one stopped at the end."""
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).ping()
    except (redis.RedisError, ValueError):
        if os.environ.get("CI"):
            raise
        pytest.skip("needs Redis (REDIS_URL)")
    queue = f"gc-faults-{uuid.uuid4().hex[:10]}"
    env = server_env(
        database_url(settings.DATABASES["default"]),
        REDIS_URL=settings.REDIS_URL,
        GC_CELERY_QUEUE=queue,
        GC_SWEEP_BATCH="10",
        GC_NOTIFY_ON_COMMIT="0",
    )
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{len(started)}.log"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "groundcontrol",
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
                "-n",
                f"{queue}-{len(started)}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        started.append(process)
        deadline = time.monotonic() + 30
        while b"ready" not in log.read_bytes() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.1)
        return process

    yield {"start": start, "queue": queue}
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(queue, f"_kombu.binding.{queue}")
    client.close()


def test_a_celery_worker_killed_mid_sweep_leaves_the_rest_to_the_next_and_nothing_twice(
    workspace, celery_worker
) -> None:  # noqa: ANN001
    from groundcontrol.celery import app

    due = 3000
    with connection.cursor() as cursor:
        # Resource leases whose deadline passed ten seconds ago and that no sweep has seen.
        cursor.execute(
            "INSERT INTO leases_lease (workspace_id, resource, kind, status, holder, process_id, "
            "fence, interval_s, grace_s, acquired_at, renewed_at, deadline, noticed_state, "
            "next_check_at, mode, shared_by) "
            "SELECT %s, 'due/' || g, 'resource', 'held', 'hand-a', 'p', 1, 5, 0, "
            "now() - interval '15 s', now() - interval '15 s', now() - interval '10 s', 'live', "
            "now() - interval '10 s', 'exclusive', '' FROM generate_series(1, %s) AS g",
            [workspace.pk, due],
        )

    def recorded() -> int:
        return Event.objects.filter(kind="lease_expired", resource__startswith="due/").count()

    worker = celery_worker["start"]()
    app.send_task("fleet.sweep_leases", queue=celery_worker["queue"])
    deadline = time.monotonic() + 30
    while recorded() == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    worker.kill()  # SIGKILL, mid-sweep: some batches committed, one perhaps mid-transaction
    worker.wait()
    time.sleep(0.5)
    at_kill = recorded()
    assert 0 < at_kill < due, f"the kill did not land mid-sweep ({at_kill} of {due} recorded)"
    # What was committed is whole: each freed lease has its event, each held one has none.
    freed = Lease.objects.filter(resource__startswith="due/", status="free").count()
    assert freed == at_kill

    celery_worker["start"]()
    app.send_task("fleet.sweep_leases", queue=celery_worker["queue"])
    deadline = time.monotonic() + 60
    while recorded() < due and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    events = Event.objects.filter(kind="lease_expired", resource__startswith="due/")
    assert events.count() == due
    assert events.values("resource").distinct().count() == due  # nothing recorded twice
    assert not Lease.objects.filter(resource__startswith="due/", status="held").exists()


def test_a_control_plane_down_past_the_ttl_never_expires_a_lease_before_its_promise(
    workspace, owner, teammate, tmp_path: Path
) -> None:  # noqa: ANN001
    key_a = hand_services.key_issue(hand=owner, scopes=["leases"], actor="test").plaintext
    key_b = hand_services.key_issue(hand=teammate, scopes=["leases"], actor="test").plaintext
    url = database_url(settings.DATABASES["default"])
    ttl = 3.0
    with WebServer(env=server_env(url), log=tmp_path / "server.log", workers=2) as server:
        holder = Hand(
            Client(server.url, key_a, timeout=1.5, retry=RetryPolicy(retries=0)),
            process_id="holder:1",
        )
        held = holder.lease("deploy", ttl=ttl).open()
        time.sleep(1.6)  # a renewal or so accepted
        promised = held.lease.expires_at  # the last deadline the server promised the holder
        assert promised is not None and not held.lost
        os.killpg(server.process.pid, signal.SIGSTOP)  # master, workers and their sweeps
        frozen_at = time.time()
        answer: dict[str, object] = {}

        def compete() -> None:
            with Api(server.url, key_b, timeout=30) as api:
                response = api.post(
                    "/leases/acquire", {"resource": "deploy", "ttl_s": 60, "process_id": "rival:1"}
                )
                answer.update(status=response.status_code, body=response.json())

        rival = threading.Thread(target=compete)
        rival.start()  # queued in the listen backlog until the control plane is back
        locally_lost_at = None
        while time.time() < frozen_at + 2 * ttl:
            if locally_lost_at is None and held.lost:
                locally_lost_at = time.time()
            time.sleep(0.01)
        os.killpg(server.process.pid, signal.SIGCONT)
        rival.join(30)
        check = Api(server.url, key_a).post(
            "/leases/check", {"resource": "deploy", "fence": held.fence}
        )
        with pytest.raises(LeaseLost):  # leaving the block says the lease was lost
            held.__exit__(None, None, None)
        holder.close()
    # The holder stopped trusting its lease by itself, no later than the promise...
    assert locally_lost_at is not None
    assert locally_lost_at <= promised.timestamp() + 0.01
    # ...and the server never treated it as expired before that promise.
    assert answer["status"] == 201, answer
    lease = answer["body"]
    assert lease["fence"] == held.fence + 1
    assert datetime.fromisoformat(lease["acquired_at"]) > promised
    assert check.status_code == 409 and check.json()["error"]["code"] == "stale_fence"
    expired = Event.objects.get(kind="lease_expired", resource="deploy")
    assert expired.data["deadline"] == promised.isoformat()
    assert (
        not Event.objects.filter(kind="lease_acquired", resource="deploy", at__lt=promised)
        .exclude(fence=held.fence)
        .exists()
    )
