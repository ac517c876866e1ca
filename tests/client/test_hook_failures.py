"""The Claude Code hook fails closed on every failure (issue 30, item 4): the real
`gctl hook claude-code` command with stdin that is not an event it can act on, with what it
needs missing, and with errors of its own, exits 2 (Claude Code's blocking error: the tool call
does not run, stderr is the reason; any other non-zero exit lets it run), whatever
`GC_HOOK_FAIL_OPEN` says. None of these reach a server: the one they are given is unreachable,
so a hook that asked it would answer a denial on stdout and exit 0, and fail the test."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from groundcontrol_client import hooks

from tests.client.conftest import GCTL

BLOCKED = "gctl hook claude-code failed, so the tool call is blocked: "


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def run(stdin: str | bytes, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
    base.update(
        GC_URL="http://127.0.0.1:9",
        GC_KEY="gc_nothing_here",
        GC_RETRIES="0",
        GC_HOOK_STATE_DIR=str(tmp_path / "state"),
    )
    base.update(env)
    for name, value in list(base.items()):
        if value == "":
            del base[name]  # unset
    return subprocess.run(
        [GCTL, "hook", "claude-code"],
        input=stdin if isinstance(stdin, bytes) else stdin.encode(),
        env=base,
        capture_output=True,
        timeout=60,
    )


def write_event(repo: Path, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "session_id": "sess-f",
        "transcript_path": "/tmp/sess-f.jsonl",
        "cwd": str(repo),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(repo / "src" / "a.py"), "content": "x"},
    }
    for name, value in changes.items():
        if value is None:
            event.pop(name, None)
        else:
            event[name] = value
    return event


# Each shape, and the words of the reason it must give.
SHAPES: dict[str, tuple[str | bytes, str]] = {
    "empty stdin": ("", "stdin is not JSON"),
    "not JSON": ("not json", "stdin is not JSON"),
    "truncated JSON": ('{"session_id": "s", "hook_event_name": "PreTo', "stdin is not JSON"),
    # (Refused as not UTF-8, or, where the locale lets Python read it, for what it lacks.)
    "not UTF-8": (b'{"session_id": "\xff\xfe"}', ""),
    "a list": ("[]", "not an object (list)"),
    "a string": ('"PreToolUse"', "not an object (str)"),
    "null": ("null", "not an object (NoneType)"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("fail_open", ["", "1"])
def test_stdin_that_is_no_event_blocks(shape: str, fail_open: str, tmp_path: Path) -> None:
    stdin, reason = SHAPES[shape]
    done = run(stdin, tmp_path, GC_HOOK_FAIL_OPEN=fail_open)
    assert done.returncode == 2, done
    assert done.stdout == b""
    said = done.stderr.decode()
    assert said.startswith(BLOCKED + "not a Claude Code hook event it can act on: "), said
    assert reason in said, said


def _events(repo: Path) -> dict[str, tuple[dict[str, Any], str]]:
    a = str(repo / "src" / "a.py")
    return {
        "no session_id": (write_event(repo, session_id=None), "has no session_id"),
        "an empty session_id": (write_event(repo, session_id=""), "has no session_id"),
        "a number for session_id": (write_event(repo, session_id=7), "has no session_id"),
        "no hook_event_name": (write_event(repo, hook_event_name=None), "no hook_event_name"),
        "an unknown event": (
            write_event(repo, hook_event_name="PreToolUseV2"),
            "'PreToolUseV2' is not a hook event it knows",
        ),
        "no tool_name": (write_event(repo, tool_name=None), "has no tool_name"),
        "no tool_input": (write_event(repo, tool_input=None), "the Write event has no tool_input"),
        "tool_input a list": (write_event(repo, tool_input=[a]), "has no tool_input object"),
        "no file_path": (
            write_event(repo, tool_input={"content": "x"}),
            "tool_input has no file_path",
        ),
        "file_path not text": (
            write_event(repo, tool_input={"file_path": ["a.py"]}),
            "tool_input has no file_path",
        ),
        "NotebookEdit's path under another field": (
            write_event(repo, tool_name="NotebookEdit", tool_input={"file_path": a}),
            "tool_input has no notebook_path",
        ),
        "a relative path and no cwd": (
            write_event(repo, cwd=None, tool_input={"file_path": "src/a.py"}),
            "is relative and the event has no cwd",
        ),
        "cwd not text": (write_event(repo, cwd=3), "cwd is not text"),
    }


EVENT_SHAPES = list(_events(Path("/r")))


@pytest.mark.parametrize("shape", EVENT_SHAPES)
def test_an_event_missing_what_it_needs_blocks(shape: str, repo: Path, tmp_path: Path) -> None:
    event, reason = _events(repo)[shape]
    for fail_open in ("", "1"):
        done = run(json.dumps(event), tmp_path, GC_HOOK_FAIL_OPEN=fail_open)
        assert done.returncode == 2, (fail_open, done)
        assert done.stdout == b""
        said = done.stderr.decode()
        assert said.startswith(BLOCKED), said
        assert reason in said, said


def test_an_error_of_its_own_blocks(repo: Path, tmp_path: Path) -> None:
    event = json.dumps(write_event(repo))
    # No GC_URL: no client can be made (before, gctl refused it before reading the event).
    done = run(event, tmp_path, GC_URL="")
    assert done.returncode == 2 and done.stdout == b"", done
    assert done.stderr.decode().startswith(BLOCKED + "ConfigError: GC_URL is not set"), done
    # No git: no repository can name the file, so none is leased, so the write is blocked.
    done = run(event, tmp_path, PATH=str(tmp_path / "nothing"), GC_HOOK_FAIL_OPEN="1")
    assert done.returncode == 2 and done.stdout == b"", done
    assert "git is not installed" in done.stderr.decode(), done


class Exploding:
    """A client whose every call raises what no one expected."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise RuntimeError(f"{name} broke")

        return call


def test_an_exception_anywhere_blocks_the_write(
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GC_HOOK_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("GC_HOOK_FAIL_OPEN", "1")  # an error of its own is no outage
    client = Exploding()
    event = json.dumps(write_event(repo))
    assert hooks.claude_code(client, stdin=io.StringIO(event)) == 2  # type: ignore[arg-type]
    assert client.calls == ["lease_acquire"]
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(BLOCKED + "RuntimeError: lease_acquire broke"), out.err

    # Where the hook's own code breaks, not the client's.
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("state")

    monkeypatch.setattr(hooks.files, "name_file", broken)
    assert hooks.claude_code(client, stdin=io.StringIO(event)) == 2  # type: ignore[arg-type]
    assert capsys.readouterr().err.startswith(BLOCKED + "KeyError: 'state'")


def test_a_failure_at_session_end_blocks_and_at_stop_only_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GC_HOOK_STATE_DIR", str(tmp_path))
    ended = {"session_id": "s", "hook_event_name": "SessionEnd", "reason": "exit"}
    stopped = {"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False}
    client = Exploding()
    assert hooks.claude_code(client, stdin=io.StringIO(json.dumps(ended))) == 2  # type: ignore[arg-type]
    said = capsys.readouterr().err
    assert said.startswith(BLOCKED + "RuntimeError: ") and said.rstrip().endswith(" broke"), said
    # At Stop, exit 2 would keep the model working: a failure is said, not blocking (1).
    code = hooks.claude_code(client, release_on_stop=True, stdin=io.StringIO(json.dumps(stopped)))  # type: ignore[arg-type]
    assert code == 1
    said = capsys.readouterr().err
    assert said.startswith("gctl hook claude-code failed, so nothing was released: RuntimeError")


def test_events_that_write_nothing_pass_without_a_server(repo: Path, tmp_path: Path) -> None:
    """What is not a write needs no client: no GC_URL is no failure for it."""
    events = [
        {"session_id": "s", "hook_event_name": "SessionStart", "source": "startup"},
        {"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False},
        {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "hi"},
        write_event(repo, tool_name="Read", tool_input={"file_path": "/etc/passwd"}),
        write_event(repo, tool_name="Bash", tool_input={"command": "ls"}),
    ]
    for event in events:
        done = run(json.dumps(event), tmp_path, GC_URL="")
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", (event, done)


def test_a_stop_without_its_session_says_so_without_keeping_the_model_working(
    tmp_path: Path,
) -> None:
    stopped = {"hook_event_name": "Stop", "stop_hook_active": False}
    done = run(json.dumps(stopped), tmp_path)
    assert done.returncode == 1, done  # 2 would keep the model working
    assert b"nothing was released: not a Claude Code hook event" in done.stderr, done


def test_a_path_from_home_is_named_where_the_tool_writes_it(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    event = write_event(repo, tool_input={"file_path": "~/.bashrc", "content": "x"})
    done = run(json.dumps(event), tmp_path, HOME=str(home))
    # Not `<repo>/~/.bashrc`, a lease in the repository: the home's file, in no repository.
    assert done.returncode == 0, done
    answer = json.loads(done.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"
    assert f"({home / '.bashrc'}) is in no git repository" in answer["permissionDecisionReason"]


def test_a_server_that_never_answers_blocks_within_the_deadline(repo: Path, tmp_path: Path) -> None:
    import socket
    import time

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)  # connections complete in the backlog and are never answered
        port = listening.getsockname()[1]
        started = time.monotonic()
        done = run(
            json.dumps(write_event(repo)),
            tmp_path,
            GC_URL=f"http://127.0.0.1:{port}",
            GC_TIMEOUT="60",
            GC_HOOK_DEADLINE_S="2",
            GC_HOOK_FAIL_OPEN="1",
        )
        took = time.monotonic() - started
    assert done.returncode == 2 and done.stdout == b"", done
    assert b"no answer within 2 s (GC_HOOK_DEADLINE_S)" in done.stderr, done
    assert took < 30, took  # the deadline, not the client's 60 s timeout
