"""The embedded default: its own PostgreSQL, and the same jobs on a timer inside the web process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from django.test import override_settings

from fleet.models import Attempt
from groundcontrol import embedded_postgres
from groundcontrol import scheduler as embedded
from groundcontrol.env import var_dir
from leases import clock
from leases.models import Event
from tests.support.processes import ROOT, free_port, laptop_env, manage, stop, wait_until_serving
from webhooks.services import webhook_verify


@pytest.mark.django_db  # the scheduler tidies database connections between jobs
def test_it_runs_each_job_on_its_interval_and_a_failing_job_stops_no_other() -> None:
    now = [0.0]
    ran: list[str] = []

    def job(name: str, fail: bool = False) -> Callable[[], None]:
        def run() -> None:
            ran.append(name)
            if fail:
                raise RuntimeError("boom")

        return run

    scheduler = embedded.Scheduler(
        [
            embedded.Job("sweep", 1.0, job("sweep")),
            embedded.Job("broken", 1.0, job("broken", fail=True)),
            embedded.Job("prune", 5.0, job("prune")),
        ],
        monotonic=lambda: now[0],
    )
    assert scheduler.run_pending() == ["sweep", "broken", "prune"]
    now[0] = 0.999
    assert scheduler.run_pending() == []
    now[0] = 1.0
    assert scheduler.run_pending() == ["sweep", "broken"]
    now[0] = 5.0
    assert scheduler.run_pending() == ["sweep", "broken", "prune"]
    assert ran.count("broken") == 3


def test_its_jobs_are_the_beat_schedule(settings) -> None:
    jobs = {job.name: job.interval_s for job in embedded.jobs_from_settings()}
    assert jobs == {
        name: float(entry["schedule"]) for name, entry in settings.CELERY_BEAT_SCHEDULE.items()
    }
    assert set(jobs) == {
        "sweep-leases",
        "revoke-keys",
        "deliver-webhooks",
        "prune-records",
        "plan-schedules",
        "flag-idle",
    }


@pytest.mark.django_db
def test_a_tick_of_the_embedded_jobs_sweeps_a_quiet_hand(
    owner, make_run, claim, frozen_clock: datetime
) -> None:
    run = make_run(heartbeat_interval_s=10, grace_s=10, slots=1)
    view = claim(owner, run)
    scheduler = embedded.Scheduler(embedded.jobs_from_settings())
    clock.advance(21)
    assert "sweep-leases" in scheduler.run_pending()
    kinds = Event.objects.filter(attempt_id=view.attempt.pk).values_list("kind", flat=True)
    assert list(kinds.order_by("id")) == ["claimed", "late", "stalled", "lost"]
    assert Attempt.objects.get(pk=view.attempt.pk).end == "lost"


def test_it_starts_only_on_the_embedded_default_and_once_per_process(monkeypatch) -> None:
    started: list[embedded.Scheduler] = []
    monkeypatch.setattr(embedded.Scheduler, "start", lambda self: started.append(self))
    monkeypatch.setattr(embedded, "_embedded", None)
    with override_settings(GC_EMBEDDED_SCHEDULER=False):
        assert embedded.start_embedded() is None
    with override_settings(GC_EMBEDDED_SCHEDULER=True):
        first = embedded.start_embedded()
        assert embedded.start_embedded() is first
    assert started == [first]


# --- The embedded PostgreSQL ---------------------------------------------------------------------


_VERSION = (
    "from django.db import connection\n"
    "with connection.cursor() as c:\n"
    "    c.execute('SELECT version(), current_database()')\n"
    "    print(*c.fetchone(), sep='|')\n"
)


def test_the_first_query_without_a_database_url_starts_the_embedded_postgresql(tmp_path) -> None:
    env, _ = laptop_env(tmp_path, start=False)
    manage(env, "check")  # the settings and the checks need no database: nothing starts
    assert not embedded_postgres.running(tmp_path)
    version, database = manage(env, "shell", "-v", "0", "-c", _VERSION).strip().split("|")
    assert version.startswith("PostgreSQL ") and database == "groundcontrol"
    # It runs on after the process that started it, as a database service does, and the next
    # process finds it (and what the first one wrote) there.
    assert embedded_postgres.running(tmp_path)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "shell", "-v", "0", "-c", _WORKSPACE_SCRIPT)
    url = embedded_postgres.database_url(tmp_path)
    with psycopg.connect(url) as db:
        assert db.execute("SELECT name FROM fleet_workspace").fetchall() == [("laptop",)]
    # Its socket is the only way in: it listens on no TCP port.
    with psycopg.connect(url) as db:
        assert db.execute("SHOW listen_addresses").fetchone() == ("",)
    # `scripts/run` stops it on exit by the module's command, which names the same directory.
    stopped = subprocess.run(
        [sys.executable, "-m", "groundcontrol.embedded_postgres", "stop"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped"), stopped.stderr
    assert not embedded_postgres.running(tmp_path)


def test_the_install_keeps_its_files_under_var_in_the_repository_unless_told(monkeypatch) -> None:
    monkeypatch.delenv("GC_VAR_DIR", raising=False)
    assert var_dir() == ROOT / "var"
    monkeypatch.setenv("GC_VAR_DIR", "/srv/gc")
    assert var_dir() == Path("/srv/gc")


# --- The whole embedded default, as `scripts/run` starts it ----------------------------------


def _claim(env: dict[str, str], hand: str, process: str) -> dict[str, int]:
    """Claim the laptop's quiet run in a separate process, as a hand would through the API."""
    output = manage(env, "shell", "-v", "0", "-c", _claim_script(hand, process))
    return json.loads(output.strip().splitlines()[-1])


_WORKSPACE_SCRIPT = (
    "from hands import services as hands\nhands.workspace_get_or_create(name='laptop')\n"
)


def _claim_script(hand: str, process: str) -> str:
    return (
        "import json\n"
        "from fleet.models import Run\n"
        "from fleet.attempts import services as attempts\n"
        "from fleet.plan import services as plan\n"
        "from hands import services as hands\n"
        "ws = hands.workspace_get_or_create(name='laptop')\n"
        "lane, _ = hands.lane_create(workspace=ws, slug='demo')\n"
        "wp, _ = plan.work_package_create(lane=lane, key='quiet', title='Quiet')\n"
        "run = (Run.objects.filter(work_package=wp).first() or plan.run_create(work_package=wp, "
        "title='Quiet', slots=1, heartbeat_interval_s=1, grace_s=2))\n"
        f"hand, _ = hands.hand_create(workspace=ws, name={hand!r})\n"
        f"view = attempts.attempt_claim(hand=hand, run_id=run.pk, process_id={process!r})\n"
        "print(json.dumps({'attempt': view.attempt.pk, 'fence': view.lease.fence, "
        "'workspace': ws.pk}))\n"
    )


def test_a_quiet_hand_is_swept_by_the_embedded_default(tmp_path, receiver) -> None:
    env, database = laptop_env(
        tmp_path,
        GC_SWEEP_INTERVAL_S="0.2",
        GC_WEBHOOK_INTERVAL_S="0.2",
        GC_WEBHOOK_ALLOWED_HOSTS="127.0.0.1",  # the receiver is local; webhooks refuse it else
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_serving(f"{base}/healthz", server)
        ready = httpx.get(f"{base}/readyz", timeout=5).json()
        assert ready["checks"] == {"database": "ok", "redis": "not configured"}

        # The webhook is registered before the claim: its run's window is 1 s and its grace 2 s,
        # so on a loaded machine the attempt could be lost before a later registration.
        manage(env, "shell", "-v", "0", "-c", _WORKSPACE_SCRIPT)
        manage(
            env,
            "webhook_add",
            "--workspace",
            "laptop",
            "--url",
            receiver.url,
            "--kind",
            "lost",
            "--secret",
            "laptop-secret-0123456789",
        )
        claimed = _claim(env, "quiet-hand", "laptop:1")

        def kinds() -> list[str]:
            with psycopg.connect(database) as db:
                rows = db.execute(
                    "SELECT kind FROM leases_event WHERE attempt_id = %s ORDER BY id",
                    (claimed["attempt"],),
                ).fetchall()
            return [kind for (kind,) in rows]

        deadline = time.monotonic() + 45  # ends as soon as both arrive; room for a loaded machine
        while time.monotonic() < deadline and (kinds()[-1:] != ["lost"] or not receiver.received):
            time.sleep(0.2)
        time.sleep(0.6)  # a few more sweeps: nothing may be recorded twice
        assert kinds() == ["claimed", "late", "stalled", "lost"]
        with psycopg.connect(database) as db:
            (end,) = db.execute(
                'SELECT "end" FROM fleet_attempt WHERE id = %s', (claimed["attempt"],)
            ).fetchone()
        assert end == "lost"
        [(headers, body)] = receiver.received
        assert json.loads(body)["attempt"] == claimed["attempt"]
        assert webhook_verify(
            secret="laptop-secret-0123456789",
            header=headers["x-groundcontrol-signature"],
            body=body,
        )
        # The slot is open again: another hand takes it at the next fence.
        again = _claim(env, "next-hand", "laptop:2")
        assert again["fence"] == claimed["fence"] + 1
    finally:
        stop(server)
        assert server.stdout is not None
        output = server.stdout.read()
        server.stdout.close()
    assert "embedded scheduler: sweep-leases every 0.2s" in output
