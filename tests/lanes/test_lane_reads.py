"""What a lane-limited key reads of another lane, case by case (issue 33, item 6): its hands are
not found, as if they did not exist; a name on the shared tree, a pool's member, a fence, is held
by nobody it may name; a guessed name is never confirmed; its receipts and the attempts its
attestations back are not on record to it; and a refused mint is recorded under whoever was
refused, never under the hand it aimed at. Each failed before: `GET /hands/zzb-hand/keys` was
200 `[]`, a trailer naming lane B's holder read `current`, `?holder=zzb-hand` listed its
leases, and a refused mint on the dashboard was recorded as the target hand's refusal."""

from __future__ import annotations

import pytest

from apikit.errors import ValidationFailed
from hands import services as hand_services
from hands.models import Hand
from leases.models import Refusal
from tests.lanes.conftest import REPOSITORY, SHARED_PR, World
from tests.support.api import error_of

pytestmark = [pytest.mark.django_db, pytest.mark.security]


def test_another_lanes_hand_is_not_found_as_if_it_did_not_exist(world: World) -> None:
    alpha = world.alpha
    for hand in ("zzb-hand", "nobody-at-all"):
        listed = error_of(alpha.get(f"/hands/{hand}/keys"), 404, "not_found")
        minted = error_of(
            alpha.post(f"/hands/{hand}/keys", {"scopes": ["work"], "lane": "alpha"}),
            404,
            "not_found",
        )
        # The same answer as for a name that is nobody's.
        assert listed["message"].replace(hand, "X") == "no hand 'X'"
        assert minted["message"].replace(hand, "X") == "no hand 'X'"
    # Another lane's slug is not found either, when a key or a hand would be put in it.
    error_of(
        alpha.post("/hands/alpha-lead/keys", {"scopes": ["work"], "lane": "zzb-lane"}),
        404,
        "not_found",
    )
    error_of(alpha.post("/hands", {"name": "new", "lane": "zzb-lane"}), 404, "not_found")
    # The workspace's supervisor lists them as ever.
    assert world.boss.get("/hands/zzb-hand/keys").status_code == 200


def test_a_refused_mint_is_recorded_under_the_caller(world: World) -> None:
    refused = world.alpha.post("/hands/zzb-hand/keys", {"scopes": ["work"], "lane": "alpha"})
    error_of(refused, 404, "not_found")
    row = Refusal.objects.get(request_id=refused["X-Request-ID"])
    assert (row.hand, row.key_prefix) == ("alpha-lead", world.alpha.key.split("_")[1])
    # A person on the dashboard (no key: no hand called) is not the hand the key was for.
    target = Hand.objects.get(name="zzb-hand")
    with pytest.raises(ValidationFailed):
        hand_services.key_issue(hand=target, scopes=["nope"], actor="admin")
    row = Refusal.objects.filter(code="validation_error").latest("id")
    assert (row.hand, row.workspace_id) == ("", target.workspace_id)


def test_a_trailer_naming_another_lanes_holder_cannot_confirm_it(world: World) -> None:
    fence = world.fences["src/shared.py"]

    def verify(api, trailer: str) -> dict:  # noqa: ANN001
        answer = api.post("/fences/verify", {"fences": [trailer]})
        assert answer.status_code == 200, answer.content
        return answer.json()["fences"][0]

    for guess in ("zzb-hand", "alpha-lead", "zzb-wrong"):
        said = verify(world.alpha, f"src/shared.py@{fence} {guess}")
        # Right guess or wrong, the same answer: not a tenure this key can vouch for.
        assert (said["status"], said["holder"]) == ("not_holder", None)
    plain = verify(world.alpha, f"src/shared.py@{fence}")
    assert (plain["status"], plain["holder"]) == ("current", None)
    own = verify(world.alpha, f"src/alpha.py@{world.fences['src/alpha.py']} alpha-lead")
    assert (own["status"], own["holder"]) == ("current", "alpha-lead")
    boss = verify(world.boss, f"src/shared.py@{fence} zzb-hand")
    assert (boss["status"], boss["holder"]) == ("current", "zzb-hand")


def test_a_denial_says_a_name_is_held_but_not_by_whom(world: World) -> None:
    body = {"resource": "src/shared.py", "ttl_s": 60, "process_id": "p"}
    error = error_of(world.alpha.post("/leases/acquire", body), 409, "lease_held")
    assert "held by a hand of another lane (fence" in error["message"]
    assert "holder" not in error and "process_id" not in error
    assert (error["fence"], error["state"]) == (world.fences["src/shared.py"], "live")
    assert error["ahead"] == [None]
    full = error_of(
        world.alpha.post("/pools/ports/acquire", {"process_id": "p", "ttl_s": 60}),
        409,
        "lease_held",
    )
    assert full["message"].count("by a hand of another lane") == 2
    assert [m["holder"] for m in full["members"]] == [None, None]
    boss = error_of(world.boss.post("/leases/acquire", body), 409, "lease_held")
    assert boss["holder"] == "zzb-hand" and "hand 'zzb-hand'" in boss["message"]


def test_filtering_by_another_lanes_hand_finds_nothing(world: World) -> None:
    """A filter would confirm a guessed name, even with the name itself read null: the roamer
    (lane B) works in lane alpha's run, which lane alpha reads, unnamed."""
    alpha, boss = world.alpha, world.boss
    assert alpha.get("/leases", {"holder": "zzb-hand"}).json() == []
    assert alpha.get("/leases", {"holder": "alpha-lead"}).json()[0]["holder"] == "alpha-lead"
    theirs = boss.get("/leases", {"holder": "zzb-hand"}).json()
    assert {lease["resource"] for lease in theirs} == {"src/shared.py", "pool/ports/8001"}
    assert alpha.get("/attempts", {"hand": "zzb-roamer"}).json() == []
    assert alpha.get("/events", {"hand": "zzb-roamer"}).json() == []
    roaming = boss.get("/attempts", {"hand": "zzb-roamer"}).json()
    assert [a["id"] for a in roaming] == [world.attempts["roamer"]["id"]]
    assert boss.get("/events", {"hand": "zzb-roamer"}).json()
    # Unfiltered, lane alpha reads the roamer's attempt in its run, with nobody named.
    (seen,) = [a for a in alpha.get("/attempts").json() if a["id"] == roaming[0]["id"]]
    assert (seen["hand"], seen["process_id"], seen["lease"]["holder"]) == (None, None, None)


def test_an_attestation_backs_no_attempt_of_another_lane_to_the_reader(world: World) -> None:
    (seen,) = world.alpha.get("/attestations", {"url": SHARED_PR}).json()
    # The workspace's CI attested it (a hand of no lane: named); the attempt it backs is lane
    # B's, which lane alpha's key does not find.
    assert (seen["hand"], seen["lane"], seen["backs"]) == ("ci", None, None)
    (full,) = world.boss.get("/attestations", {"url": SHARED_PR}).json()
    assert full["backs"] == world.attempts["beta-done"]["id"]
    # Lane B's own attestations are not on record to it at all.
    assert (
        world.alpha.get("/attestations", {"url": "https://github.com/acme/zzb/pull/2"}).json() == []
    )


def test_a_handoff_names_no_hand_of_another_lane_in_its_fields_or_its_sentence(
    world: World,
) -> None:
    asked = world.alpha.post("/leases/handoff", {"resource": "src/shared.py", "reason": "mine"})
    assert asked.status_code == 200, asked.content  # asked already, when the world was made
    handoff = asked.json()
    assert handoff["holder"] is None and handoff["from"] == "alpha-lead"
    declined = world.beta.post(f"/leases/handoff/{handoff['id']}/decline", {"reason": "busy"})
    assert declined.status_code == 200, declined.content
    said = world.alpha.get(f"/leases/handoff/{handoff['id']}").json()
    assert said["status"] == "declined" and said["holder"] is None
    assert said["message"] == (
        "alpha-lead asked a hand of another lane for `src/shared.py`: declined; a hand of "
        "another lane declined: busy"
    )
    # To lane B's key, it is lane alpha's asker that is a hand of another lane.
    theirs = world.beta.get(f"/leases/handoff/{handoff['id']}").json()
    assert theirs["from"] is None and theirs["holder"] == "zzb-hand"


def test_a_receipt_naming_a_hand_of_another_lane_is_not_on_record_to_the_lane(
    world: World,
) -> None:
    query = {"repository": REPOSITORY, "sha": [world.shas["beta"], world.shas["alpha"]]}
    (own,) = world.alpha.get("/fences/receipts", query).json()["receipts"]
    assert own["sha"] == world.shas["alpha"] and not own["accepted"]
    (refusal,) = own["refusals"]
    # Recorded unnamed, as the push was told ('' in a receipt: no holder).
    assert refusal["kind"] == "held" and refusal["holder"] == ""
    assert "held by a hand of another lane" in refusal["message"]
    assert own["signature_valid"]
    every = world.boss.get("/fences/receipts", query).json()["receipts"]
    assert {r["sha"] for r in every} == set(world.shas.values())
