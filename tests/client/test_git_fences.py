"""`gctl git install`'s hooks and `gctl verify` in real repositories against the live server
(issue 21, item 3): hand A commits under its lease (a trailer), hand B without one is refused;
A is paused past its grace (a supervisor breaks its lease), B takes the lease, and then A's
commit and push are refused while B's pass; CI's `gctl verify` tells them apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hands import services as hand_services
from hands.models import Hand
from leases import services as lease_services
from tests.client.conftest import GCTL, Fleet

pytestmark = pytest.mark.django_db(transaction=True)


class Repo:
    def __init__(self, gc: Fleet, path: Path, key: str, home: Path) -> None:
        self.gc, self.path, self.key, self.home = gc, path, key, home

    def env(self) -> dict[str, str]:
        return self.gc.env(self.key, GIT_CONFIG_NOSYSTEM="1", HOME=str(self.home))

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def commit(self, path: str, text: str = "x\n") -> subprocess.CompletedProcess[str]:
        target = self.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.git("add", path)
        return self.git("commit", "-q", "-m", f"edit {path}", check=False)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def trailers(self, rev: str = "HEAD") -> list[str]:
        out = self.git("log", "-1", "--format=%(trailers:key=Ground-Control-Fence,valueonly)", rev)
        return [line for line in out.stdout.splitlines() if line]

    def gctl(self, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [GCTL, *args],
            cwd=self.path,
            env=self.gc.env(key or self.key, GIT_CONFIG_NOSYSTEM="1", HOME=str(self.home)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done


def clone(gc: Fleet, remote: Path, path: Path, key: str, name: str, home: Path) -> Repo:
    subprocess.run(["git", "clone", "-q", str(remote), str(path)], check=True, capture_output=True)
    repo = Repo(gc, path, key, home)
    repo.git("config", "user.name", name)
    repo.git("config", "user.email", f"{name}@example.com")
    installed = repo.gctl("git", "install")
    assert installed.returncode == 0, installed.stderr
    return repo


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


def test_a_stale_holders_commit_and_push_are_refused_and_the_new_holders_pass(
    gc: Fleet, remote: Path, tmp_path: Path, owner: Hand, teammate: Hand
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    a = clone(gc, remote, tmp_path / "a", gc.key_a, "a", home)
    # A path nobody leases is the repository's own business: no trailer, and it pushes.
    assert a.commit("README.md").returncode == 0
    assert a.trailers() == []
    assert a.git("push", "-q", "origin", "HEAD:main", check=False).returncode == 0
    b = clone(gc, remote, tmp_path / "b", gc.key_b, "b", home)

    # A holds src/auth/ and commits a file under it: the commit carries the lease's fence.
    taken = a.gctl("lease", "acquire", "src/auth/", "--ttl", "120")
    assert taken.returncode == 0, taken.stderr
    done = a.commit("src/auth/login.py")
    assert done.returncode == 0, done.stderr
    # The trailer names the holder, so that no other hand's commit can carry it as its own.
    assert a.trailers() == [f"src/auth/@1 {owner.name}"]
    a_commit = a.head()

    # B holds nothing over src/auth/: refused, with who holds it.
    refused = b.commit("src/auth/session.py")
    assert refused.returncode != 0
    assert "src/auth/session.py is under src/auth/, held by hand" in refused.stderr
    assert "commit refused" in refused.stderr

    # A is paused past its grace: a supervisor breaks its lease, and B takes it.
    lease_services.lease_break(
        workspace_id=owner.workspace_id, resource="src/auth/", actor="boss", reason="paused"
    )
    taken = b.gctl("lease", "acquire", "src/auth/", "--ttl", "120")
    assert taken.returncode == 0, taken.stderr

    # A's next commit under it is refused, and so is the push of its earlier one.
    refused = a.commit("src/auth/login.py", "y\n")
    assert refused.returncode != 0
    assert f"held by hand '{teammate.name}' (fence 3" in refused.stderr
    a.git("reset", "-q", "--hard", a_commit)
    pushed = a.git("push", "origin", "HEAD:main", check=False)
    assert pushed.returncode != 0
    assert f"commit {a_commit[:12]} carries src/auth/@1, which is stale" in pushed.stderr
    assert "the current fence is 3" in pushed.stderr
    assert "push refused" in pushed.stderr

    # B's commit and push pass.
    done = b.commit("src/auth/session.py")
    assert done.returncode == 0, done.stderr
    assert b.trailers() == [f"src/auth/@3 {teammate.name}"]
    b_commit = b.head()
    pushed = b.git("push", "-q", "origin", "HEAD:main", check=False)
    assert pushed.returncode == 0, pushed.stderr

    # CI, with a key that may only verify: A's commit is stale (exit 4), B's current (exit 0).
    ci, _ = hand_services.hand_create(workspace=owner.workspace, name="ci")
    ci_key = hand_services.key_issue(hand=ci, scopes=["verify"], actor="test").plaintext
    stale = a.gctl("verify", "--commit", a_commit, key=ci_key)
    assert stale.returncode == 4, stale.stderr
    assert "src/auth/@1, which is stale: the lease broken" in stale.stderr
    current = b.gctl("verify", "--commit", b_commit, key=ci_key)
    assert current.returncode == 0, current.stderr
    assert "src/auth/@3" in current.stdout
    ranged = b.gctl("verify", "--range", f"{b_commit}~1..{b_commit}", "--json", key=ci_key)
    assert ranged.returncode == 0, ranged.stderr


def test_install_keeps_an_existing_hook_and_runs_it_first(gc: Fleet, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    repo = Repo(gc, root, gc.key_a, home)
    repo.git("config", "user.name", "a")
    repo.git("config", "user.email", "a@example.com")
    old = root / ".git" / "hooks" / "pre-commit"
    old.write_text("#!/bin/sh\necho 'the old hook ran' >&2\nexit 1\n")
    old.chmod(0o755)
    installed = repo.gctl("git", "install", "--repo", str(root))
    assert installed.returncode == 0, installed.stderr
    assert "kept the existing pre-commit hook as pre-commit.chained" in installed.stdout
    assert repo.gctl("git", "install").returncode == 0  # again: nothing chained twice
    refused = repo.commit("f.txt")
    assert refused.returncode != 0 and "the old hook ran" in refused.stderr
    (root / ".git" / "hooks" / "pre-commit.chained").write_text("#!/bin/sh\nexit 0\n")
    assert repo.commit("f.txt").returncode == 0
