"""Issue 32's block: a harness's hook answered by the server, and `gctl hook` from a cold start.

- `hook write (held)`: each client is a Claude Code session (its own hand and key) posting a
  `PreToolUse` Write of one of `HELD_FILES` files it holds: the decision is the session's
  touch, its renew-all and the naming (`harnesses.services`).
- `hook write (new file)`: each post writes a file the session does not hold yet: the same and
  the hot acquire. A session is renewed by every event, so it moves to a new one every
  `NEW_PER_SESSION` files, as a real session holds tens of files, not thousands.
- `gctl hook cold start`: one `gctl hook claude-code` process at a time (as a harness runs one
  per tool call), a `UserPromptSubmit` in a git repository: Python's start, the package's
  imports, `git rev-parse`, one call to the server.

The two write rows run twice: saturated (each of the 16 sessions posts again the moment it is
answered: the server's throughput, with the queueing that comes with it) and paced (each session
posts `PACED_PER_S` decisions a second, on a schedule, and a decision's time runs from when it
was due, so a late start counts against it: what a session waits for a decision while 15 others
work too; an agent's session makes a tool call every few seconds, this is ten times more).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import http, load, report
from bench.load import ClientFactory, Op

HELD_FILES = 4
PACED_PER_S = 10.0
NEW_PER_SESSION = 20
REPOSITORY = "/bench/repository"
OPS = (*report.HOOK_WRITE_OPS, *report.HOOK_PACED_OPS, report.HOOK_COLD_OP)


def _write(session: str, path: str) -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "cwd": REPOSITORY,
            "hook_event_name": "PreToolUse",
            "tool_name": "Write",
            "tool_input": {"file_path": f"{REPOSITORY}/{path}", "content": "x"},
        }
    ).encode()


def hook_writes(
    base_url: str, fixtures: dict[str, Any], tag: str, *, new: bool, http_client: str = "raw"
) -> ClientFactory:
    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        me = fixtures["clients"][i]
        client = http.client(
            http_client,
            base_url,
            {
                "Content-Type": "application/json",
                "Authorization": f"Bearer {me['key']}",
                "X-GC-Repository": REPOSITORY,
            },
            30.0,
        )
        post = client.post
        counter = itertools.count()

        def op() -> bool:
            k = next(counter)
            if new:
                session = f"bench-{tag}-{i}-{k // NEW_PER_SESSION}"
                body = _write(session, f"{tag}/{i}/new-{k}.py")
            else:
                body = _write(f"bench-{tag}-{i}", f"{tag}/{i}/held-{k % HELD_FILES}.py")
            answer = post("/api/v1/hooks/claude-code", content=body)
            return answer.status_code == 200 and not answer.content  # allowed: nothing to say

        return op, client.close

    return factory


def cold_start(base_url: str, fixtures: dict[str, Any]) -> ClientFactory:
    """One client: `gctl hook claude-code` run as a new process per event."""
    gctl = str(Path(sys.executable).parent / "gctl")

    def factory(i: int) -> tuple[Op, Callable[[], None]]:
        folder = tempfile.TemporaryDirectory(prefix="gc-bench-hook-")
        repository = Path(folder.name) / "repository"
        subprocess.run(["git", "init", "-q", str(repository)], check=True)  # noqa: S607
        me = fixtures["clients"][i]
        env = {
            "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
            "HOME": folder.name,
            "GC_URL": base_url,
            "GC_KEY": me["key"],
            "GC_HOOK_STATE_DIR": str(Path(folder.name) / "state"),
        }
        event = json.dumps(
            {
                "session_id": f"bench-cold-{i}",
                "cwd": str(repository),
                "hook_event_name": "UserPromptSubmit",
                "prompt": "go on",
            }
        )

        def op() -> bool:
            done = subprocess.run(  # noqa: S603
                [gctl, "hook", "claude-code"],
                input=event,
                env=env,
                cwd=repository,
                capture_output=True,
                text=True,
                check=False,
            )
            return done.returncode == 0

        return op, folder.cleanup

    return factory


def paced(
    factory: ClientFactory, *, sessions: int, per_s: float, seconds: float, warmup_s: float
) -> load.Sample:
    """`sessions` clients, each calling its op `per_s` times a second on a fixed schedule; each
    call's latency from when it was due (a call that starts late counts its wait)."""
    clients = [factory(i) for i in range(sessions)]
    start = threading.Barrier(sessions + 1)
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    period = 1.0 / per_s
    began = 0.0

    def loop(index: int, op: Op) -> None:
        mine: list[float] = []
        start.wait()
        due = began + period * index / sessions  # spread the sessions over one period
        while due < began + warmup_s + seconds:
            now = time.perf_counter()
            if now < due:
                time.sleep(due - now)
            try:
                ok = op()
            except Exception as exc:  # noqa: BLE001 - counted as an error
                ok = False
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            done = time.perf_counter()
            if due >= began + warmup_s:
                if ok:
                    mine.append(done - due)
                else:
                    errors.append("refused")
            due += period
        with lock:
            latencies.extend(mine)

    threads = [
        threading.Thread(target=loop, args=(i, op), daemon=True)
        for i, (op, _) in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    began = time.perf_counter() + 0.05
    start.wait()
    for thread in threads:
        thread.join()
    for _, close in clients:
        close()
    return load.Sample(
        ops=len(latencies),
        errors=len(errors),
        seconds=seconds,
        latencies_s=latencies,
        first_error=errors[0] if errors else "",
    )
