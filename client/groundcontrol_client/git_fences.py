"""Fences at the repository: `gctl git install`, its hooks, and `gctl verify` for CI.

- `pre-commit`: every staged path (added, changed, deleted, both sides of a rename), named as
  every writer names it (`groundcontrol_client.files`: relative to the top level of the
  innermost repository holding it, its directories' links resolved), is looked up
  with the leases that cover it (`GET /leases?covering=`: a lease on the path or a directory
  above it). A path that another hand holds an exclusive lease over, or any lease while this
  hand holds none over it, is refused with the denial sentence; so is a path whose only cover is
  this hand's own lease gone past its grace (the hand that was paused and came back). A path
  nobody leases is the repository's own business and passes. The fences this hand's leases lent
  the commit are written to `$GIT_DIR/gc-fences` for the next hook.
- `commit-msg`: adds one `Ground-Control-Fence: <resource>@<fence>` trailer per fence relied on
  (`git interpret-trailers`), to the message as the user wrote it (`-m`, `-F` or the editor). It
  is commit-msg, not prepare-commit-msg, because `git commit --no-verify` skips both pre-commit
  and commit-msg: a skipped check never leaves a trailer it did not earn.
- `pre-push`: every commit being pushed (each stdin line `<local ref> <local sha> <remote ref>
  <remote sha>`: the commits in remote..local, or for a new branch those on no ref of the
  remote) has its trailers checked (`POST /fences/verify`); one that is not current refuses the
  push, saying which commit and fence.
- `gctl verify --commit REV` / `--range A..B`: the same check for CI, exit 4 on a stale fence.

An existing hook of another tool is kept: `install` moves it to `<hook>.chained` and the new
hook runs it first (with the same arguments and stdin), then its own check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from groundcontrol_client import files
from groundcontrol_client.client import Client
from groundcontrol_client.limits import LIMITS
from groundcontrol_client.models import FenceAnswer, Lease

TRAILER = "Ground-Control-Fence"
MARK = "# installed by gctl git install (Ground Control)"
HOOKS = {"pre-commit": "pre-commit", "commit-msg": "commit-msg", "pre-push": "pre-push"}
FENCES_FILE = "gc-fences"
HELD = ("live", "late", "stalled")
COVERING_PER_CALL = int(LIMITS["covering"])  # the server's limit on `covering` names per call
VERIFY_PER_CALL = int(LIMITS["verified_fences"])  # and on fences per verify
ZERO = "0" * 40
EXIT_STALE = 4


class GitError(Exception):
    """git itself failed (not a repository, an unknown revision)."""


def git(*args: str, cwd: str | None = None, input: str | None = None) -> str:
    done = subprocess.run(  # noqa: S603
        ["git", *args],  # noqa: S607
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


# --- install -----------------------------------------------------------------------------------


def _script(hook: str) -> str:
    command = f'"{sys.executable}" -m groundcontrol_client git {hook} "$@"'
    chained = f'"$(dirname "$0")/{hook}.chained"'
    if hook == "pre-push":  # both read the push's lines on stdin: read them once
        body = (
            "input=$(cat)\n"
            f'if [ -x {chained} ]; then printf "%s\\n" "$input" | {chained} "$@" || exit $?; fi\n'
            f'printf "%s\\n" "$input" | {command}\n'
        )
    else:
        body = f'if [ -x {chained} ]; then {chained} "$@" || exit $?; fi\nexec {command}\n'
    return f"#!/bin/sh\n{MARK}\n{body}"


def install(repo: str | None = None) -> list[str]:
    """Write the hooks into the repository at `repo` (default: the current directory's); the
    lines saying what was done."""
    cwd = repo or os.getcwd()
    hooks_dir = Path(cwd, git("rev-parse", "--git-path", "hooks", cwd=cwd).strip())
    hooks_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for hook in HOOKS:
        path = hooks_dir / hook
        if path.exists() and MARK not in path.read_text(errors="replace"):
            chained = hooks_dir / f"{hook}.chained"
            if chained.exists():
                raise GitError(f"{path} is another tool's hook and {chained} exists already")
            path.rename(chained)
            done.append(f"kept the existing {hook} hook as {chained.name}: it runs first")
        path.write_text(_script(hook))
        path.chmod(0o755)
        done.append(f"installed {path}")
    return done


# --- pre-commit --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    path: str
    sentence: str


def covering_nodes(path: str) -> list[str]:
    """The nodes whose leases cover `path` (as the server's `covering` reads it)."""
    node = path[:-1] if path.endswith("/") and len(path) > 1 else path
    parts = node.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _node(resource: str) -> str:
    return resource[:-1] if resource.endswith("/") and len(resource) > 1 else resource


def staged_paths(cwd: str | None = None) -> list[str]:
    """Every path the commit touches, relative to the repository's top (both sides of a
    rename: `--no-renames` lists the old path as deleted)."""
    out = git("diff", "--cached", "--name-only", "--no-renames", "-z", cwd=cwd)
    return sorted({p for p in out.split("\0") if p})


def staged_names(paths: Sequence[str], cwd: str | None = None) -> list[str]:
    """The lease names of the staged `paths` (relative to the work tree's top), as the hook and
    the MCP proxy name the same files (`files.Namer`). A path is named as the entry git
    commits: a symbolic link is the link, not its target (which the commit does not change).
    One git places in no repository (a work tree without a `.git` of its own) keeps its path."""
    if not paths:
        return []
    top = git("rev-parse", "--show-toplevel", cwd=cwd).strip()
    namer = files.Namer()
    names: dict[str, None] = {}
    for path in paths:
        try:
            named = namer.name(path, top, entry=True)
        except files.NamingError as error:
            raise GitError(f"{path} cannot be named for its lease: {error}") from error
        names[named.name or path] = None
    return sorted(names)


def _leases_covering(client: Client, paths: Sequence[str]) -> list[Lease]:
    leases: dict[tuple[str, str, int], Lease] = {}
    for start in range(0, len(paths), COVERING_PER_CALL):
        for lease in client.leases(covering=paths[start : start + COVERING_PER_CALL]):
            leases[lease.resource, lease.holder, lease.fence] = lease
    return list(leases.values())


def judge(
    paths: Sequence[str], leases: Iterable[Lease], me: str
) -> tuple[list[str], list[Refusal]]:
    """The fences relied on, and the paths refused, by the rule of the module's docstring."""
    relied: dict[str, None] = {}
    refused = []
    leases = list(leases)
    for path in paths:
        line = set(covering_nodes(path))
        over = [lease for lease in leases if _node(lease.resource) in line]
        others = [x for x in over if x.holder != me and x.state in HELD]
        mine = [x for x in over if x.holder == me and x.state in HELD]
        lost = [x for x in over if x.holder == me and x.state == "lost"]
        blocking = [x for x in others if x.mode != "shared" or not mine]
        if blocking:
            x = blocking[0]
            refused.append(
                Refusal(
                    path,
                    f"{path} is under {x.resource}, held by hand '{x.holder}' (fence {x.fence}, "
                    f"{x.state}{', shared' if x.mode == 'shared' else ''}), and this hand "
                    f"('{me}') holds no lease covering it: take the lease (gctl lease acquire "
                    f"{x.resource}) or leave the file out of the commit",
                )
            )
        elif lost and not mine:
            x = lost[0]
            refused.append(
                Refusal(
                    path,
                    f"{path} is under {x.resource}, whose lease this hand held at fence "
                    f"{x.fence} and lost (past its grace): take the lease again before "
                    "committing under it",
                )
            )
        else:
            for x in mine:
                relied[f"{x.resource}@{x.fence}"] = None
    return list(relied), refused


def _fences_file(cwd: str | None = None) -> Path:
    return Path(cwd or os.getcwd(), git("rev-parse", "--git-path", FENCES_FILE, cwd=cwd).strip())


def pre_commit(client: Client, cwd: str | None = None) -> int:
    fences_file = _fences_file(cwd)
    fences_file.unlink(missing_ok=True)  # never a trailer left from a commit that did not happen
    paths = staged_names(staged_paths(cwd), cwd)
    if not paths:
        return 0
    me = client.me().hand
    relied, refused = judge(paths, _leases_covering(client, paths), me)
    if refused:
        for refusal in refused:
            print(f"Ground Control: {refusal.sentence}", file=sys.stderr)
        print(
            f"Ground Control: commit refused ({len(refused)} of {len(paths)} paths)",
            file=sys.stderr,
        )
        return 1
    if relied:
        fences_file.write_text("".join(f"{fence}\n" for fence in relied))
    return 0


def commit_msg(message_file: str, cwd: str | None = None) -> int:
    fences_file = _fences_file(cwd)
    try:
        fences = [line for line in fences_file.read_text().splitlines() if line]
    except FileNotFoundError:
        return 0
    args = ["interpret-trailers", "--in-place", "--if-exists", "addIfDifferent"]
    for fence in fences:
        args += ["--trailer", f"{TRAILER}: {fence}"]
    git(*args, message_file, cwd=cwd)
    fences_file.unlink(missing_ok=True)
    return 0


# --- pre-push and verify -----------------------------------------------------------------------


def fences_of(revisions: Sequence[str], cwd: str | None = None) -> dict[str, list[str]]:
    """Each commit's `Ground-Control-Fence` trailers, for `git log`'s `revisions`."""
    if not revisions:
        return {}
    fmt = f"%H%n%(trailers:key={TRAILER},valueonly,unfold)%x00"
    out = git("log", "-z", f"--format={fmt}", *revisions, "--", cwd=cwd)
    commits: dict[str, list[str]] = {}
    for record in out.split("\0"):
        lines = [line.strip() for line in record.strip("\n").splitlines() if line.strip()]
        if lines:
            commits[lines[0]] = lines[1:]
    return commits


def verify_commits(client: Client, commits: dict[str, list[str]]) -> list[tuple[str, FenceAnswer]]:
    """The fences of `commits` that are not current, each with a commit that carries it."""
    unique = list(dict.fromkeys(f for fences in commits.values() for f in fences))
    answers: dict[str, FenceAnswer] = {}
    for start in range(0, len(unique), VERIFY_PER_CALL):
        for answer in client.fences_verify(unique[start : start + VERIFY_PER_CALL]):
            answers[answer.fence] = answer
    return [
        (sha, answers[fence])
        for sha, fences in commits.items()
        for fence in fences
        if fence in answers and not answers[fence].current
    ]


def say_stale(sha: str, answer: FenceAnswer) -> str:
    if answer.status == "unknown":
        return (
            f"commit {sha[:12]} carries {answer.fence}: no such fence was ever granted in "
            "this workspace"
        )
    since = f" at {answer.when.isoformat()}" if answer.when else ""
    return (
        f"commit {sha[:12]} carries {answer.fence}, which is stale: the lease {answer.ended}"
        f"{since}; the current fence is {answer.current_fence}"
    )


def push_revisions(lines: Iterable[str], remote: str) -> list[str]:
    """`git log` arguments for the commits the push's stdin lines would send."""
    revisions: list[str] = []
    for line in lines:
        parts = line.split()
        if len(parts) != 4 or parts[1] == ZERO:
            continue  # a malformed line, or a deletion, sends no commit
        local, remote_sha = parts[1], parts[3]
        if remote_sha == ZERO:
            revisions += [local, "--not", f"--remotes={remote}"]
        else:
            revisions.append(f"{remote_sha}..{local}")
    return revisions


def pre_push(client: Client, remote: str, stdin: Iterable[str], cwd: str | None = None) -> int:
    commits: dict[str, list[str]] = {}
    for line in stdin:
        revisions = push_revisions([line], remote)
        try:
            commits.update(fences_of(revisions, cwd))
        except GitError:  # the remote's tip is not here: everything not on the remote
            parts = line.split()
            commits.update(fences_of([parts[1], "--not", f"--remotes={remote}"], cwd))
    stale = verify_commits(client, commits)
    for sha, answer in stale:
        print(f"Ground Control: {say_stale(sha, answer)}", file=sys.stderr)
    if stale:
        print("Ground Control: push refused: it carries a stale fence", file=sys.stderr)
        return 1
    return 0


def verify(client: Client, *, commit: str | None, range_: str | None, cwd: str | None = None):  # noqa: ANN201
    """`gctl verify`: (the result's JSON and text, exit code)."""
    revisions = [range_] if range_ else ["--no-walk", commit or "HEAD"]
    commits = fences_of(revisions, cwd)
    stale = verify_commits(client, commits)
    fences = sorted({f for fs in commits.values() for f in fs})
    data = {
        "commits": len(commits),
        "fences": fences,
        "stale": [{"commit": sha, **answer.raw} for sha, answer in stale],
    }
    if stale:
        text = "\n".join(say_stale(sha, answer) for sha, answer in stale)
        return data, text, EXIT_STALE
    text = (
        f"{len(fences)} fence{'s' if len(fences) != 1 else ''} current in {len(commits)} "
        f"commit{'s' if len(commits) != 1 else ''}" + (f": {', '.join(fences)}" if fences else "")
    )
    return data, text, 0
