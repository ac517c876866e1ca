"""What only the agent's disk can tell the server about a session's files: the repositories'
top levels (as the session spells them, and resolved), their tracked symbolic links, and which
files a shell command changed. Standard library only: a hook starts cold for every tool call.

The server names a file from these alone (harnesses/naming.py); the rule they serve is the
client's own (`groundcontrol_client.files`, docs/agents.md "One name per file")."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from groundcontrol_client import files

GIT_TIMEOUT_S = 10
# Unplaced paths whose repositories one event looks for, at most.
MAX_LOOKUPS = 16


def _git(top: str, *args: str) -> bytes:
    done = subprocess.run(
        ["git", "-C", top, *args],
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        env=files.git_environment(),
        check=False,
    )
    if done.returncode != 0:
        raise files.NamingError(
            f"git {' '.join(args)} in {top} failed: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout


def repository_of(path: str) -> tuple[str, dict[str, str]] | None:
    """The top level of the repository holding `path` (a directory, or a file that may not exist
    yet: its nearest existing directory), resolved, and a link from that directory's own
    spelling to its resolved path when the two differ; None outside any repository."""
    path = os.path.abspath(path)
    existing = path if os.path.isdir(path) else files.existing_directory(path)
    resolved = os.path.realpath(existing)
    top = files.toplevel(resolved)
    if top is None:
        return None
    links = {existing: resolved} if existing != resolved else {}
    return top, links


def tracked_links(top: str, state: Path) -> dict[str, str]:
    """The repository's tracked symbolic links: each link's absolute path -> the absolute path it
    resolves to, read once per change of the repository's index (kept in `state`)."""
    index = Path(_git(top, "rev-parse", "--git-path", "index").decode().strip())
    index = index if index.is_absolute() else Path(top) / index
    try:
        stamp = f"{index.stat().st_mtime_ns}:{index.stat().st_size}"
    except OSError:
        stamp = "none"
    cache = state / f"links-{hashlib.sha256(top.encode()).hexdigest()[:24]}.json"
    try:
        kept = json.loads(cache.read_text())
        if kept.get("stamp") == stamp:
            return dict(kept["links"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    links: dict[str, str] = {}
    for entry in _git(top, "ls-files", "-s", "-z").split(b"\0"):
        if not entry.startswith(b"120000 "):
            continue
        path = os.path.join(top, entry.split(b"\t", 1)[1].decode(errors="surrogateescape"))
        target = os.path.realpath(path)
        if target != path:
            links[path] = target
    state.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"stamp": stamp, "links": links}))
    return links


def registration(paths: list[str], state: Path) -> dict[str, Any]:
    """`groundcontrol.repositories` and `links` for the repositories holding `paths`."""
    repositories: list[str] = []
    links: dict[str, str] = {}
    for path in paths[:MAX_LOOKUPS]:
        found = repository_of(path)
        if found is None:
            continue
        top, spelled = found
        if top not in repositories:
            repositories.append(top)
            links.update(tracked_links(top, state))
        links.update(spelled)
    return {"repositories": repositories, "links": links}


# --- A shell command's writes: the dirty files before it and after it -----------------------------


def dirty(top: str) -> dict[str, list[Any]]:
    """Each file git reports changed or untracked (ignored files are not), by absolute path, with
    its status and (mtime, size): a file changed again while it was dirty counts as changed."""
    out = _git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    entries = out.split(b"\0")
    found: dict[str, list[Any]] = {}
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        status, path = entry[:2].decode(), entry[3:].decode(errors="surrogateescape")
        paths = [path]
        if status[0] in "RC":  # a rename or copy: the next entry is its source
            paths.append(entries[i].decode(errors="surrogateescape"))
            i += 1
        for name in paths:
            where = os.path.join(top, name)
            try:
                info = os.lstat(where)
                found[where] = [status, info.st_mtime_ns, info.st_size]
            except OSError:
                found[where] = [status, None, None]
    return found


def changed_since(before: dict[str, list[Any]] | None, now: dict[str, list[Any]]) -> list[str]:
    """The files a command changed: dirty now and not as they were, or dirty before and clean now
    (a `git checkout -- file` is a write too). Without `before`, every dirty file."""
    if before is None:
        return sorted(now)
    return sorted({p for p, seen in now.items() if before.get(p) != seen} | (before.keys() - now))


def snapshot_file(state: Path, session: str) -> Path:
    return state / f"shell-{hashlib.sha256(session.encode()).hexdigest()[:24]}.json"
