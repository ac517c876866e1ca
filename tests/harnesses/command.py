"""Running `gctl hook HARNESS` as a harness runs it: a new process per event, the event's JSON on
stdin, in a real git repository, against the live server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.harnesses.events import REPO, event
from tests.support.live import GCTL, Fleet

# Each harness with a command form: its documented write event (events/<harness>/), the field
# that names the session, and how its answer says "denied".
WRITES: dict[str, tuple[str, str]] = {
    "claude-code": ("pre_tool_use_write", "session_id"),
    "codex": ("pre_tool_use_apply_patch_add", "session_id"),
    "gemini": ("before_tool_write_file", "session_id"),
    "cursor": ("pre_tool_use_shell", "conversation_id"),  # with a write tool: see test_cursor
    "cline": ("pre_tool_use_write_to_file", "taskId"),
    "copilot": ("cli_pre_tool_use_write", "sessionId"),
}


def denied(harness: str, answer: dict[str, Any]) -> str:
    """The sentence of a denial in `harness`'s own format (AssertionError if it is none)."""
    if harness in ("claude-code", "codex"):
        out = answer["hookSpecificOutput"]
        assert out["permissionDecision"] == "deny", answer
        return out["permissionDecisionReason"]
    if harness == "gemini":
        assert answer["decision"] == "deny", answer
        return answer["reason"]
    if harness == "cursor":
        assert answer["permission"] == "deny", answer
        return answer["agent_message"]
    if harness == "cline":
        assert answer["cancel"] is True, answer
        return answer["errorMessage"]
    assert answer["permissionDecision"] == "deny", answer
    return answer["permissionDecisionReason"]


def documented_write(harness: str, session: str, repo: Path) -> dict[str, Any]:
    """The harness's documented write, in `repo` instead of the docs' project, for `session`."""
    name, session_field = WRITES[harness]
    body = event(harness, name)
    if harness == "cursor":
        body.update(tool_name="Write", tool_input={"file_path": f"{REPO}/src/app.py"})
    body = json.loads(json.dumps(body).replace(REPO, str(repo)))
    body[session_field] = session
    return body


def run(
    gc: Fleet,
    harness: str,
    body: dict[str, Any] | str,
    *,
    key: str,
    cwd: Path,
    state: Path,
    args: tuple[str, ...] = (),
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GCTL, "hook", harness, *args],
        input=body if isinstance(body, str) else json.dumps(body),
        env=gc.env(key, GC_HOOK_STATE_DIR=str(state), **extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def answer_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any] | None:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def git_repository(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root
