"""What only the agent's disk can tell the server about a session's files: the repositories'
top levels (as the session spells them, and resolved), their tracked symbolic links, and which
files a shell command changed. Standard library only: a hook starts cold for every tool call.

The server names a file from these alone (harnesses/naming.py); the rule they serve is the
client's own (`groundcontrol_client.git.files`, docs/agents.md "One name per file")."""

from __future__ import annotations

import json
import os
import subprocess
import zlib
from typing import Any

from groundcontrol_client.git import files

GIT_TIMEOUT_S = 10
# Unplaced paths whose repositories one event looks for, at most.
MAX_LOOKUPS = 16


def _git(top: str, *args: str) -> bytes:
    done = subprocess.run(
        ["git", "-C", top, *args],  # noqa: S607
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


def _state_file(state: str, kind: str, key: str) -> str:
    """A file of `state` for `key` (its name a checksum: the file says whose it is)."""
    return os.path.join(state, f"{kind}-{zlib.crc32(key.encode()):08x}.json")


def repository_of(path: str) -> tuple[str, str, dict[str, str]] | None:
    """The top level of the repository holding `path` (a directory, or a file that may not exist
    yet: its nearest existing directory), resolved; its index file; and a link from that
    directory's own spelling to its resolved path when the two differ. None outside any
    repository. One git call."""
    path = os.path.abspath(path)
    existing = path if os.path.isdir(path) else files.existing_directory(path)
    resolved = os.path.realpath(existing)
    found = files.rev_parse(resolved, "--show-toplevel", "--git-path", "index")
    if found is None or len(found) < 2:
        return None
    top, index = os.path.realpath(found[0]), found[1]
    links = {existing: resolved} if existing != resolved else {}
    return top, os.path.join(resolved, index), links


def tracked_links(top: str, index: str, state: str) -> dict[str, str]:
    """The repository's tracked symbolic links: each link's absolute path -> the absolute path it
    resolves to, read once per change of the repository's index (kept in `state`)."""
    try:
        stat = os.stat(index)
        stamp = f"{stat.st_mtime_ns}:{stat.st_size}"
    except OSError:
        stamp = "none"
    cache = _state_file(state, "links", top)
    try:
        with open(cache) as kept_file:
            kept = json.load(kept_file)
        if kept.get("top") == top and kept.get("stamp") == stamp:
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
    os.makedirs(state, exist_ok=True)
    with open(cache, "w") as kept_file:
        json.dump({"top": top, "stamp": stamp, "links": links}, kept_file)
    return links


def registration(paths: list[str], state: str) -> dict[str, Any]:
    """`groundcontrol.repositories` and `links` for the repositories holding `paths`."""
    repositories: list[str] = []
    links: dict[str, str] = {}
    for path in paths[:MAX_LOOKUPS]:
        found = repository_of(path)
        if found is None:
            continue
        top, index, spelled = found
        if top not in repositories:
            repositories.append(top)
            links.update(tracked_links(top, index, state))
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


def snapshot_file(state: str, session: str) -> str:
    return _state_file(state, "shell", session)
