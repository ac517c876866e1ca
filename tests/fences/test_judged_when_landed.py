"""Fences judged when the work lands (issue 32, item 4), in real repositories with a bare remote,
each hand committing and pushing through `gctl git install`'s hooks against the live server.

Hand A takes the lease on `src/app.py`, commits under it, and is paused past its lease; hand B
takes over, commits, pushes and releases. A comes back: its next commit is refused at
pre-commit and its push by pre-push; B's commit passes CI's `gctl verify` although B released
(asked now, its fence would read superseded: the receipt its push left says it was current).
A trailer that names B's fence cannot carry A's commit; a re-push changes nothing; a commit
without a trailer under a path B holds is refused by pre-push and by verify."""

from __future__ import annotations

from pathlib import Path

import pytest

from hands.models import Hand
from leases import clock
from leases.models import FenceReceipt
from tests.fences.conftest import Repo
from tests.support.live import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

TTL_S = 30


@pytest.fixture
def a(gc: Fleet, clone) -> Repo:  # noqa: ANN001
    repo = clone("a", gc.key_a)
    # A path nobody leases is the repository's own business: no trailer, and it pushes.
    assert repo.commit("README.md").returncode == 0
    assert repo.trailers() == []
    assert repo.push("main").returncode == 0
    return repo


@pytest.fixture
def b(gc: Fleet, clone, a: Repo) -> Repo:  # noqa: ANN001
    return clone("b", gc.key_b)


def test_a_stale_session_is_refused_at_commit_and_push_and_the_new_holder_passes_ci_after_release(
    a: Repo, b: Repo, owner: Hand, teammate: Hand, ci_key: str
) -> None:
    fence_a = a.acquire("src/app.py", TTL_S)
    done = a.commit("src/app.py", "a\n")
    assert done.returncode == 0, done.stderr
    assert a.trailers() == [f"src/app.py@{fence_a} {owner.name}"]
    a_commit = a.head()

    # A is paused past its lease; B takes over, commits, pushes and releases.
    with clock.travel(TTL_S + 1):
        fence_b = b.acquire("src/app.py", TTL_S)
        assert fence_b == fence_a + 1
        done = b.commit("src/app.py", "b\n")
        assert done.returncode == 0, done.stderr
        assert b.trailers() == [f"src/app.py@{fence_b} {teammate.name}"]
        b_commit = b.head()
        pushed = b.push("main")
        assert pushed.returncode == 0, pushed.stderr
        b.release("src/app.py", fence_b)

        # A resumes. Nobody holds src/app.py now, but A's own lease on it was lost: its next
        # commit under it is refused...
        refused = a.commit("src/app.py", "a again\n")
        assert refused.returncode != 0
        assert (
            f"src/app.py is under src/app.py, whose lease this hand ('{owner.name}') held at "
            f"fence {fence_a} and lost" in refused.stderr
        )
        assert "commit refused" in refused.stderr
        a.git("reset", "-q", "--hard", a_commit)

        # ...and so is the push of the commit it made under that lease.
        pushed = a.push("a-work")
        assert pushed.returncode != 0
        assert (
            f"commit {a_commit[:12]} carries src/app.py@{fence_a}, which is stale: the lease "
            "lost at" in pushed.stderr
        )
        assert f"the current fence is {fence_b}" in pushed.stderr
        assert f"whose lease hand '{owner.name}' held at fence {fence_a} and lost" in (
            pushed.stderr
        )
        assert "push refused" in pushed.stderr

        # A commit that skipped the commit hooks (no trailer) is refused at push all the same.
        sneaked = a.commit("src/app.py", "a sneaked\n", "--no-verify")
        assert sneaked.returncode == 0, sneaked.stderr
        assert a.trailers() == []
        sneaked_commit = a.head()
        pushed = a.push("a-work")
        assert pushed.returncode != 0
        assert f"commit {sneaked_commit[:12]} touches src/app.py" in pushed.stderr

        # CI, with a key that may only verify, after B released: B's commit passes by the
        # receipt of its push; A's are stale by theirs.
        current = b.gctl("verify", "--commit", b_commit, key=ci_key)
        assert current.returncode == 0, current.stderr
        assert f"src/app.py@{fence_b}" in current.stdout
        assert "1 judged when pushed" in current.stdout
        stale = a.gctl("verify", "--commit", a_commit, key=ci_key)
        assert stale.returncode == 4, stale.stderr
        assert f"src/app.py@{fence_a}, which is stale: the lease lost" in stale.stderr
        assert "as its push receipt of" in stale.stderr
        stale = a.gctl("verify", "--commit", sneaked_commit, key=ci_key)
        assert stale.returncode == 4, stale.stderr

    receipts = {r.sha: r for r in FenceReceipt.objects.all()}
    assert receipts[b_commit].accepted and receipts[b_commit].hand == teammate.name
    assert receipts[b_commit].process_id == "session-b"
    assert receipts[b_commit].fences[0]["process_id"] == "session-b"
    assert not receipts[a_commit].accepted


def test_a_trailer_naming_another_hands_fence_cannot_carry_a_commit(
    a: Repo, b: Repo, teammate: Hand, ci_key: str
) -> None:
    fence_b = b.acquire("src/app.py", TTL_S)
    forged = f"Ground-Control-Fence: src/app.py@{fence_b} {teammate.name}"
    # A skips its hooks (pre-commit would refuse a path B holds) and writes B's trailer itself,
    # on a file B's lease does not even cover.
    done = a.commit("docs/notes.md", "a\n", "--no-verify", message=f"notes\n\n{forged}")
    assert done.returncode == 0, done.stderr
    assert a.trailers() == [f"src/app.py@{fence_b} {teammate.name}"]
    forged_commit = a.head()
    pushed = a.push("a-work")
    assert pushed.returncode != 0
    assert (
        f"commit {forged_commit[:12]} carries src/app.py@{fence_b}, the tenure of hand "
        f"'{teammate.name}', but hand 'hand-a' pushed it" in pushed.stderr
    )
    assert "push refused" in pushed.stderr
    stale = a.gctl("verify", "--commit", forged_commit, key=ci_key)
    assert stale.returncode == 4, stale.stderr
    assert "the tenure of hand 'hand-b', but hand 'hand-a' pushed it" in stale.stderr

    # Pushed past the hook, it has no receipt: CI refuses a trailer that nothing vouches for.
    assert a.push("a-sneaked", "--no-verify").returncode == 0
    again = a.commit("docs/notes.md", "a2\n", "--no-verify", message=f"notes 2\n\n{forged}")
    assert again.returncode == 0
    assert a.push("a-sneaked", "--no-verify").returncode == 0
    stale = a.gctl("verify", "--commit", a.head(), key=ci_key)
    assert stale.returncode == 4, stale.stderr
    assert "but has no receipt of its push" in stale.stderr


def test_a_re_push_leaves_the_first_receipt_as_it_was(a: Repo, b: Repo, ci_key: str) -> None:
    fence_b = b.acquire("src/app.py", TTL_S)
    assert b.commit("src/app.py", "b\n").returncode == 0
    b_commit = b.head()
    assert b.push("main").returncode == 0
    first = FenceReceipt.objects.get(sha=b_commit)
    b.release("src/app.py", fence_b)

    # The hook asked again for the same commit (a push of it to another branch): accepted by
    # the receipt on record, though B no longer holds the lease.
    parent = b.git("rev-parse", f"{b_commit}~1").stdout.strip()
    line = f"refs/heads/copy {b_commit} refs/heads/copy {parent}\n"
    url = b.git("remote", "get-url", "origin").stdout.strip()
    again = b.gctl("git", "pre-push", "origin", url, stdin=line)
    assert again.returncode == 0, again.stderr
    assert b.gctl("git", "pre-push", "origin", url, stdin=line).returncode == 0
    [row] = FenceReceipt.objects.filter(sha=b_commit)
    assert (row.at, row.signature, row.accepted) == (first.at, first.signature, True)
    assert b.gctl("verify", "--commit", b_commit, key=ci_key).returncode == 0


def test_a_commit_without_a_trailer_under_a_path_another_hand_holds_is_refused(
    a: Repo, b: Repo, ci_key: str
) -> None:
    fence_b = b.acquire("src/", TTL_S)
    done = a.commit("src/app.py", "a\n", "--no-verify")
    assert done.returncode == 0
    unfenced = a.head()
    pushed = a.push("a-work")
    assert pushed.returncode != 0
    assert (
        f"commit {unfenced[:12]} touches src/app.py, under src/ held by hand 'hand-b' (fence "
        f"{fence_b}, live), and hand 'hand-a' holds no lease covering it" in pushed.stderr
    )
    # Refused when pushed, stale in CI, even after B released.
    b.release("src/", fence_b)
    stale = a.gctl("verify", "--commit", unfenced, key=ci_key)
    assert stale.returncode == 4, stale.stderr
    assert "touches src/app.py, under src/ held by hand 'hand-b'" in stale.stderr

    # One pushed past the hook has no receipt: CI refuses it while the path is leased.
    b.acquire("src/", TTL_S)
    assert a.commit("src/other.py", "a\n", "--no-verify").returncode == 0
    assert a.push("a-sneaked", "--no-verify").returncode == 0
    stale = a.gctl("verify", "--commit", a.head(), key=ci_key)
    assert stale.returncode == 4, stale.stderr
    assert "touches src/other.py, under src/ held by hand 'hand-b'" in stale.stderr
    assert "has no receipt of its push" in stale.stderr
    # A range mixes them: each commit judged its own way.
    ranged = a.gctl("verify", "--range", f"{unfenced}~1..HEAD", "--json", key=ci_key)
    assert ranged.returncode == 4, ranged.stderr


def test_a_hands_own_commits_push_and_verify_from_another_clone_form(
    a: Repo, remote: Path, ci_key: str
) -> None:
    """The receipts are keyed by the remote's URL as normalised: a `file://` URL and the plain
    path name one repository."""
    fence = a.acquire("src/app.py", TTL_S)
    assert a.commit("src/app.py", "a\n").returncode == 0
    assert a.push("main").returncode == 0
    a.git("remote", "set-url", "origin", f"file://{remote}/")
    verified = a.gctl("verify", "--commit", "HEAD", key=ci_key)
    assert verified.returncode == 0, verified.stderr
    assert f"src/app.py@{fence}" in verified.stdout
