"""A file a harness names, placed in a session's registered repositories: the server cannot see
the agent's disk, so the agent's side says where its repositories are (`sessions`), and a path
is named from them alone, as the client names it (docs/agents.md, "One name per file"): relative
to the top level of the innermost registered repository holding it. A path no registered
repository holds has no name: it is denied, never guessed from the event's `cwd` (which only
makes a relative path absolute).

What the agent's side resolved on its disk comes with its registration: each repository's top
level (resolved), how the session's spelling reaches it, and the repository's tracked symbolic
links (`links`: the link's absolute path and the absolute path it resolves to), so a write
through a link takes the lease of the file it reaches. A command hook does better: asked
(`X-GC-Resolve`), it resolves each path the event writes on its disk and sends what each
reaches (`groundcontrol.resolved`), which every link, tracked or not, is then part of.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

# A link that leads to a link: resolved this many times at most (a loop is no name).
MAX_LINK_HOPS = 16


@dataclass(frozen=True)
class Placed:
    name: str | None  # the resource, or None when the path has none
    path: str  # the absolute path, as placed
    why: str = ""  # when no name: the sentence's reason


def _joined(path: str, cwd: str | None) -> str | None:
    """`path`, absolute (from `cwd` if relative); None if it cannot be."""
    if path.startswith("/"):
        return path
    if not cwd or not cwd.startswith("/"):
        return None
    return posixpath.join(cwd, path)


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def resolved(path: str, links: dict[str, str]) -> str | None:
    """`path` as the disk would resolve it, as far as the session's registered links tell: one
    segment after the other, a link replaced by what it reaches as soon as it is met, so that a
    `..` after a link leaves what the link reached (as the kernel does), not the link's parent.
    None for a loop of links."""
    parts: list[str] = []
    pending = [p for p in path.split("/") if p not in ("", ".")]
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
        target = links.get("/" + "/".join(parts))
        if target is not None:
            hops += 1
            if hops > MAX_LINK_HOPS:
                return None
            pending = [p for p in target.split("/") if p not in ("", ".")] + pending
            parts = []
    return "/" + "/".join(parts)


def place(
    path: str,
    cwd: str | None,
    repositories: list[str],
    links: dict[str, str],
    disk: dict[str, str] | None = None,
) -> Placed:
    """The name of `path` (relative to `cwd`), from the session's registered `repositories` and
    `links`; or, when the agent's side resolved it on its disk (`disk`: the path as the event
    names it -> the absolute path it resolves to), from that."""
    known = (disk or {}).get(path)
    if known:
        reached: str | None = posixpath.normpath(known)
    elif path.startswith("~"):
        return Placed(None, path, "starts with ~, which only the agent's own disk can resolve")
    else:
        joined = _joined(path, cwd)
        if joined is None:
            return Placed(None, path, "is relative and the event has no absolute cwd to place it")
        reached = resolved(joined, links)
    if reached is None:
        return Placed(None, path, "leads through a loop of symbolic links")
    top = max((root for root in repositories if _inside(reached, root)), key=len, default=None)
    if top is None:
        return Placed(
            None,
            reached,
            "is in no repository this session registered, so no lease can name it",
        )
    name = reached[len(top.rstrip("/")) + 1 :]
    if not name:
        return Placed(None, reached, "is a repository's top level, not a file in it")
    if name == ".git" or name.startswith(".git/"):
        return Placed(None, reached, "is inside the repository's .git directory")
    return Placed(name, reached)
