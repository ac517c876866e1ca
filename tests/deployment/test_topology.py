"""The production topology: Procfile, compose file, Dockerfile and the web server agree and run."""

from __future__ import annotations

import shlex
import subprocess
import time

import httpx
import psycopg
import yaml
from django.conf import settings

from tests.support.processes import ROOT, free_port, laptop_env, manage, stop, wait_until_serving


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_the_procfile_names_web_worker_planner_and_beat() -> None:
    processes = procfile()
    assert set(processes) == {"release", "web", "worker", "planner", "beat"}
    assert processes["release"] == "python manage.py migrate --noinput"
    assert processes["web"] == "python -m groundcontrol.server"
    assert processes["worker"].startswith("celery -A groundcontrol worker ")
    assert processes["beat"].startswith("celery -A groundcontrol beat ")
    # The schedules' planning has a worker of its own, on its own queue; the sweep's worker
    # takes only the default queue (a worker without --queues consumes that one alone).
    assert processes["planner"].startswith("celery -A groundcontrol worker ")
    assert processes["planner"].endswith(" --queues=${GC_CELERY_QUEUE:-groundcontrol}.plan")
    assert "--queues" not in processes["worker"]
    assert settings.GC_PLAN_QUEUE == f"{settings.CELERY_TASK_DEFAULT_QUEUE}.plan"
    assert settings.CELERY_TASK_ROUTES["schedules.plan"] == {"queue": settings.GC_PLAN_QUEUE}


def test_the_compose_file_runs_the_same_processes_on_postgres_and_redis() -> None:
    spec = compose()
    services = spec["services"]
    assert set(services) == {"postgres", "redis", "migrate", "web", "worker", "planner", "beat"}
    processes = procfile()
    assert shlex.join(services["web"]["command"]) == processes["web"]
    assert shlex.join(services["migrate"]["command"]) == processes["release"]
    for name in ("worker", "beat"):
        assert shlex.join(services[name]["command"]).startswith(f"celery -A groundcontrol {name} ")
    assert shlex.join(services["planner"]["command"]) == processes["planner"].replace(
        "${GC_CELERY_QUEUE:-groundcontrol}", "groundcontrol"
    )
    for name in ("migrate", "web", "worker", "planner", "beat"):
        service = services[name]
        assert service["build"] == "."
        env = service["environment"]
        assert (
            env["DATABASE_URL"].startswith("postgresql://")
            and "@postgres:5432/" in env["DATABASE_URL"]
        )
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?")
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy"}
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}
        if name != "migrate":
            assert service["depends_on"]["migrate"] == {
                "condition": "service_completed_successfully"
            }
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    assert "pgdata" in spec["volumes"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -e ." in dockerfile
    assert 'CMD ["python", "-m", "groundcontrol.server"]' in dockerfile
    # The image listens beyond the container's loopback; compose publishes it on the host's only.
    assert "ENV GC_BIND=0.0.0.0:8000" in dockerfile
    assert services["web"]["ports"] == ["127.0.0.1:${PORT:-8000}:8000"]


def test_the_procfile_web_line_serves_with_the_embedded_jobs(tmp_path) -> None:
    env, database = laptop_env(tmp_path, WEB_CONCURRENCY="1", GC_WEB_THREADS="2")
    port = free_port()
    env["PORT"] = str(port)
    env["GC_METRICS_OPEN"] = "1"  # a laptop's own scrape
    manage(env, "migrate", "--noinput", "-v", "0")
    web = subprocess.Popen(
        shlex.split(procfile()["web"]),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/healthz", web)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert (ready.status_code, ready.json()["status"]) == (200, "ready")
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert "gc_attempts" in metrics.text

        # No Redis, so no beat: the web worker runs the sweep itself.
        def swept() -> bool:
            with psycopg.connect(database) as db:
                return bool(
                    db.execute(
                        "SELECT runs FROM fleet_jobrun WHERE name = 'sweep_leases'"
                    ).fetchall()
                )

        deadline = time.monotonic() + 15
        while not swept() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert swept()
    finally:
        stop(web)
