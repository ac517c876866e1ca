"""One name per file (issue 30, item 3): a file's lease is named from the file itself, its
resolved path relative to the top level of its own repository, by the Claude Code hook, the MCP
proxy and `gctl git` alike (`groundcontrol_client.git.files`), whatever the session's `cwd`, the
clone's path or the link it is reached through. The hook runs as Claude Code runs it: a new
`gctl hook claude-code` process per event, against the live server."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from groundcontrol_client.git import files
from groundcontrol_client.git.fences import staged_names
from groundcontrol_client.mcp.proxy import resource_for
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from leases.models import Lease, LeaseStatus
from tests.client.conftest import GCTL, Fleet

HERE = Path(__file__).resolve().parent
TTL_S = 30


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """work/hookrepo: a repository with src/a.py, src/alias.py -> a.py, src/ahead.py -> new.py
    (no such file yet) and vendor/lib, a repository of its own; work/link -> hookrepo (the
    clone reached through a symbolic link); work/notes.txt in no repository."""
    work = tmp_path / "work"
    repo = work / "hookrepo"
    (repo / "src").mkdir(parents=True)
    git("init", "-q", str(repo), cwd=tmp_path)
    (repo / "src" / "a.py").write_text("a\n")
    (repo / "src" / "alias.py").symlink_to("a.py")
    (repo / "src" / "ahead.py").symlink_to("new.py")
    (repo / "vendor" / "lib").mkdir(parents=True)
    git("init", "-q", str(repo / "vendor" / "lib"), cwd=tmp_path)
    (work / "link").symlink_to("hookrepo")
    (work / "notes.txt").write_text("n\n")
    return work


def hook(gc: Fleet, event: dict[str, Any], *, key: str, state: Path, **extra: str) -> Any:
    return subprocess.run(
        [GCTL, "hook", "claude-code"],
        input=json.dumps(event),
        env=gc.env(key, GC_HOOK_STATE_DIR=str(state), GC_HOOK_TTL_S=str(TTL_S), **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


def write(session: str, cwd: Path | str, path: Path | str) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": str(cwd),
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(path), "content": "x"},
    }


def decision(done: Any) -> dict[str, Any] | None:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hookSpecificOutput"] if done.stdout.strip() else None


def held_by(session: str) -> set[str]:
    return set(
        Lease.objects.filter(
            process_id=f"claude-code:{session}", status=LeaseStatus.HELD
        ).values_list("resource", flat=True)
    )


def end(gc: Fleet, session: str, *, key: str, state: Path) -> None:
    ended = {"session_id": session, "hook_event_name": "SessionEnd", "reason": "exit"}
    assert hook(gc, ended, key=key, state=state).returncode == 0


# --- the hook, whatever the session's cwd --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_names_a_file_from_its_own_repository_whatever_the_sessions_cwd(
    gc: Fleet, work: Path, tmp_path: Path
) -> None:
    state, repo = tmp_path / "state", work / "hookrepo"
    writes = [
        # A cwd above the repository, the path relative to it (was hookrepo/src/auth2.py).
        (work, "hookrepo/src/auth2.py"),
        # A cwd that is a nested repository, the file in the outer one (was: no lease).
        (repo / "vendor" / "lib", repo / "src" / "b.py"),
        # A cwd that does not exist (was: no lease).
        (tmp_path / "gone", repo / "src" / "c.py"),
        # A file of the nested repository, from the outer one's top: the innermost names it.
        (repo, "vendor/lib/x.py"),
        # A path that leaves and comes back by `..`, into a directory not made yet.
        (repo / "src", "../../hookrepo/src/new/../d.py"),
    ]
    for cwd, path in writes:
        assert decision(hook(gc, write("sess-a", cwd, path), key=gc.key_a, state=state)) is None
    assert held_by("sess-a") == {"src/auth2.py", "src/b.py", "src/c.py", "x.py", "src/d.py"}
    end(gc, "sess-a", key=gc.key_a, state=state)


@pytest.mark.django_db(transaction=True)
def test_two_sessions_with_different_cwds_contend_for_one_file_and_the_second_is_denied(
    gc: Fleet, work: Path, tmp_path: Path
) -> None:
    state, repo = tmp_path / "state", work / "hookrepo"
    first = hook(gc, write("sess-a", work, "hookrepo/src/auth2.py"), key=gc.key_a, state=state)
    assert decision(first) is None
    # Another hand, from the repository's top, the path as it sees it: the same file, denied.
    for cwd, path in ((repo, "src/auth2.py"), (tmp_path / "gone", work / "link/src/auth2.py")):
        denied = decision(hook(gc, write("sess-b", cwd, path), key=gc.key_b, state=state))
        assert denied is not None and denied["permissionDecision"] == "deny", (cwd, path)
        assert denied["permissionDecisionReason"].startswith(
            "Ground Control: src/auth2.py is held by session sess-a of hand 'hand-a' since "
        )
    assert held_by("sess-b") == set()
    assert Lease.objects.filter(kind="resource").count() == 1  # one name, one lease
    end(gc, "sess-a", key=gc.key_a, state=state)


@pytest.mark.django_db(transaction=True)
def test_a_symlinked_clone_and_a_symlinked_file_name_the_file_they_reach(
    gc: Fleet, work: Path, tmp_path: Path
) -> None:
    state, repo = tmp_path / "state", work / "hookrepo"
    # Through the linked clone path: src/a.py, and the same lease again through the repo.
    via_link = hook(gc, write("sess-a", work / "link", "src/a.py"), key=gc.key_a, state=state)
    assert decision(via_link) is None
    assert decision(hook(gc, write("sess-a", repo, "src/a.py"), key=gc.key_a, state=state)) is None
    assert held_by("sess-a") == {"src/a.py"}
    assert Lease.objects.get(resource="src/a.py").fence == 1
    # Through a link to the file: the file it reaches, held by A, so B is denied.
    denied = decision(
        hook(gc, write("sess-b", repo, repo / "src/alias.py"), key=gc.key_b, state=state)
    )
    assert denied is not None and denied["permissionDecision"] == "deny"
    assert (
        "src/a.py is held by session sess-a of hand 'hand-a'"
        in (denied["permissionDecisionReason"])
    )
    # A link to a file not written yet names the file it will create.
    ahead = hook(gc, write("sess-b", work / "link", "src/ahead.py"), key=gc.key_b, state=state)
    assert decision(ahead) is None
    assert held_by("sess-b") == {"src/new.py"}
    end(gc, "sess-a", key=gc.key_a, state=state)
    end(gc, "sess-b", key=gc.key_b, state=state)


@pytest.mark.django_db(transaction=True)
def test_a_file_in_no_repository_is_denied_unless_writes_outside_are_allowed(
    gc: Fleet, work: Path, tmp_path: Path
) -> None:
    state, repo = tmp_path / "state", work / "hookrepo"
    for cwd, path in ((repo, work / "notes.txt"), (repo / "src", "../../notes.txt")):
        denied = decision(hook(gc, write("sess-a", cwd, path), key=gc.key_a, state=state))
        assert denied is not None and denied["permissionDecision"] == "deny"
        reason = denied["permissionDecisionReason"]
        assert reason.startswith("Ground Control: "), reason
        assert f"{work / 'notes.txt'} is in no repository this session registered" in reason
        assert "GC_ALLOW_OUTSIDE_REPO=1" in reason
    # Inside a repository's .git there is no work tree: no file of one either.
    inside_git = hook(gc, write("sess-a", repo, ".git/config"), key=gc.key_a, state=state)
    assert decision(inside_git)["permissionDecision"] == "deny"  # type: ignore[index]
    allowed = hook(
        gc, write("sess-a", repo, work / "notes.txt"), key=gc.key_a, state=state,
        GC_ALLOW_OUTSIDE_REPO="1",
    )  # fmt: skip
    assert decision(allowed) is None
    assert not Lease.objects.filter(kind="resource").exists()  # unleased, as it says


# --- the same name from the proxy and from git -------------------------------------------------


def test_the_one_function_names_alike_however_the_file_is_reached(work: Path) -> None:
    repo = work / "hookrepo"
    reached = [
        ("src/a.py", str(repo)),
        ("hookrepo/src/a.py", str(work)),
        (str(work / "link/src/alias.py"), None),
        ("../src/./a.py", str(repo / "vendor")),
    ]
    for path, base in reached:
        assert files.name_file(path, base).name == "src/a.py", (path, base)
        assert resource_for(path, base or "/") == "src/a.py", (path, base)
    assert resource_for("src", str(work / "link")) == "src/"  # an existing directory
    with pytest.raises(LookupError, match="is in no git repository"):
        resource_for("notes.txt", str(work))
    # git names the staged entry: a link is the link (the commit changes it, not its target).
    assert staged_names(["src/a.py", "src/alias.py"], cwd=str(work / "link")) == [
        "src/a.py",
        "src/alias.py",
    ]
    # git runs its hooks with GIT_DIR set: the name still comes from the file's own repository.
    env = {**os.environ, "GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo)}
    done = subprocess.run(
        [sys.executable, "-c", "from groundcontrol_client.git import files; import sys; "
         "print(files.name_file(sys.argv[1]).name)", str(repo / "vendor/lib/x.py")],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "x.py"


@pytest.mark.django_db(transaction=True)
def test_the_proxy_and_the_git_hook_refuse_the_file_the_hook_leased(
    gc: Fleet, work: Path, tmp_path: Path
) -> None:
    state, repo, link = tmp_path / "state", work / "hookrepo", work / "link"
    # A's Claude Code session holds src/a.py, written through the linked clone from above it.
    assert (
        decision(hook(gc, write("sess-a", work, "link/src/a.py"), key=gc.key_a, state=state))
        is None
    )
    assert held_by("sess-a") == {"src/a.py"}

    # B's proxy, a write-shaped tool whose path is relative to its root (src/): refused.
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    params = StdioServerParameters(
        command=GCTL,
        args=["mcp", "--wrap", "--root", str(link / "src"), "--write-tool", "echo=text", "--",
              sys.executable, str(HERE / "mcp_dying_server.py")],
        env={"GC_URL": gc.url, "GC_KEY": gc.key_b, **path},
    )  # fmt: skip
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            read, send = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, send))
            await session.initialize()
            seen["a"] = await session.call_tool("echo", {"text": "a.py"})
            seen["alias"] = await session.call_tool("echo", {"text": str(repo / "src/alias.py")})
            seen["outside"] = await session.call_tool("echo", {"text": str(work / "notes.txt")})

    # Its own thread: a loop another test left running in this one must not stop it starting.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, main).result()
    for key in ("a", "alias"):
        said = "\n".join(block.text for block in seen[key].content)  # type: ignore[union-attr]
        assert seen[key].is_error and said.startswith(
            "src/a.py is held by session sess-a of hand hand-a since "
        ), said
        assert said.endswith("(echo was not run: nothing was written.)"), said
    outside = "\n".join(block.text for block in seen["outside"].content)  # type: ignore[union-attr]
    assert seen["outside"].is_error and "is in no git repository" in outside, outside

    # B's commit of the file, from the linked clone path: refused, the same name.
    home = tmp_path / "home"
    home.mkdir()
    env = gc.env(gc.key_b, GIT_CONFIG_NOSYSTEM="1", HOME=str(home))
    installed = subprocess.run(
        [GCTL, "git", "install"], cwd=link, env=env, capture_output=True, text=True, timeout=60
    )
    assert installed.returncode == 0, installed.stderr
    git("-c", "user.name=b", "-c", "user.email=b@example.com", "add", "src/a.py", cwd=link, env=env)
    refused = subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-q", "-m", "b"],
        cwd=link, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "src/a.py is under src/a.py, held by hand 'hand-a'" in refused.stderr, refused.stderr
    end(gc, "sess-a", key=gc.key_a, state=state)
