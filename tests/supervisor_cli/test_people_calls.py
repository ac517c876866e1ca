"""A supervisor's calls about hands and keys through `Client` and `AsyncClient` against the live
server: hands created, listed, shown and given capabilities; keys minted with scopes, a lane
and an expiry (the key in the minting answer only), listed without secrets, and revoked with
immediate effect; the refusals each call can meet."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from groundcontrol_client import KeyRevoked, NotFound, ScopeDenied, ValidationFailed
from groundcontrol_client.core.people import HandRecord, IssuedKey, KeyRecord, key_prefix

from hands import services as hand_services
from hands.models import Hand, HandKey, Lane, Workspace
from leases.models import Event, Lease, LeaseStatus
from tests.supervisor_cli.shells import Shell
from tests.support.live import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

# A supervisor's key: it mints and revokes keys of any hand (supervise) within its own scopes.
BOSS_SCOPES = ["hands", "supervise", "plan", "work", "leases"]


@pytest.fixture
def boss(shell: Callable[[str], Shell], owner: Hand) -> Shell:
    return shell(mint(owner, BOSS_SCOPES))


def test_it_creates_shows_and_lists_hands(boss: Shell, lane: Lane) -> None:
    made = boss.hand_create("builder", lane="rewalk", capabilities=["Python", "gpu"])
    assert isinstance(made, HandRecord)
    assert (made.name, made.lane, made.capabilities) == ("builder", "rewalk", ["python", "gpu"])
    assert Hand.objects.get(name="builder").lane_id == lane.pk

    again = boss.hand_create("builder", capabilities=["rust"])  # exists: answered as it is
    assert (again.id, again.capabilities) == (made.id, ["python", "gpu"])

    assert boss.hand("builder") == made
    assert "builder" in [hand.name for hand in boss.hands()]


def test_it_replaces_a_hands_capabilities(boss: Shell, teammate: Hand) -> None:
    changed = boss.hand_set_capabilities("hand-b", [" GPU ", "python", "gpu"])
    assert changed.capabilities == ["gpu", "python"]
    teammate.refresh_from_db()
    assert teammate.capabilities == ["gpu", "python"]


def test_it_mints_a_key_with_scopes_lane_and_expiry_shown_once(
    boss: Shell, gc: Fleet, teammate: Hand, lane: Lane
) -> None:
    issued = boss.key_mint("hand-b", scopes=["work", "leases"], lane="rewalk", expires_in_s=86_400)
    assert isinstance(issued, IssuedKey)
    assert issued.key is not None and issued.key.startswith(f"gc_{issued.prefix}_")
    record = HandKey.objects.get(prefix=issued.prefix)
    assert (record.hand_id, record.scopes, record.lane_id) == (
        teammate.pk,
        ["work", "leases"],
        lane.pk,
    )
    # A day from the minting statement's now (the row's created_at is its transaction's).
    assert abs(record.expires_at - record.created_at - timedelta(days=1)) < timedelta(seconds=1)
    # Nothing the server stores or lists holds the secret.
    # What follows `gc_<prefix>_` (the secret is URL-safe base64: it may hold `_` itself).
    secret = issued.key.removeprefix(f"gc_{issued.prefix}_")
    assert len(secret) >= 32
    assert secret not in str(list(HandKey.objects.filter(pk=record.pk).values()))
    listed = boss.keys("hand-b")  # newest first; hand b had one key already
    assert [key.prefix for key in listed] == [issued.prefix, key_prefix(gc.key_b)]
    assert all(isinstance(key, KeyRecord) and "key" not in key.raw for key in listed)
    # The key works, as the hand's, limited to its lane.
    me = boss.with_key(issued.key).me()
    assert (me.hand, me.lane, me.scopes) == ("hand-b", "rewalk", ["work", "leases"])


def test_a_retried_mint_makes_one_key_and_never_says_the_secret_twice(
    boss: Shell, teammate: Hand
) -> None:
    before = HandKey.objects.filter(hand=teammate).count()
    first = boss.key_mint("hand-b", scopes=["work"], idempotency_key="mint-b-1")
    replay = boss.key_mint("hand-b", scopes=["work"], idempotency_key="mint-b-1")
    assert replay.prefix == first.prefix
    assert (first.key is not None, replay.key) == (True, None)
    assert HandKey.objects.filter(hand=teammate).count() == before + 1


def test_a_revoked_key_is_refused_on_its_next_call_and_its_tenures_end(
    boss: Shell, gc: Fleet, teammate: Hand
) -> None:
    issued = boss.key_mint("hand-b", scopes=["work", "leases"])
    assert issued.key is not None
    hand_b = boss.with_key(issued.key)
    hand_b.lease_acquire("src/auth/", ttl_s=60, process_id="host-b:1")

    revoked = boss.key_revoke(f"gc_{issued.prefix}", reason="rotated")  # the gc_ form names it
    assert (revoked.prefix, revoked.revoke_reason) == (issued.prefix, "rotated")
    assert revoked.revoked_at is not None
    with pytest.raises(KeyRevoked):
        hand_b.me()
    assert Lease.objects.get(resource="src/auth/").status == LeaseStatus.FREE
    assert Event.objects.filter(kind="key_revoked", data__prefix=issued.prefix).count() == 1
    # Safe to repeat: the key stays as it was revoked.
    assert boss.key_revoke(issued.key, reason="again").revoke_reason == "rotated"


def test_a_work_key_may_not_read_hands_or_mint(worker: Shell) -> None:
    # Hand a's work and leases key.
    with pytest.raises(ScopeDenied):
        worker.hands()
    with pytest.raises(ScopeDenied):
        worker.key_mint("hand-a", scopes=["work"])


def test_a_key_cannot_mint_a_key_above_itself(shell: Callable[[str], Shell], owner: Hand) -> None:
    lesser = shell(mint(owner, ["hands", "supervise"]))
    with pytest.raises(ScopeDenied) as refused:
        lesser.key_mint("hand-a", scopes=["plan"])
    assert refused.value.get("required_scope") == "plan"
    assert not HandKey.objects.filter(scopes=["plan"]).exists()


def test_unknown_hands_and_keys_are_not_found_and_bad_input_is_named(boss: Shell) -> None:
    with pytest.raises(NotFound):
        boss.hand("nobody")
    with pytest.raises(NotFound):
        boss.keys("nobody")
    with pytest.raises(NotFound):
        boss.key_revoke("0123456789ab")
    with pytest.raises(ValidationFailed) as refused:
        boss.key_mint("hand-a", scopes=["root"])
    assert "scopes" in refused.value.get("fields")
    with pytest.raises(ValidationFailed) as refused:
        boss.hand_set_capabilities("hand-a", ["no spaces"])
    assert "capabilities" in refused.value.get("fields")


def test_a_lane_limited_key_sees_and_mints_in_its_lane_only(
    shell: Callable[[str], Shell], workspace: Workspace, lane: Lane, docs: Lane
) -> None:
    hand_services.hand_create(workspace=workspace, name="walker", lane=lane)
    hand_services.hand_create(workspace=workspace, name="writer", lane=docs)
    chief = hand_services.hand_create(workspace=workspace, name="chief", lane=lane)[0]
    limited = hand_services.key_issue(
        hand=chief, scopes=["hands", "supervise", "work"], actor="test", lane=lane
    ).plaintext
    rewalk_boss = shell(limited)

    assert {hand.name for hand in rewalk_boss.hands()} == {"walker", "chief"}
    with pytest.raises(NotFound):
        rewalk_boss.hand("writer")
    with pytest.raises(NotFound):
        rewalk_boss.key_mint("writer", scopes=["work"], lane="docs")
    with pytest.raises(ScopeDenied):  # a lane-limited key mints keys of its own lane only
        rewalk_boss.key_mint("walker", scopes=["work"])
    issued = rewalk_boss.key_mint("walker", scopes=["work"], lane="rewalk")
    assert HandKey.objects.get(prefix=issued.prefix).lane_id == lane.pk


def test_key_prefix_reads_every_form_a_supervisor_pastes() -> None:
    assert key_prefix("8c831684515c") == "8c831684515c"
    assert key_prefix("gc_8c831684515c") == "8c831684515c"
    assert key_prefix(" gc_8c831684515c_s3cr3t ") == "8c831684515c"
