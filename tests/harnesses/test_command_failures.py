"""`gctl hook HARNESS` refuses the tool call whenever it cannot get an answer, the way each
harness refuses one (a harness lets a call through on a hook's error): stdin that is no event,
no GC_URL, no git, a server that cannot be reached or never answers. Only at an event where a
refusal would keep the model working is a failure merely shown."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.live import GCTL

BLOCKED = "gctl hook {} failed, so the tool call is blocked: "


def run(
    harness: str, stdin: str | bytes, tmp_path: Path, **env: str
) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    base.update(
        GC_URL="http://127.0.0.1:9",  # nothing listens there
        GC_KEY="gc_nothing_here",
        GC_HOOK_STATE_DIR=str(tmp_path / "state"),
    )
    base.update(env)
    for name, value in list(base.items()):
        if value == "":
            del base[name]  # unset
    return subprocess.run(
        [GCTL, "hook", harness],
        input=stdin if isinstance(stdin, bytes) else stdin.encode(),
        env=base,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )


def write(tmp_path: Path) -> str:
    return json.dumps(
        {
            "session_id": "s",
            "cwd": str(tmp_path),
            "hook_event_name": "PreToolUse",
            "tool_name": "Write",
            "tool_input": {"file_path": str(tmp_path / "a.py"), "content": "x"},
        }
    )


SHAPES: dict[str, tuple[str | bytes, str]] = {
    "empty stdin": ("", "stdin is not a JSON event"),
    "not JSON": ("not json", "stdin is not a JSON event"),
    "truncated JSON": (
        '{"session_id": "s", "hook_event_name": "PreTo',
        "stdin is not a JSON event",
    ),
    "not UTF-8": (b'{"session_id": "\xff\xfe"}', "stdin is not a JSON event"),
    "a list": ("[]", "not an object (list)"),
    "a string": ('"PreToolUse"', "not an object (str)"),
    "null": ("null", "not an object (NoneType)"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("fail_open", ["", "1"])
def test_stdin_that_is_no_event_blocks(shape: str, fail_open: str, tmp_path: Path) -> None:
    stdin, reason = SHAPES[shape]
    done = run("claude-code", stdin, tmp_path, GC_HOOK_FAIL_OPEN=fail_open)
    assert done.returncode == 2, done
    assert done.stdout == b""
    said = done.stderr.decode()
    assert said.startswith(BLOCKED.format("claude-code")), said
    assert reason in said, said


def test_no_url_blocks_even_when_failing_open(tmp_path: Path) -> None:
    done = run("claude-code", write(tmp_path), tmp_path, GC_URL="", GC_HOOK_FAIL_OPEN="1")
    assert done.returncode == 2 and done.stdout == b"", done
    assert done.stderr.decode().startswith(BLOCKED.format("claude-code") + "GC_URL is not set")


def test_an_unreachable_server_blocks_unless_told_to_fail_open(tmp_path: Path) -> None:
    done = run("claude-code", write(tmp_path), tmp_path)
    assert done.returncode == 2 and done.stdout == b"", done
    assert "Ground Control cannot be reached at http://127.0.0.1:9" in done.stderr.decode()
    opened = run("claude-code", write(tmp_path), tmp_path, GC_HOOK_FAIL_OPEN="1")
    assert (opened.returncode, opened.stdout) == (0, b""), opened


def test_without_git_nothing_can_be_named_so_the_write_is_blocked(tmp_path: Path) -> None:
    done = run("claude-code", write(tmp_path), tmp_path, PATH=str(tmp_path / "nothing"))
    assert done.returncode == 2 and done.stdout == b"", done
    assert done.stderr.decode().startswith(BLOCKED.format("claude-code")), done


def test_a_failure_at_a_stop_is_shown_and_keeps_nobody_working(tmp_path: Path) -> None:
    stop = json.dumps({"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False})
    done = run("claude-code", stop, tmp_path)
    assert done.returncode == 1, done  # 2 would keep the model working
    assert b"failed, so nothing was done at Stop" in done.stderr, done


def refusal(harness: str, done: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert done.returncode == 0, done
    return json.loads(done.stdout)


def test_harnesses_that_only_heed_an_answer_are_answered_a_refusal(tmp_path: Path) -> None:
    codex = refusal("codex", run("codex", write(tmp_path), tmp_path))
    assert set(codex) == {"hookSpecificOutput"}
    assert codex["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert codex["hookSpecificOutput"]["permissionDecisionReason"].startswith(
        BLOCKED.format("codex")
    )
    copilot = refusal("copilot", run("copilot", write(tmp_path), tmp_path))
    assert copilot["permissionDecision"] == "deny"
    pre = json.dumps({"hookName": "PreToolUse", "taskId": "t", "preToolUse": {}})
    cline = refusal("cline", run("cline", pre, tmp_path))
    assert cline["cancel"] is True and cline["errorMessage"].startswith(BLOCKED.format("cline"))
    # A cancel ends Cline's whole task: anywhere but before a tool, a failure cancels nothing.
    started = json.dumps({"hookName": "TaskStart", "taskId": "t"})
    assert refusal("cline", run("cline", started, tmp_path)) == {"cancel": False}


def test_a_server_that_never_answers_blocks_within_the_deadline(tmp_path: Path) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)  # connections complete in the backlog and are never answered
        port = listening.getsockname()[1]
        started = time.monotonic()
        done = run(
            "claude-code",
            write(tmp_path),
            tmp_path,
            GC_URL=f"http://127.0.0.1:{port}",
            GC_HOOK_DEADLINE_S="2",
            GC_HOOK_FAIL_OPEN="1",
        )
        took = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == b"", done
    assert b"no answer within 2 s (GC_HOOK_DEADLINE_S)" in done.stderr, done
    assert took < 30, took
