"""Fences at the repository: `gctl git install`, its hooks, and `gctl verify` for CI.

- `pre-commit`: every staged path (added, changed, deleted, both sides of a rename), named as
  every writer names it (`groundcontrol_client.git.files`: relative to the top level of the
  innermost repository holding it, its directories' links resolved), is looked up
  with the leases that cover it (`GET /leases?covering=`: a lease on the path or a directory
  above it). A path that another hand holds an exclusive lease over, or any lease while this
  hand holds none over it, is refused with the denial sentence; when the environment names
  the committing process (`GC_PROCESS_ID`, or a Claude Code session's), a lease of another of
  this hand's processes (another session) counts as another holder's. So is a path whose
  last lease of this hand ended without its release (lost past its grace, or broken:
  `POST /fences/verify`'s `paths`), while it holds none over it now, even after another hand
  held it and released it (the hand that was paused and came back). A path nobody leases is
  the repository's own business and passes. The fences this hand's leases lent the commit are
  written to `$GIT_DIR/gc-fences` for the next hook.
- `commit-msg`: adds one `Ground-Control-Fence: <resource>@<fence> <holder>` trailer per fence
  relied on (`git interpret-trailers`), to the message as the user wrote it (`-m`, `-F` or the
  editor). The holder is this hand's name as one word (`holder_text`), so that a commit cannot
  borrow another's fence. It is commit-msg, not prepare-commit-msg, because
  `git commit --no-verify` skips both pre-commit and commit-msg: a skipped check never leaves a
  trailer it did not earn.
- `pre-push`: every commit being pushed (each stdin line `<local ref> <local sha> <remote ref>
  <remote sha>`: the commits in remote..local, or for a new branch those on no ref of the
  remote) is judged by the server when it lands (`POST /fences/receipts`): each fence it
  carries must be current and this hand's, and no path it touches (`git diff-tree`) may be under
  another hand's lease or this hand's lapsed one. The server keeps a signed receipt of each
  commit; one refused refuses the push, saying which commit and why.
- `gctl verify --commit REV` / `--range A..B`: CI reads those receipts back (`GET
  /fences/receipts`): a commit whose receipt says it was accepted passes, even after its
  holder released; one whose receipt says refused, or that has no receipt while it carries a
  fence not current now or touches a path leased now, is stale (exit 4).

A commit's receipt is keyed by the repository (`repository_of`: the remote's URL without its
scheme, credentials and `.git`, so ssh and https clones of one repository agree) and its sha.

An existing hook of another tool is kept: `install` moves it to `<hook>.chained` and the new
hook runs it first (with the same arguments and stdin), then its own check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from groundcontrol_client.core.errors import QUOTE, hand_called
from groundcontrol_client.core.limits import LIMITS
from groundcontrol_client.core.models import (
    FenceAnswer,
    Lease,
    PathAnswer,
    RecordedReceipt,
    StoredReceipt,
)
from groundcontrol_client.git import files
from groundcontrol_client.http import Client

TRAILER = "Ground-Control-Fence"
MARK = "# installed by gctl git install (Ground Control)"
HOOKS = {"pre-commit": "pre-commit", "commit-msg": "commit-msg", "pre-push": "pre-push"}
FENCES_FILE = "gc-fences"
HELD = ("live", "late", "stalled")
COVERING_PER_CALL = int(LIMITS["covering"])  # the server's limit on `covering` names per call
VERIFY_PER_CALL = int(LIMITS["verified_fences"])  # and on fences per verify
# The server's `verified_paths`, `receipt_commits` and `receipt_names` (x-limits; a test holds
# these to them).
PATHS_PER_CALL = 500
RECEIPT_COMMITS_PER_CALL = 100
RECEIPT_NAMES_PER_CALL = 2000
ZERO = "0" * 40
EXIT_STALE = 4
NO_RECEIPT = (
    "it was pushed past Ground Control's pre-push hook (--no-verify, or from a clone without "
    "`gctl git install`), so nothing says its fences were current when it landed"
)
# A trailer's holder is one word: `%`, `@` and whitespace written as %XX (the server reads it
# back: leases.verification.holder_text).
_ESCAPED = re.compile(r"[%@\s]")


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


def committing_process(env: Mapping[str, str] | None = None) -> str | None:
    """The process identity the commit is made by, when the environment says: `GC_PROCESS_ID`,
    else a Claude Code session's (`CLAUDE_CODE_SESSION_ID`, its hooks' identity); None when
    it does not (then "this hand" is the key's hand, whatever process holds its lease)."""
    env = os.environ if env is None else env
    if env.get("GC_PROCESS_ID"):
        return env["GC_PROCESS_ID"]
    session = env.get("CLAUDE_CODE_SESSION_ID")
    return f"claude-code:{session}" if session else None


def judge(
    paths: Sequence[str], leases: Iterable[Lease], me: str, process: str | None = None
) -> tuple[list[str], list[Refusal]]:
    """The fences relied on, and the paths refused, by the rule of the module's docstring. With
    the committing `process`, a lease of this hand held by another of its processes (another
    session) is another holder's."""
    relied: dict[str, None] = {}
    refused = []
    leases = list(leases)

    def ours(lease: Lease) -> bool:
        return lease.holder == me and (process is None or lease.process_id == process)

    for path in paths:
        line = set(covering_nodes(path))
        over = [lease for lease in leases if _node(lease.resource) in line]
        others = [x for x in over if not ours(x) and x.state in HELD]
        mine = [x for x in over if ours(x) and x.state in HELD]
        lost = [x for x in over if ours(x) and x.state == "lost"]
        blocking = [x for x in others if x.mode != "shared" or not mine]
        if blocking:
            x = blocking[0]
            whose = hand_called(x.holder, quote=QUOTE)
            if x.holder == me:
                whose = f"this hand's other process ('{x.process_id}')"
            committer = f"this hand ('{me}')" if process is None else f"this session ({process})"
            refused.append(
                Refusal(
                    path,
                    f"{path} is under {x.resource}, held by {whose} (fence {x.fence}, "
                    f"{x.state}{', shared' if x.mode == 'shared' else ''}), and {committer} "
                    f"holds no lease covering it: take the lease (gctl lease acquire "
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
                relied[trailer_value(x.resource, x.fence, me)] = None
    return list(relied), refused


def holder_text(holder: str) -> str:
    """A holder as a trailer writes it: one word, `%`, `@` and whitespace as %XX (UTF-8)."""
    return _ESCAPED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), holder)


def fence_of(trailer: str) -> str:
    """`<resource>@<fence>` of a trailer's value, without the holder it may name (the last
    word, which holds no `@`; a value ending in the fence's digits names none)."""
    tail = trailer.rpartition("@")[2]
    if tail.isascii() and tail.isdigit() or " " not in tail:
        return trailer
    return trailer.rpartition(" ")[0]


def trailer_value(resource: str, fence: int, holder: str) -> str:
    """`<resource>@<fence> <holder>`: what a commit's Ground-Control-Fence trailer says."""
    return f"{resource}@{fence} {holder_text(holder)}"


def unguarded(paths: Sequence[str], leases: Iterable[Lease], me: str) -> list[str]:
    """The paths on whose line some lease has ever been taken (a row, in any state) and over
    which this hand holds no lease now: those that its own lapsed lease may still fence."""
    leases = list(leases)
    out = []
    for path in paths:
        line = set(covering_nodes(path))
        over = [x for x in leases if _node(x.resource) in line]
        if over and not any(x.holder == me and x.state in HELD for x in over):
            out.append(path)
    return out


def lapsed_refusals(client: Client, paths: Sequence[str], me: str) -> list[Refusal]:
    """The paths whose last lease of this hand ended without its release (the server's
    `lapsed`): it was paused or broken away, and its copy may predate another's work."""
    refused = []
    for start in range(0, len(paths), PATHS_PER_CALL):
        for answer in client.paths_verify(paths[start : start + PATHS_PER_CALL]):
            if answer.lapsed is not None:
                refused.append(Refusal(answer.path, say_lapsed(answer, me)))
    return refused


def say_lapsed(answer: PathAnswer, me: str) -> str:
    lapsed = answer.lapsed
    assert lapsed is not None
    when = f" at {lapsed.when.isoformat()}" if lapsed.when else ""
    return (
        f"{answer.path} is under {lapsed.resource}, whose lease this hand ('{me}') held at fence "
        f"{lapsed.fence} and {lapsed.ended}{when}, and it holds none over it now: its copy may "
        "predate the work of whoever held it since; take the lease again (gctl lease acquire "
        f"{lapsed.resource}) before committing under it"
    )


def _fences_file(cwd: str | None = None) -> Path:
    return Path(cwd or os.getcwd(), git("rev-parse", "--git-path", FENCES_FILE, cwd=cwd).strip())


def pre_commit(client: Client, cwd: str | None = None) -> int:
    fences_file = _fences_file(cwd)
    fences_file.unlink(missing_ok=True)  # never a trailer left from a commit that did not happen
    paths = staged_names(staged_paths(cwd), cwd)
    if not paths:
        return 0
    me = client.me().hand
    leases = _leases_covering(client, paths)
    relied, refused = judge(paths, leases, me, committing_process())
    done = {refusal.path for refusal in refused}
    open_paths = [p for p in unguarded(paths, leases, me) if p not in done]
    refused += lapsed_refusals(client, open_paths, me)
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


def commit_paths(sha: str, cwd: str | None = None) -> list[str]:
    """The files a commit touches, by their lease names: `git diff-tree` against its parent
    (both sides of a rename; a root commit's every file; a merge's files that differ from every
    parent, `-c`: what the merge itself wrote)."""
    out = git(
        "diff-tree",
        "--no-commit-id",
        "--name-only",
        "-r",
        "--root",
        "-c",
        "--no-renames",
        "-z",
        sha,
        cwd=cwd,
    )
    return staged_names(sorted({p for p in out.split("\0") if p}), cwd)


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


_DEFAULT_PORTS = {"ssh": 22, "git+ssh": 22, "https": 443, "http": 80, "git": 9418}
# `[user@]host:path`: git's scp-like form (a colon before any slash).
_SCP = re.compile(r"^(?:[^@/:]+@)?(?P<host>[^/:]+):(?P<path>.*)$")


def repository_of(url: str, cwd: str | None = None) -> str:
    """The repository a remote URL names, one way whatever the clone's form: `host/path` for a
    network URL (no scheme, user or password; the host lowercase), the resolved path for a
    local one; without a trailing `/` or `.git` either way."""
    url = url.strip()
    parts = urlsplit(url) if "://" in url else None
    scp = _SCP.match(url) if parts is None else None
    if parts is not None and parts.scheme != "file":
        try:
            port = parts.port
        except ValueError:  # not a number: keep it as written
            port = None
        shown = f":{port}" if port and port != _DEFAULT_PORTS.get(parts.scheme) else ""
        name = f"{(parts.hostname or '').lower()}{shown}/{parts.path.strip('/')}"
    elif scp is not None and not os.path.exists(url):
        name = f"{scp['host'].lower()}/{scp['path'].strip('/')}"
    else:
        local = parts.path if parts is not None else url
        name = os.path.realpath(os.path.join(cwd or os.getcwd(), local))
    name = name.rstrip("/")
    return name.removesuffix(".git").rstrip("/") or name


def remote_repository(remote: str, cwd: str | None = None) -> str:
    """The repository of `remote` (a remote's name, or a URL as git passes a push to one)."""
    try:
        url = git("remote", "get-url", remote, cwd=cwd).strip()
    except GitError:
        if "/" not in remote and ":" not in remote:
            raise GitError(
                f"there is no remote '{remote}' to name the repository by (give --remote)"
            ) from None
        url = remote  # a push straight to a URL or a path
    return repository_of(url, cwd)


@dataclass(frozen=True)
class Pushed:
    sha: str
    fences: list[str]
    paths: list[str]

    @property
    def names(self) -> int:
        return len(self.fences) + len(self.paths)

    def body(self) -> dict[str, Any]:
        return {"sha": self.sha, "fences": self.fences, "paths": self.paths}


def pushed_commits(commits: dict[str, list[str]], cwd: str | None = None) -> list[Pushed]:
    return [Pushed(sha, fences, commit_paths(sha, cwd)) for sha, fences in commits.items()]


def batches(commits: Sequence[Pushed]) -> list[list[Pushed]]:
    """The commits in calls the server takes (`receipt_commits`, `receipt_names`)."""
    out: list[list[Pushed]] = []
    names = 0
    for commit in commits:
        if commit.names > RECEIPT_NAMES_PER_CALL:
            raise GitError(
                f"commit {commit.sha[:12]} carries fences and touches paths {commit.names} in "
                f"all, more than one receipt may judge ({RECEIPT_NAMES_PER_CALL}): split it"
            )
        if (
            not out
            or len(out[-1]) >= RECEIPT_COMMITS_PER_CALL
            or (names + commit.names > RECEIPT_NAMES_PER_CALL)
        ):
            out.append([])
            names = 0
        out[-1].append(commit)
        names += commit.names
    return out


def record_receipts(
    client: Client, repository: str, commits: Sequence[Pushed], process_id: str | None
) -> list[RecordedReceipt]:
    receipts: list[RecordedReceipt] = []
    for batch in batches(commits):
        recorded = client.fences_receipts(
            repository, [c.body() for c in batch], process_id=process_id
        )
        receipts += recorded.receipts
    return receipts


def pre_push(
    client: Client,
    remote: str,
    stdin: Iterable[str],
    cwd: str | None = None,
    *,
    url: str | None = None,
    process_id: str | None = None,
) -> int:
    commits: dict[str, list[str]] = {}
    for line in stdin:
        revisions = push_revisions([line], remote)
        try:
            commits.update(fences_of(revisions, cwd))
        except GitError:  # the remote's tip is not here: everything not on the remote
            parts = line.split()
            commits.update(fences_of([parts[1], "--not", f"--remotes={remote}"], cwd))
    if not commits:
        return 0
    repository = repository_of(url, cwd) if url else remote_repository(remote, cwd)
    receipts = record_receipts(client, repository, pushed_commits(commits, cwd), process_id)
    refused = [receipt for receipt in receipts if not receipt.accepted]
    for receipt in refused:
        for refusal in receipt.refusals:
            print(f"Ground Control: commit {receipt.sha[:12]} {refusal.message}", file=sys.stderr)
    if refused:
        print(
            f"Ground Control: push refused: {len(refused)} of {len(receipts)} commits "
            "carry a stale fence or touch a path they may not (each receipt is on record)",
            file=sys.stderr,
        )
        return 1
    return 0


# --- verify (CI) -------------------------------------------------------------------------------


def fence_answers(client: Client, trailers: Iterable[str]) -> dict[str, FenceAnswer]:
    """Where each trailer's fence stands now, by the trailer as written."""
    unique = list(dict.fromkeys(trailers))
    answers: dict[str, FenceAnswer] = {}
    for start in range(0, len(unique), VERIFY_PER_CALL):
        chunk = unique[start : start + VERIFY_PER_CALL]
        answers.update(zip(chunk, client.fences_verify(chunk), strict=True))
    return answers


def verify_commits(client: Client, commits: dict[str, list[str]]) -> list[tuple[str, FenceAnswer]]:
    """The fences of `commits` that are not current now (or not the named holder's), each with
    a commit that carries it."""
    answers = fence_answers(client, (f for fences in commits.values() for f in fences))
    return [
        (sha, answers[fence])
        for sha, fences in commits.items()
        for fence in fences
        if not answers[fence].current
    ]


def say_stale(sha: str, answer: FenceAnswer) -> str:
    if answer.status == "unknown":
        return (
            f"commit {sha[:12]} carries {answer.fence}: no such fence was ever granted in "
            "this workspace"
        )
    if answer.status == "not_holder":
        return (
            f"commit {sha[:12]} carries {answer.fence} naming hand '{answer.named_holder}', but "
            f"that tenure is {hand_called(answer.holder, quote=QUOTE)}'s: a commit cannot borrow "
            "another's fence"
        )
    since = f" at {answer.when.isoformat()}" if answer.when else ""
    return (
        f"commit {sha[:12]} carries {answer.fence}, which is stale: the lease {answer.ended}"
        f"{since}; the current fence is {answer.current_fence}"
    )


def _receipts_of(client: Client, repository: str, shas: Sequence[str]) -> dict[str, StoredReceipt]:
    found: dict[str, StoredReceipt] = {}
    for start in range(0, len(shas), RECEIPT_COMMITS_PER_CALL):
        chunk = shas[start : start + RECEIPT_COMMITS_PER_CALL]
        for receipt in client.fences_receipts_lookup(repository, chunk):
            found[receipt.sha] = receipt
    return found


def _judged_by_receipt(sha: str, receipt: StoredReceipt) -> list[str]:
    """What is wrong with a commit by its receipt (nothing for an accepted, signed one)."""
    if not receipt.signature_valid:
        return [
            f"commit {sha[:12]}'s push receipt does not verify: its record was altered, or the "
            "server's SECRET_KEY changed without SECRET_KEY_FALLBACKS"
        ]
    pushed = f" (as its push receipt of {receipt.at.isoformat()} records)" if receipt.at else ""
    return [f"commit {sha[:12]} {refusal.message}{pushed}" for refusal in receipt.refusals] or (
        [] if receipt.accepted else [f"commit {sha[:12]} was refused when pushed{pushed}"]
    )


def _judged_now(
    client: Client, commits: dict[str, list[str]], cwd: str | None
) -> list[tuple[str, str, dict[str, Any]]]:
    """Commits without a receipt (pushed past the hook, or from a clone without it), judged as
    they stand now: a fence they carry proves nothing without a receipt (a trailer is only
    text), so each is refused, as stale when it is no longer current; and no path may be under
    a lease held now. (sha, sentence, the answer's JSON) for each fault."""
    answers = fence_answers(client, (f for fences in commits.values() for f in fences))
    faults = []
    for sha, fences in commits.items():
        for fence in fences:
            answer = answers[fence]
            sentence = (
                f"commit {sha[:12]} carries {answer.fence} but has no receipt of its push: "
                f"{NO_RECEIPT}"
                if answer.current
                else say_stale(sha, answer)
            )
            faults.append((sha, sentence, answer.raw))
    paths = {sha: commit_paths(sha, cwd) for sha in commits}
    unique = list(dict.fromkeys(p for ps in paths.values() for p in ps))
    held: dict[str, PathAnswer] = {}
    for start in range(0, len(unique), PATHS_PER_CALL):
        for answer in client.paths_verify(unique[start : start + PATHS_PER_CALL]):
            if answer.held:
                held[answer.path] = answer
    for sha, touched in paths.items():
        for path in (p for p in touched if p in held):
            t = held[path].held[0]
            sentence = (
                f"commit {sha[:12]} touches {path}, under {t.resource} held by "
                f"{hand_called(t.holder, quote=QUOTE)} (fence {t.fence}, {t.state}), and has no "
                "receipt of its push: "
                f"{NO_RECEIPT}"
            )
            faults.append((sha, sentence, held[path].raw))
    return faults


def verify(
    client: Client,
    *,
    commit: str | None,
    range_: str | None,
    remote: str = "origin",
    cwd: str | None = None,
) -> tuple[dict[str, Any], str, int]:
    """`gctl verify`: (the result's JSON, its text, the exit code). Each commit is judged by
    the receipt of its push, or, without one, as it stands now."""
    revisions = [range_] if range_ else ["--no-walk", commit or "HEAD"]
    commits = fences_of(revisions, cwd)
    repository = remote_repository(remote, cwd)
    receipts = _receipts_of(client, repository, list(commits))
    stale: list[dict[str, Any]] = []
    fences: set[str] = set()
    for sha, receipt in receipts.items():
        for sentence in _judged_by_receipt(sha, receipt):
            stale.append({"commit": sha, "message": sentence, "receipt": receipt.raw})
        fences.update(f.fence for f in receipt.fences)
    without = {sha: fs for sha, fs in commits.items() if sha not in receipts}
    for sha, sentence, answer in _judged_now(client, without, cwd) if without else []:
        stale.append({"commit": sha, "message": sentence, "answer": answer})
    fences.update(fence_of(f) for fs in without.values() for f in fs)
    data = {
        "repository": repository,
        "commits": len(commits),
        "receipts": len(receipts),
        "fences": sorted(fences),
        "stale": stale,
    }
    if stale:
        return data, "\n".join(item["message"] for item in stale), EXIT_STALE
    shown = sorted(fences)
    text = (
        f"{len(shown)} fence{'s' if len(shown) != 1 else ''} current in {len(commits)} "
        f"commit{'s' if len(commits) != 1 else ''} ({len(receipts)} judged when pushed)"
        + (f": {', '.join(shown)}" if shown else "")
    )
    return data, text, 0
