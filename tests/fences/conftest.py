"""Real repositories with a bare remote, and hands that commit and push through `gctl git
install`'s hooks against the live server (`tests.support.live`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hands import services as hand_services
from hands.models import Hand
from tests.support.live import GCTL, Fleet


class Repo:
    """One hand's clone: git and gctl run in it with only GC_URL and that hand's GC_KEY."""

    def __init__(self, fleet: Fleet, path: Path, key: str, home: Path, process: str) -> None:
        self.gc, self.path, self.key, self.home, self.process = fleet, path, key, home, process

    def env(self, key: str | None = None) -> dict[str, str]:
        return self.gc.env(
            key or self.key,
            GIT_CONFIG_NOSYSTEM="1",
            HOME=str(self.home),
            GC_PROCESS_ID=self.process,
        )

    def git(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def write(self, path: str, text: str) -> None:
        target = self.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.git("add", path)

    def commit(
        self, path: str, text: str = "x\n", *args: str, message: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        self.write(path, text)
        return self.git("commit", "-q", "-m", message or f"edit {path}", *args, check=False)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def trailers(self, rev: str = "HEAD") -> list[str]:
        out = self.git("log", "-1", "--format=%(trailers:key=Ground-Control-Fence,valueonly)", rev)
        return [line for line in out.stdout.splitlines() if line]

    def push(self, ref: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.git("push", "-q", "origin", f"HEAD:refs/heads/{ref}", *args, check=False)

    def gctl(
        self, *args: str, key: str | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [GCTL, *args],
            cwd=self.path,
            env=self.env(key),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def acquire(self, resource: str, ttl_s: int) -> int:
        taken = self.gctl("lease", "acquire", resource, "--ttl", str(ttl_s), "--json")
        assert taken.returncode == 0, taken.stderr
        return int(json.loads(taken.stdout)["fence"])

    def release(self, resource: str, fence: int) -> None:
        released = self.gctl("lease", "release", resource, "--fence", str(fence))
        assert released.returncode == 0, released.stderr


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def clone(gc: Fleet, remote: Path, tmp_path: Path, home: Path):  # noqa: ANN201, F811
    """`clone(name, key)`: a clone of the remote with the hooks installed, as a hand works."""

    def make(name: str, key: str) -> Repo:
        path = tmp_path / name
        subprocess.run(
            ["git", "clone", "-q", str(remote), str(path)], check=True, capture_output=True
        )
        repo = Repo(gc, path, key, home, process=f"session-{name}")
        repo.git("config", "user.name", name)
        repo.git("config", "user.email", f"{name}@example.com")
        installed = repo.gctl("git", "install")
        assert installed.returncode == 0, installed.stderr
        return repo

    return make


@pytest.fixture
def ci_key(owner: Hand) -> str:
    """CI's key: a hand of its own, with only `verify`."""
    ci, _ = hand_services.hand_create(workspace=owner.workspace, name="ci")
    return hand_services.key_issue(hand=ci, scopes=["verify"], actor="test").plaintext
