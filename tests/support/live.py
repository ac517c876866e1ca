"""A live server for agents' processes: the real API on pytest-django's live server, one key per
hand, and `gctl` run as a subprocess that knows only GC_URL and GC_KEY (and what a test adds)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleet.models import Run
from hands import services as hand_services
from hands.models import Hand

GCTL = str(Path(sys.executable).parent / "gctl")
PR_URL = "https://github.com/acme/app/pull/7"
# Short enough that a whole tenure, its loss and its reclaim take seconds.
INTERVAL_S = 1
GRACE_S = 1
# A run whose claims nothing heartbeats (`gctl claim`, then other gctl calls, each a process of
# its own): its window must outlast those calls on a slow machine.
ONE_SHOT = {"heartbeat_interval_s": 30, "grace_s": 30}


def mint(hand: Hand, scopes: Sequence[str] = ("work", "leases")) -> str:
    return hand_services.key_issue(hand=hand, scopes=list(scopes), actor="test").plaintext


@dataclass
class Fleet:
    url: str
    key_a: str
    key_b: str
    make_run: Callable[..., Run]

    def env(self, key: str | None = None, **extra: str) -> dict[str, str]:
        """A subprocess's environment: GC_URL and GC_KEY and nothing of ours (no GC_* leaks)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GC_")}
        env.update(GC_URL=self.url, GC_KEY=key or self.key_a)
        env.update(extra)
        return env

    def run(self, **kwargs: Any) -> Run:
        options: dict[str, Any] = {
            "slots": 1,
            "heartbeat_interval_s": INTERVAL_S,
            "grace_s": GRACE_S,
            "evidence_required": ["pull_request"],
            "brief": "Fix the login redirect.",
        }
        options.update(kwargs)
        return self.make_run(**options)

    def gctl(
        self, *args: str, key: str | None = None, timeout: float = 60, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [GCTL, *args],
            env=self.env(key, **extra),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture
def gc(live_server: Any, make_run: Callable[..., Run], owner: Hand, teammate: Hand) -> Fleet:
    return Fleet(url=live_server.url, key_a=mint(owner), key_b=mint(teammate), make_run=make_run)


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, step: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"not within {timeout} s: {condition}")
