"""One name per file: the lease name of a file, from the file itself.

Every client that leases what it writes names files here (the Claude Code hook, the MCP
proxy's wrapped write tools, `gctl git`'s pre-commit), so that every session, clone location
and working directory that reaches one file gives it one name:

1. The path is made absolute (a relative one against the caller's base: the session's `cwd`,
   the proxy's root; only for that) and its symbolic links are resolved, `..` after them
   included (`os.path.realpath`: for a file that does not exist yet, its nearest existing
   ancestor is resolved and the rest appended).
2. The repository is the one of the file's own directory (its nearest existing ancestor):
   `git -C <that directory> rev-parse --show-toplevel`, resolved too, never the caller's
   working directory. Nested repositories and submodules: the innermost one holding the file.
   git runs without the variables that would point it at another repository (`GIT_DIR`, ...,
   which git sets for its own hooks), so the file alone decides.
3. The name is the path relative to that top level, `/`-separated: `src/auth/login.py`.

A file in no repository has no name (`FileName.name` is None). A writer refuses to write it
unleased (`outside_sentence`) unless `GC_ALLOW_OUTSIDE_REPO=1` (`outside_allowed`) lets such
writes through unleased. When git cannot answer at all (missing, timed out, refusing the
directory) `NamingError` says so: callers fail closed on it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import NamedTuple

ALLOW_OUTSIDE_REPO = "GC_ALLOW_OUTSIDE_REPO"
GIT_TIMEOUT_S = 10

# The variables that tie git to one repository (`git rev-parse --local-env-vars`): git sets
# some for its hooks, and with them `-C <dir>` would answer for that repository, not the dir's.
_REPOSITORY_VARIABLES = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_CONFIG",
    "GIT_DIR",
    "GIT_GRAFT_FILE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_NAMESPACE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_OBJECT_DIRECTORY",
    "GIT_PREFIX",
    "GIT_REPLACE_REF_BASE",
    "GIT_SHALLOW_FILE",
    "GIT_WORK_TREE",
)


class NamingError(Exception):
    """git could not say which repository holds a file (the sentence says why)."""


class FileName(NamedTuple):
    path: str  # absolute, symbolic links resolved
    top: str | None  # the innermost repository's top level, resolved; None: in none
    name: str | None  # `path` relative to `top`, `/`-separated; None: in no repository


def absolute(path: str, base: str | None = None) -> str:
    """`path` made absolute: a relative one against `base` (itself against the process's
    working directory), else the working directory."""
    if os.path.isabs(path):
        return path
    return os.path.join(os.path.abspath(base or os.getcwd()), path)


def existing_directory(resolved: str) -> str:
    """The nearest existing directory at or above `resolved`'s parent."""
    directory = os.path.dirname(resolved)
    while not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return directory


def git_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    env["LC_ALL"] = "C"  # git's own words, to tell "not a repository" from a failure
    return env


def toplevel(directory: str) -> str | None:
    """The resolved top level of the innermost repository holding the existing `directory`;
    None when it is in none. NamingError when git cannot say."""
    found = rev_parse(directory, "--show-toplevel")
    return os.path.realpath(found[0]) if found else None


def rev_parse(directory: str, *asked: str) -> list[str] | None:
    """`git rev-parse ASKED...` in the existing `directory`, a line an answer (the first the top
    level, when asked); None when it is in no repository's work tree. NamingError when git
    cannot say."""
    try:
        found = subprocess.run(
            ["git", "-C", directory, "rev-parse", *asked],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=git_environment(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as error:
        raise NamingError("git is not installed, so no repository can name the file") from error
    except (OSError, subprocess.SubprocessError) as error:
        raise NamingError(
            f"git could not be asked which repository holds {directory}: {error}"
        ) from error
    lines = found.stdout.splitlines()
    if found.returncode == 0 and lines and lines[0]:
        return lines
    said = found.stderr.strip()
    if "not a git repository" in said or "must be run in a work tree" in said:
        return None  # (inside a `.git` directory there is no work tree: no file of one)
    raise NamingError(
        f"git could not say which repository holds {directory}: "
        f"{said.splitlines()[-1] if said else f'exit {found.returncode}'}"
    )


class Namer:
    """Names files; remembers each directory's repository for as long as it lives (one hook
    call, one commit's paths, one proxied call), so many files of one tree cost one git call."""

    def __init__(self) -> None:
        self._tops: dict[str, str | None] = {}

    def name(self, path: str, base: str | None = None, *, entry: bool = False) -> FileName:
        """The name of the file at `path` (absolute, or relative to `base`). `entry`: name the
        directory entry itself, not what a symbolic link there points to (git commits a link,
        not its target); its directories are resolved all the same."""
        full = absolute(path, base)
        head, tail = os.path.split(full.rstrip(os.sep) or os.sep)
        if entry and tail not in ("", os.curdir, os.pardir):
            resolved = os.path.join(os.path.realpath(head), tail)
        else:
            resolved = os.path.realpath(full)  # `..` taken after the links before it
        directory = existing_directory(resolved)
        if directory not in self._tops:
            self._tops[directory] = toplevel(directory)
        top = self._tops[directory]
        if top is None:
            return FileName(resolved, None, None)
        relative = os.path.relpath(resolved, top)
        if relative in (os.curdir, os.pardir) or relative.startswith(os.pardir + os.sep):
            # `directory` is below `top` by git's own answer, so `resolved` is too: a name
            # outside it would mean the two disagree, and no lease could be trusted.
            raise NamingError(f"{resolved} is not below its repository's top level {top}")
        return FileName(resolved, top, relative.replace(os.sep, "/"))


def name_file(path: str, base: str | None = None, *, entry: bool = False) -> FileName:
    """The name of one file (`Namer.name`)."""
    return Namer().name(path, base, entry=entry)


def lease_name(path: str, base: str | None = None, namer: Namer | None = None) -> str | None:
    """The lease a write of `path` takes: the file's own name, with a trailing `/` for a
    directory that exists (a lease on it covers what is below). None for a path in no repository
    when `GC_ALLOW_OUTSIDE_REPO=1` lets it through unleased; else LookupError, the sentence, for
    it and for one git cannot place. Every writer that leases what a tool writes asks this (the
    MCP proxy, the Python frameworks' guard)."""
    try:
        named = (namer or Namer()).name(path, base)
    except NamingError as error:
        raise LookupError(f"{path} cannot be named for its lease: {error}.") from error
    if named.name is None:
        if outside_allowed():
            return None
        raise LookupError(outside_sentence(path, named))
    return named.name + "/" if os.path.isdir(named.path) else named.name


def outside_allowed(env: Mapping[str, str] | None = None) -> bool:
    """Whether writes of files in no repository pass unleased (`GC_ALLOW_OUTSIDE_REPO=1`)."""
    return (os.environ if env is None else env).get(ALLOW_OUTSIDE_REPO) == "1"


def outside_sentence(path: str, named: FileName) -> str:
    """Why a file in no repository is not written: the sentence the model (or user) reads."""
    shown = path if named.path == path else f"{path} ({named.path})"
    return (
        f"{shown} is in no git repository, so no lease can name it and no other agent's "
        "writes to it can be kept out: write only inside a repository (or set "
        f"{ALLOW_OUTSIDE_REPO}=1 to let writes outside repositories through unleased)."
    )
