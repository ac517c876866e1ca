"""Redis stopped (a redis-server of the test's own, never the machine's): grants and refusals stay
correct, since none of them needs Redis; sweeps and webhooks wait, and catch up when it returns."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.test import override_settings

from hands import services as hand_services
from leases.models import Event
from ops.models import JobRun
from tests.reliability.live import ROOT, Api, WebServer, database_url, free_port, server_env
from webhooks.services import webhook_create

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server"),
]


class OwnRedis:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.dir = tmp_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            probe = subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True
            )
            if probe.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def hooks() -> Iterator[list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    received.append({"url": f"http://127.0.0.1:{server.server_port}/hooks"})
    yield received
    server.shutdown()
    server.server_close()


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _settled(job: str, *, quiet_s: float, timeout: float) -> int:
    """The job's run count once it has not changed for `quiet_s`."""
    deadline = time.monotonic() + timeout
    runs, since = JobRun.objects.get(name=job).runs, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now_runs = JobRun.objects.get(name=job).runs
        if now_runs != runs:
            runs, since = now_runs, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return runs
    raise AssertionError(f"{job} kept running with its broker down")


def test_without_redis_leases_stay_correct_and_jobs_catch_up_when_it_returns(
    workspace, owner, teammate, make_run, hooks, tmp_path: Path
) -> None:  # noqa: ANN001
    url = hooks.pop(0)["url"]
    with override_settings(GC_WEBHOOK_ALLOWED_HOSTS=["127.0.0.1"]):  # the receiver is local
        webhook_create(workspace=workspace, url=url, kinds=["lease_expired", "lost"], actor="test")
    key_a = hand_services.key_issue(hand=owner, scopes=["work", "leases"], actor="test").plaintext
    key_b = hand_services.key_issue(
        hand=teammate, scopes=["work", "leases"], actor="test"
    ).plaintext
    run = make_run(slots=1, heartbeat_interval_s=1, grace_s=1)
    redis = OwnRedis(tmp_path)
    redis.start()
    queue = f"gc-redis-{uuid.uuid4().hex[:10]}"
    env = server_env(
        database_url(settings.DATABASES["default"]),
        REDIS_URL=redis.url,
        GC_CELERY_QUEUE=queue,
        GC_RATE_LIMIT_PER_MINUTE="100000",
        GC_SWEEP_INTERVAL_S="0.5",
        GC_WEBHOOK_INTERVAL_S="0.5",
        GC_WEBHOOK_ALLOWED_HOSTS="127.0.0.1",
    )
    celery = [sys.executable, "-m", "celery", "-A", "groundcontrol"]
    jobs = [
        subprocess.Popen(
            [
                *celery,
                "worker",
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"{queue}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=(tmp_path / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*celery, "beat", "--max-interval=1", f"--schedule={tmp_path / 'beat'}"],
            cwd=ROOT,
            env=env,
            stdout=(tmp_path / "beat.log").open("wb"),
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        with WebServer(env=env, log=tmp_path / "server.log", workers=2) as server:
            a, b = Api(server.url, key_a), Api(server.url, key_b)
            _wait(
                lambda: JobRun.objects.filter(name="sweep_leases", runs__gte=1).exists(),
                # A wait, not a verdict: the worker's and beat's boot took over 30 s with three
                # suites on two cores.
                120,
                "the first sweep",
            )
            redis.stop()
            # A sweep the worker had already taken from the queue may still finish: wait until
            # none has for three intervals, then take the leases whose ends it must not record.
            sweeps_before = _settled("sweep_leases", quiet_s=1.5, timeout=60)
            quiet = a.ok("post", f"/runs/{run.pk}/claim", {"process_id": "quiet:1"})
            dropped = a.ok(
                "post",
                "/leases/acquire",
                {"resource": "dropped", "ttl_s": 1, "process_id": "quiet:1"},
            )
            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            granted = b.post(
                "/leases/acquire", {"resource": "build", "ttl_s": 30, "process_id": "b:1"}
            )
            denied = a.post(
                "/leases/acquire", {"resource": "build", "ttl_s": 30, "process_id": "a:1"}
            )
            time.sleep(2.5)  # the quiet hand's slot is past its grace, unswept
            reclaimed = b.post(f"/runs/{run.pk}/claim", {"process_id": "b:1"})
            stale = a.post(
                f"/attempts/{quiet['id']}/reports",
                {"fence": quiet["fence"], "process_id": "quiet:1", "kind": "heartbeat"},
            )
            expired_check = a.post(
                "/leases/check", {"resource": "dropped", "fence": dropped["fence"]}
            )
            time.sleep(1.5)
            sweeps_during = JobRun.objects.get(name="sweep_leases").runs - sweeps_before
            unrecorded = not Event.objects.filter(kind="lease_expired", resource="dropped").exists()

            redis.start()  # the same port: workers, beat and the web tier reconnect
            _wait(
                lambda: Event.objects.filter(kind="lease_expired", resource="dropped").exists(),
                60,
                "the sweep to record the expiry it missed",
            )
            _wait(
                lambda: {h.get("kind") for h in hooks} >= {"lease_expired", "lost"},
                60,
                "the webhooks that piled up",
            )
            a.close()
            b.close()
    finally:
        for process in jobs:
            process.kill()
            process.wait()
        redis.stop()
    assert ready.status_code == 503 and ready.json()["checks"]["redis"].startswith("unavailable")
    assert granted.status_code == 201 and granted.json()["fence"] == 1
    assert denied.status_code == 409 and denied.json()["error"]["code"] == "lease_held"
    assert reclaimed.status_code == 201 and reclaimed.json()["fence"] == quiet["fence"] + 1
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "lease_lost"
    assert expired_check.status_code == 409
    assert expired_check.json()["error"]["code"] == "lease_lost"
    assert sweeps_during == 0 and unrecorded  # nothing recorded while Redis was down
    expired = Event.objects.get(kind="lease_expired", resource="dropped")
    assert (expired.actor, expired.fence) == ("system", dropped["fence"])
    lost = Event.objects.get(kind="lost", attempt_id=quiet["id"])
    assert lost.data["reason"] == "slot reclaimed"
    delivered = [h["id"] for h in hooks]
    assert len(delivered) == len(set(delivered))  # each event delivered once
    assert {expired.pk, lost.pk} <= set(delivered)
