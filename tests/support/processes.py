"""Helpers for tests that start real processes (the embedded server, gunicorn, Celery)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from groundcontrol import embedded_postgres

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The var dirs whose embedded PostgreSQL a test started (`laptop_env`); tests/conftest.py stops
# each after its test.
STARTED: list[Path] = []


def laptop_env(
    tmp_path: Path, *, start: bool = True, stopped_by_caller: bool = False, **extra: str
) -> tuple[dict[str, str], str]:
    """The environment of a laptop install, and its database's URL: no DATABASE_URL (so the
    embedded PostgreSQL under a fresh var dir, started here as `scripts/run` starts it first, and
    joined by every process the test starts), no Redis. Not `start`ed: the URL is "". Its
    PostgreSQL stops after the test, unless the caller (a fixture wider than a test) stops it."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "REDIS_URL", "GC_EMBEDDED_SCHEDULER")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="groundcontrol.settings",
        GC_VAR_DIR=str(tmp_path),
        PYTHONUNBUFFERED="1",
        # The Procfile's commands (gunicorn, celery) come from the interpreter's environment.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    )
    if not stopped_by_caller:
        STARTED.append(tmp_path)
    return env, embedded_postgres.database_url(tmp_path) if start else ""


def stop_laptops() -> None:
    while STARTED:
        embedded_postgres.stop(STARTED.pop())


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        # A wait, not a verdict: the embedded PostgreSQL's first start and every migration took
        # over 60 s with two CI runs on two cores.
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_until_serving(url: str, process: subprocess.Popen, timeout: float = 20) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server exited"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"nothing served {url} within {timeout}s")


def stop(process: subprocess.Popen) -> None:  # type: ignore[type-arg]
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
