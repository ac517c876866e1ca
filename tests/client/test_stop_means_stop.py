"""Stop means stop (issue 21, item 6): when the key is revoked, every runtime ends what it runs
within one heartbeat interval (TERM, then KILL) and says why. Real processes, the live server."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from hands import services as hand_services
from hands.models import HandKey
from tests.client.conftest import GCTL, Fleet, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_LOST = 4


def revoke(key: str) -> None:
    prefix = key.split("_", 2)[1]
    record = HandKey.objects.get(prefix=prefix)
    hand_services.key_revoke(
        workspace_id=record.hand.workspace_id, prefix=prefix, actor="boss", reason="done with it"
    )


def test_hold_ends_its_command_within_a_heartbeat_once_its_key_is_revoked(
    gc: Fleet, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    # A command that ignores TERM: the wrapper must KILL it after --kill-after.
    script = f"trap '' TERM; touch {seen}; while true; do sleep 0.2; done"
    wrapper = subprocess.Popen(
        [GCTL, "hold", "suite", "--ttl", "3", "--kill-after", "1", "--", "sh", "-c", script],
        env=gc.env(gc.key_a),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(seen.exists)
    revoke(gc.key_a)
    started = time.monotonic()
    code = wrapper.wait(20)
    elapsed = time.monotonic() - started
    _, err = wrapper.communicate()
    # A renewal every third of the 3 s ttl meets the revocation, then TERM, then KILL 1 s later.
    assert elapsed < 3 + 1 + 1.5, elapsed
    # Lost (exit 4), and it says why: the key was revoked.
    assert code == EXIT_LOST, (code, err)
    assert "was revoked" in err and "the command was stopped" in err
