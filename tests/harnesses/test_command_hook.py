"""`gctl hook HARNESS` as each harness runs it, against the live server: a documented write is
allowed and leased, another session's write of it is denied in the harness's own format, and a
session whose events stop (a crash, `kill -9`) loses its leases within its TTL; shell writes are
judged after the command ran; a revoked key stops counting at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from hands import services as hand_services
from hands.models import Hand
from leases import clock
from leases.models import Event, Lease, LeaseStatus
from tests.harnesses.command import (
    WRITES,
    answer_of,
    denied,
    documented_write,
    git_repository,
    run,
)
from tests.support.live import GCTL, Fleet, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TTL_S = 30


def held_by(process_id: str) -> set[str]:
    return set(
        Lease.objects.filter(process_id=process_id, status=LeaseStatus.HELD).values_list(
            "resource", flat=True
        )
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repository(tmp_path / "repo")


@pytest.mark.parametrize("harness", sorted(WRITES))
def test_a_documented_write_is_leased_denied_to_another_session_and_freed_by_silence(
    gc: Fleet, repo: Path, tmp_path: Path, harness: str
) -> None:
    state = tmp_path / "state"
    first = documented_write(harness, "sess-a", repo)
    done = run(gc, harness, first, key=gc.key_a, cwd=repo, state=state, GC_HOOK_TTL_S=str(TTL_S))
    said = answer_of(done)
    assert said is None or "deny" not in str(said) and 'cancel": true' not in done.stdout, said
    [name] = held_by(f"{harness}:sess-a")
    # Another hand's session: denied, in the harness's own words, saying whose session holds it.
    second = documented_write(harness, "sess-b", repo)
    answer = answer_of(run(gc, harness, second, key=gc.key_b, cwd=repo, state=state))
    assert answer is not None
    sentence = denied(harness, answer)
    assert sentence.startswith(f"Ground Control: {name} is held by session sess-a of hand ")
    assert "for its session" in sentence
    # The first session's events stop: within its TTL, the file is free for the other one.
    with clock.travel(TTL_S + 1):
        answer = answer_of(run(gc, harness, second, key=gc.key_b, cwd=repo, state=state))
        assert answer is None or "deny" not in str(answer).lower(), answer
        assert held_by(f"{harness}:sess-b") == {name}


HARNESS_SCRIPT = """
import json, subprocess, sys, time
# A harness: an event every 0.3 s (each a gctl hook process), until it is killed.
gctl, repo, session = sys.argv[1:4]
while True:
    event = {"session_id": session, "cwd": repo, "hook_event_name": "UserPromptSubmit",
             "prompt": "go on"}
    subprocess.run([gctl, "hook", "claude-code"], input=json.dumps(event), text=True,
                   capture_output=True, cwd=repo)
    time.sleep(0.3)
"""


def test_a_killed_harness_loses_its_leases_within_its_ttl_and_a_live_one_keeps_them(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    ttl = 5
    state = tmp_path / "state"
    write = documented_write("claude-code", "sess-k", repo)
    env = {"GC_HOOK_TTL_S": str(ttl)}
    assert (
        answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=state, **env)) is None
    )
    harness = subprocess.Popen(
        [sys.executable, "-c", HARNESS_SCRIPT, GCTL, str(repo), "sess-k"],
        env=gc.env(gc.key_a, GC_HOOK_STATE_DIR=str(state), **env),
    )
    try:
        time.sleep(ttl + 2)  # past one TTL: its events kept the lease
        assert held_by("claude-code:sess-k") == {"src/app.py"}
        os.kill(harness.pid, signal.SIGKILL)
        harness.wait()
        # Nothing renews it any more: its window ends within one TTL of the kill (the
        # database's clock; how soon another session notices is the machine's speed).
        lease = Lease.objects.get(resource="src/app.py")
        killed_at = clock.db_now()
        assert lease.deadline <= killed_at + timedelta(seconds=ttl)
        other = documented_write("claude-code", "sess-o", repo)

        def taken() -> bool:
            done = run(gc, "claude-code", other, key=gc.key_b, cwd=repo, state=state)
            return answer_of(done) is None

        wait_for(taken, timeout=ttl + 60, step=0.5)
        taken_over = Lease.objects.get(resource="src/app.py")
        assert taken_over.acquired_at >= lease.deadline  # not renewed after the kill
        assert held_by("claude-code:sess-o") == {"src/app.py"}
    finally:
        harness.kill()
        harness.wait()


def claude_event(session: str, repo: Path, name: str, **fields: object) -> dict[str, object]:
    return {"session_id": session, "cwd": str(repo), "hook_event_name": name, **fields}


def test_a_shell_command_that_writes_another_sessions_file_is_told_and_recorded(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (repo / "src" / "kept.py").write_text("dirty before the command\n")
    theirs = documented_write("claude-code", "sess-b", repo)
    assert answer_of(run(gc, "claude-code", theirs, key=gc.key_b, cwd=repo, state=state)) is None
    bash = {"tool_name": "Bash", "tool_input": {"command": "sed -i s/a/b/ src/app.py"}}
    before = claude_event("sess-a", repo, "PreToolUse", **bash)
    assert answer_of(run(gc, "claude-code", before, key=gc.key_a, cwd=repo, state=state)) is None
    # The command: it writes the other session's file and a new one; kept.py stays as it was.
    (repo / "src" / "app.py").write_text("changed by a shell\n")
    (repo / "src" / "new.py").write_text("new\n")
    after = claude_event("sess-a", repo, "PostToolUse", **bash, tool_response={"stdout": ""})
    said = answer_of(run(gc, "claude-code", after, key=gc.key_a, cwd=repo, state=state))
    assert said is not None and said["decision"] == "block", said
    assert said["reason"].startswith(
        "Ground Control: your Bash command changed files another holder has: src/app.py is held "
        "by session sess-b of hand 'hand-b'"
    )
    recorded = Event.objects.get(kind="write_outside_lease")
    assert (recorded.resource, recorded.hand, recorded.data["holder"]) == (
        "src/app.py",
        "hand-a",
        "hand-b",
    )
    assert held_by("claude-code:sess-a") == {"src/new.py"}  # nobody's: the session's now
    assert held_by("claude-code:sess-b") == {"src/app.py"}


def test_a_file_reached_outside_the_cwds_repository_is_named_from_its_own(
    gc: Fleet, tmp_path: Path
) -> None:
    state, work = tmp_path / "state", tmp_path / "work"
    repo = git_repository(work / "inner")
    (tmp_path / "link").symlink_to(repo)
    # The session started above the repository; the tool writes through a link to it.
    write = documented_write("claude-code", "sess-a", repo)
    write["cwd"] = str(work)
    write["tool_input"]["file_path"] = str(tmp_path / "link" / "src" / "app.py")
    assert answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=work, state=state)) is None
    assert held_by("claude-code:sess-a") == {"src/app.py"}


def test_session_end_and_a_stop_with_release_on_stop_release_everything(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    write = documented_write("claude-code", "sess-a", repo)
    assert answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=state)) is None
    stop = claude_event("sess-a", repo, "Stop", stop_hook_active=False)
    assert answer_of(run(gc, "claude-code", stop, key=gc.key_a, cwd=repo, state=state)) is None
    assert held_by("claude-code:sess-a") == {"src/app.py"}  # a turn's end is no session's end
    done = run(
        gc, "claude-code", stop, key=gc.key_a, cwd=repo, state=state, args=("--release-on-stop",)
    )
    assert answer_of(done) is None
    assert held_by("claude-code:sess-a") == set()
    assert answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=state)) is None
    end = claude_event("sess-a", repo, "SessionEnd", reason="exit")
    assert answer_of(run(gc, "claude-code", end, key=gc.key_a, cwd=repo, state=state)) is None
    assert held_by("claude-code:sess-a") == set()


def test_a_revoked_keys_leases_are_free_and_its_next_write_is_denied(
    gc: Fleet, repo: Path, tmp_path: Path, owner: Hand
) -> None:
    state = tmp_path / "state"
    write = documented_write("claude-code", "sess-a", repo)
    assert answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=state)) is None
    prefix = gc.key_a.split("_")[1]
    hand_services.key_revoke(workspace_id=owner.workspace_id, prefix=prefix, actor="test")
    assert held_by("claude-code:sess-a") == set()
    said = answer_of(run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=state))
    assert said is not None
    reason = said["hookSpecificOutput"]["permissionDecisionReason"]
    assert "(key_revoked)" in reason, reason


def test_an_sdk_callback_is_answered_in_process_and_refuses_when_it_cannot_ask(
    gc: Fleet, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Copilot SDK's `onPreToolUse`: its input object, answered by `answer_event` (what a
    callback returns); a callback that cannot reach the server refuses, never lets it through."""
    from groundcontrol_client.hooks.command import answer_event

    from tests.harnesses.events import REPO, event

    def written(session: str) -> dict[str, object]:
        body = event("copilot", "sdk_pre_tool_use_write")
        body = json.loads(json.dumps(body).replace(REPO, str(repo)))
        body["sessionId"] = session
        return body

    state = str(tmp_path / "state")
    monkeypatch.chdir(repo)
    env_a = {"GC_URL": gc.url, "GC_KEY": gc.key_a, "GC_HOOK_STATE_DIR": state}
    env_b = {"GC_URL": gc.url, "GC_KEY": gc.key_b, "GC_HOOK_STATE_DIR": state}
    assert answer_event("copilot", written("sdk-a"), env_a) is None
    assert held_by("copilot:sdk-a") == {"src/app.py"}
    said = answer_event("copilot", written("sdk-b"), env_b)
    assert said is not None and said["permissionDecision"] == "deny"
    assert "held by session sdk-a" in said["permissionDecisionReason"]
    unreachable = {**env_a, "GC_URL": "http://127.0.0.1:9"}
    refused = answer_event("copilot", written("sdk-a"), unreachable)
    assert refused is not None and refused["permissionDecision"] == "deny"
    assert (
        answer_event("copilot", written("sdk-a"), {**unreachable, "GC_HOOK_FAIL_OPEN": "1"}) is None
    )


def test_a_write_of_a_large_file_sends_only_what_names_it(
    gc: Fleet, repo: Path, tmp_path: Path
) -> None:
    """A tool's text is no business of the server's: a 1 MiB Write (over the body limit) and a
    large patch are sent cut to what names their files, and leased."""
    write = documented_write("claude-code", "sess-a", repo)
    write["tool_input"]["content"] = "x" * (1024 * 1024)
    done = run(gc, "claude-code", write, key=gc.key_a, cwd=repo, state=tmp_path / "state")
    assert answer_of(done) is None
    patch = documented_write("codex", "sess-c", repo)
    body = "\n".join(f"+line {i}" for i in range(100_000))
    patch["tool_input"]["command"] = (
        f"*** Begin Patch\n*** Add File: big.txt\n{body}\n*** End Patch"
    )
    done = run(gc, "codex", patch, key=gc.key_a, cwd=repo, state=tmp_path / "state")
    assert answer_of(done) is None
    assert held_by("codex:sess-c") == {"big.txt"}
