"""`gctl hook claude-code` as Claude Code runs it: a new process per event, the event's JSON on
stdin, against the live server, in a real git repository (issue 21, item 1)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from leases import services as lease_services
from leases.models import Lease, LeaseStatus
from tests.client.conftest import GCTL, Fleet, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TTL_S = 6


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "auth").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def hook(gc: Fleet, event: dict[str, Any], *, key: str, state: Path, **extra: str) -> Any:
    done = subprocess.run(
        [GCTL, "hook", "claude-code"],
        input=json.dumps(event),
        env=gc.env(key, GC_HOOK_STATE_DIR=str(state), GC_HOOK_TTL_S=str(TTL_S), **extra),
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done


def pre(session: str, cwd: Path, tool: str, path: str) -> dict[str, Any]:
    field = "notebook_path" if tool == "NotebookEdit" else "file_path"
    return {
        "session_id": session,
        "transcript_path": f"/tmp/{session}.jsonl",
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {field: path, "content": "x"},
        "tool_use_id": "toolu_01",
    }


def decision(done: Any) -> dict[str, Any] | None:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hookSpecificOutput"] if done.stdout.strip() else None


def held_by(process_id: str) -> set[str]:
    return set(
        Lease.objects.filter(process_id=process_id, status=LeaseStatus.HELD).values_list(
            "resource", flat=True
        )
    )


def test_a_write_takes_the_files_lease_and_another_session_is_denied(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    # Session A writes src/auth/login.py (an absolute path, as the harness sends it) from a
    # subdirectory: the lease is named from the repository's top.
    first = hook(
        gc,
        pre("sess-a", repo / "src", "Write", str(repo / "src/auth/login.py")),
        key=gc.key_a,
        state=state,
    )
    assert decision(first) is None  # allowed: the harness's own rules decide
    assert held_by("claude-code:sess-a") == {"src/auth/login.py"}
    # Again (an Edit of the same file): renewed, not a second lease.
    again = hook(gc, pre("sess-a", repo, "Edit", "src/auth/login.py"), key=gc.key_a, state=state)
    assert decision(again) is None
    assert Lease.objects.get(resource="src/auth/login.py").fence == 1
    # Session B, another hand: denied, with the sentence the model reads.
    denied = decision(
        hook(
            gc,
            pre("sess-b", repo, "MultiEdit", str(repo / "src/auth/login.py")),
            key=gc.key_b,
            state=state,
        )
    )
    assert denied is not None and denied["permissionDecision"] == "deny"
    assert denied["hookEventName"] == "PreToolUse"
    assert denied["permissionDecisionReason"].startswith(
        "Ground Control: src/auth/login.py is held by hand hand-a (fence 1), renewing"
    )
    assert held_by("claude-code:sess-b") == set()


def test_a_directory_held_by_another_hand_denies_every_file_below_it(
    gc: Fleet, repo: Path, tmp_path: Path, owner: Any
) -> None:
    lease_services.lease_acquire(
        workspace_id=owner.workspace_id,
        resource="src/auth/",
        holder=owner.name,
        process_id="elsewhere",
        ttl_s=60,
    )
    denied = decision(
        hook(
            gc,
            pre("sess-b", repo, "NotebookEdit", "src/auth/n.ipynb"),
            key=gc.key_b,
            state=tmp_path,
        )
    )
    assert denied is not None and denied["permissionDecision"] == "deny"
    assert "src/auth/ is held by hand hand-a" in denied["permissionDecisionReason"]
    # Elsewhere in the tree B may write.
    assert (
        decision(hook(gc, pre("sess-b", repo, "Write", "README.md"), key=gc.key_b, state=tmp_path))
        is None
    )


def test_reads_pass_untouched_and_a_file_outside_any_repository_is_denied(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    read = pre("sess-a", repo, "Read", str(repo / "src/auth/login.py"))
    assert decision(hook(gc, read, key=gc.key_a, state=tmp_path)) is None
    # Issue 30, item 3: an unleased write outside any repository is no longer let through.
    outside = pre("sess-a", repo, "Write", str(tmp_path / "notes.txt"))
    denied = decision(hook(gc, outside, key=gc.key_a, state=tmp_path))
    assert denied is not None and denied["permissionDecision"] == "deny"
    assert "is in no git repository" in denied["permissionDecisionReason"]
    allowed = hook(gc, outside, key=gc.key_a, state=tmp_path, GC_ALLOW_OUTSIDE_REPO="1")
    assert decision(allowed) is None
    assert not Lease.objects.filter(kind="resource").exists()


def test_the_background_process_renews_and_session_end_releases(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    for name in ("a.py", "b.py"):
        assert (
            decision(
                hook(gc, pre("sess-k", repo, "Write", f"src/{name}"), key=gc.key_a, state=state)
            )
            is None
        )
    pid = json.loads(next(state.glob("*.json")).read_text())["keeper"]["pid"]
    os.kill(pid, 0)  # running
    # Held past two TTLs by the background renewals alone.
    time.sleep(TTL_S * 2 + 1)
    assert held_by("claude-code:sess-k") == {"src/a.py", "src/b.py"}
    end = {
        "session_id": "sess-k",
        "cwd": str(repo),
        "hook_event_name": "SessionEnd",
        "reason": "exit",
    }
    assert hook(gc, end, key=gc.key_a, state=state).returncode == 0
    assert held_by("claude-code:sess-k") == set()
    assert Lease.objects.filter(resource="src/a.py", status=LeaseStatus.FREE).exists()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        # A zombie until reaped by init is gone for our purposes.
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    wait_for(gone, timeout=10)
    assert not list(state.glob("*.json"))  # the session is forgotten


def test_stop_releases_only_when_asked_and_a_malformed_event_blocks(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    assert (
        decision(hook(gc, pre("sess-s", repo, "Write", "x.py"), key=gc.key_a, state=tmp_path))
        is None
    )
    stop = {
        "session_id": "sess-s",
        "cwd": str(repo),
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }
    assert hook(gc, stop, key=gc.key_a, state=tmp_path).returncode == 0
    assert held_by("claude-code:sess-s") == {"x.py"}
    released = subprocess.run(
        [GCTL, "hook", "claude-code", "--release-on-stop"],
        input=json.dumps(stop),
        env=gc.env(gc.key_a, GC_HOOK_STATE_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert released.returncode == 0, released.stderr
    assert held_by("claude-code:sess-s") == set()
    bad = subprocess.run(
        [GCTL, "hook", "claude-code"],
        input="not json",
        env=gc.env(gc.key_a),
        capture_output=True,
        text=True,
        timeout=30,
    )
    # Exit 2, Claude Code's blocking error (issue 30, item 4: 1 let the write through).
    assert bad.returncode == 2 and "not a Claude Code hook event" in bad.stderr


def test_an_unreachable_server_denies_the_write_unless_told_to_fail_open(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    event = pre("sess-u", repo, "Write", "x.py")
    down = {"GC_URL": "http://127.0.0.1:9", "GC_RETRIES": "0"}
    denied = decision(hook(gc, event, key=gc.key_a, state=tmp_path, **down))
    assert denied is not None and denied["permissionDecision"] == "deny"
    assert "Ground Control" in denied["permissionDecisionReason"]
    opened = hook(gc, event, key=gc.key_a, state=tmp_path, GC_HOOK_FAIL_OPEN="1", **down)
    assert decision(opened) is None
