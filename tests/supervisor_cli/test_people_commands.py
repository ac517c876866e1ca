"""gctl's commands for hands and keys against the live server: `gctl hands list|create|show|
capabilities` and `gctl keys list|mint|revoke`, as sentences and as the server's JSON, and the
exit code of each refusal (docs/agents.md, "Exit codes")."""

from __future__ import annotations

import json
import re

import pytest

from hands import services as hand_services
from hands.models import Hand, HandKey, Lane, Workspace
from tests.support.live import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_AUTH = 0, 1, 2, 5


@pytest.fixture
def boss_key(owner: Hand) -> str:
    return mint(owner, ["hands", "supervise", "work", "leases"])


def test_gctl_creates_shows_and_lists_hands_in_sentences(
    gc: Fleet, boss_key: str, lane: Lane
) -> None:
    made = gc.gctl(
        "hands", "create", "builder", "--lane", "rewalk", "--capability", "python", key=boss_key
    )
    assert made.returncode == EXIT_OK, made.stderr
    assert made.stdout.strip() == (
        "hand 'builder' (lane rewalk; capabilities python); "
        "mint its key: gctl keys mint builder --scope work"
    )
    shown = gc.gctl("hands", "show", "builder", key=boss_key)
    assert shown.stdout.strip() == "hand 'builder' (lane rewalk; capabilities python)"
    listed = gc.gctl("hands", "list", key=boss_key)
    assert "hand 'builder' (lane rewalk; capabilities python)" in listed.stdout.splitlines()
    assert "hand 'hand-a' (any lane; no capabilities)" in listed.stdout.splitlines()

    changed = gc.gctl("hands", "capabilities", "builder", "GPU", "python", key=boss_key)
    assert changed.stdout.strip() == (
        "hand 'builder' (lane rewalk; capabilities gpu, python): its next claim is judged by these"
    )
    assert Hand.objects.get(name="builder").capabilities == ["gpu", "python"]


def test_gctl_json_prints_the_servers_hands(gc: Fleet, boss_key: str) -> None:
    made = gc.gctl("--json", "hands", "create", "builder", key=boss_key)
    body = json.loads(made.stdout)
    assert (body["name"], body["lane"], body["capabilities"]) == ("builder", None, [])
    listed = json.loads(gc.gctl("hands", "list", "--json", key=boss_key).stdout)
    assert {hand["name"] for hand in listed} == {"hand-a", "hand-b", "builder"}


def test_gctl_mints_a_key_once_and_the_key_works(gc: Fleet, boss_key: str, lane: Lane) -> None:
    hand_services.hand_create(workspace=lane.workspace, name="builder", lane=lane)
    minted = gc.gctl(
        "keys",
        "mint",
        "builder",
        "--scope",
        "work",
        "--scope",
        "leases",
        "--lane",
        "rewalk",
        "--expires-in",
        "7d",
        key=boss_key,
    )
    assert minted.returncode == EXIT_OK, minted.stderr
    record = HandKey.objects.get(hand__name="builder")
    head, _, key = minted.stdout.strip().partition(" — shown once: ")
    assert head == (
        f"key gc_{record.prefix} of hand 'builder' (work, leases; lane rewalk; expires in 7 days)"
    )
    assert key.startswith(f"gc_{record.prefix}_")

    listed = gc.gctl("keys", "list", "builder", key=boss_key)
    assert listed.stdout.strip() == (
        f"key gc_{record.prefix} of hand 'builder' (work, leases; lane rewalk; expires in 7 "
        "days), never used"
    )
    assert gc.gctl("me", key=key).stdout.startswith("hand builder in workspace acme")
    assert key.split("_", 2)[2] not in listed.stdout


def test_gctl_json_mint_prints_the_answer_with_its_key(gc: Fleet, boss_key: str) -> None:
    minted = gc.gctl(
        "keys", "mint", "hand-a", "--scope", "work", "--expires-in", "3600", "--json", key=boss_key
    )
    body = json.loads(minted.stdout)
    assert body["key"].startswith(f"gc_{body['prefix']}_")
    assert (body["hand"], body["scopes"], body["lane"]) == ("hand-a", ["work"], None)
    record = HandKey.objects.get(prefix=body["prefix"])
    assert abs((record.expires_at - record.created_at).total_seconds() - 3600) < 1


def test_gctl_revokes_a_key_and_its_next_call_is_refused(
    gc: Fleet, boss_key: str, teammate: Hand
) -> None:
    issued = hand_services.key_issue(hand=teammate, scopes=["work"], actor="test")
    revoked = gc.gctl(
        "keys", "revoke", f"gc_{issued.key.prefix}", "--reason", "rotated", key=boss_key
    )
    assert revoked.returncode == EXIT_OK, revoked.stderr
    assert revoked.stdout.strip() == (
        f"revoked key gc_{issued.key.prefix} of hand 'hand-b': its next call is refused, and "
        "its tenures (and those of the keys it minted) end now"
    )
    refused = gc.gctl("me", key=issued.plaintext)
    assert refused.returncode == EXIT_AUTH
    assert "(key_revoked)" in refused.stderr
    listed = gc.gctl("keys", "list", "hand-b", key=boss_key)
    assert re.fullmatch(
        rf"key gc_{issued.key.prefix} of hand 'hand-b' \(work; any lane; no expiry\), "
        r"revoked (now|\d+ s ago): rotated",
        listed.stdout.splitlines()[0],  # newest first
    )


def test_gctl_refusals_exit_with_their_codes(gc: Fleet, owner: Hand, boss_key: str) -> None:
    # A work key lacks the hands scope: auth.
    worker = gc.gctl("hands", "list", key=gc.key_a)
    assert worker.returncode == EXIT_AUTH
    assert "(scope_denied)" in worker.stderr
    # A key above its issuer: the issuer lacks plan.
    above = gc.gctl("keys", "mint", "hand-a", "--scope", "plan", key=boss_key)
    assert above.returncode == EXIT_AUTH
    assert "'plan' scope, which it lacks" in above.stderr
    # Not found and invalid input: errors.
    missing = gc.gctl("hands", "show", "nobody", key=boss_key)
    assert missing.returncode == EXIT_ERROR
    assert "(not_found)" in missing.stderr
    invalid = gc.gctl("keys", "mint", "hand-a", "--scope", "root", key=boss_key)
    assert invalid.returncode == EXIT_ERROR
    assert "(validation_error)" in invalid.stderr
    as_json = gc.gctl("--json", "keys", "mint", "hand-a", "--scope", "root", key=boss_key)
    assert json.loads(as_json.stdout)["error"]["code"] == "validation_error"
    # Usage: an expiry gctl cannot read, a capabilities change that names none.
    unread = gc.gctl("keys", "mint", "hand-a", "--scope", "work", "--expires-in", "soon")
    assert unread.returncode == EXIT_USAGE
    assert "--expires-in must be a length like 7d" in unread.stderr
    assert gc.gctl("hands", "capabilities", "hand-a", key=boss_key).returncode == EXIT_USAGE
    assert not HandKey.objects.filter(scopes__contains=["plan"]).exists()


def test_a_lane_limited_key_lists_its_lanes_hands_only(
    gc: Fleet, workspace: Workspace, lane: Lane
) -> None:
    docs = hand_services.lane_create(workspace=workspace, slug="docs")[0]
    hand_services.hand_create(workspace=workspace, name="writer", lane=docs)
    chief = hand_services.hand_create(workspace=workspace, name="chief", lane=lane)[0]
    limited = hand_services.key_issue(
        hand=chief, scopes=["hands", "supervise"], actor="test", lane=lane
    ).plaintext
    listed = gc.gctl("hands", "list", key=limited)
    assert listed.stdout.strip() == "hand 'chief' (lane rewalk; no capabilities)"
    assert gc.gctl("hands", "show", "writer", key=limited).returncode == EXIT_ERROR
