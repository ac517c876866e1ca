"""gctl against the live server with the tree, shared leases and the queue (issue 20)."""

from __future__ import annotations

import json

import pytest

from hands.models import Hand
from leases import queue
from tests.client.conftest import Fleet

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_DENIED = 3


def test_shared_leases_hold_together_and_an_exclusive_one_below_is_denied(gc: Fleet) -> None:
    reader = gc.gctl("--json", "lease", "acquire", "docs/", "--shared", "--ttl", "30")
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout)["mode"] == "shared"
    other = gc.gctl(
        "--json", "lease", "acquire", "docs/guide.md", "--shared", "--ttl", "30", key=gc.key_b
    )
    assert other.returncode == 0, other.stderr
    denied = gc.gctl("lease", "acquire", "docs/api.md", "--ttl", "30", key=gc.key_b)
    assert denied.returncode == EXIT_DENIED
    assert denied.stderr.startswith("gctl: denied: docs/ is held by hand hand-a (fence 1)")


def test_a_wait_behind_others_says_where_it_stood_in_line(gc: Fleet, owner: Hand) -> None:
    assert gc.gctl("lease", "acquire", "suite", "--ttl", "60").returncode == 0
    queue.join(
        workspace_id=owner.workspace_id,
        resource="suite",
        holder="hand-z",
        process_id="z",
        mode="exclusive",
    )
    denied = gc.gctl("lease", "acquire", "suite", "--ttl", "30", "--wait", "0.3", key=gc.key_b)
    assert denied.returncode == EXIT_DENIED
    assert denied.stderr.startswith(
        "gctl: denied: third in line for `suite` behind hands hand-a and hand-z, about "
    ), denied.stderr


def test_hold_refuses_a_shared_pool_member(gc: Fleet) -> None:
    used = gc.gctl("hold", "--pool", "ports", "--shared", "--", "true")
    assert used.returncode == 2
    assert "--shared does not go with --pool" in used.stderr
