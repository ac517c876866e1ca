"""gctl's commands for pools, the lines of waiters, CI's attestations and an attempt's evidence
against the live server: `gctl pools list|show|create`, `gctl lease queue [RESOURCE]`, `gctl
attestations [URL]` and `gctl evidence ATTEMPT`, as sentences and as the server's JSON,
and the exit code of each refusal (docs/agents.md, "Exit codes")."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from groundcontrol_client import Client

from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import clock, queue
from pools.models import Pool
from tests.support.live import PR_URL, Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_AUTH = 0, 1, 2, 5
# A moment as gctl says it: relative, then absolute.
WHEN = r"(now|[0-9]+ s ago|in [0-9]+ s) \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)"


@pytest.fixture
def boss_key(owner: Hand) -> str:
    return mint(owner, ["plan", "supervise"])


def test_gctl_creates_lists_and_shows_pools_in_sentences(gc: Fleet, boss_key: str) -> None:
    made = gc.gctl("pools", "create", "ports", "--member", "8001", "--member", "8002", key=boss_key)
    assert made.returncode == EXIT_OK, made.stderr
    assert made.stdout.strip() == (
        "pool ports: 2 members, 2 free now (8001, 8002); a hand takes a member with "
        "gctl hold --pool ports -- CMD..."
    )
    Client(gc.url, gc.key_b).lease_from_pool("ports", ttl_s=60, process_id="host:77")

    listed = gc.gctl("pools", "list", key=boss_key)
    assert listed.stdout.strip() == "pool ports: 2 members, 1 free now (8001, 8002)"
    shown = gc.gctl("pools", "show", "ports", key=boss_key)
    assert shown.returncode == EXIT_OK, shown.stderr
    head, first, second = shown.stdout.strip().splitlines()
    assert re.fullmatch(
        rf"pool ports: 2 members, 1 free now \(8001, 8002\); made by hand hand-a {WHEN}", head
    ), head
    assert re.fullmatch(
        r"  8001: held by hand hand-b \(fence 1\), renewing; its current window ends in "
        r"[0-9]+ s \(process host:77\)",
        first,
    ), first
    assert second == "  8002: free (fence 0)"


def test_gctl_json_prints_the_servers_pools(gc: Fleet, boss_key: str) -> None:
    made = json.loads(
        gc.gctl("--json", "pools", "create", "gpus", "--capacity", "2", key=boss_key).stdout
    )
    assert (made["name"], made["size"], [m["member"] for m in made["members"]]) == (
        "gpus",
        2,
        ["1", "2"],
    )
    listed = json.loads(gc.gctl("pools", "list", "--json", key=boss_key).stdout)
    assert [pool["name"] for pool in listed] == ["gpus"]
    shown = json.loads(gc.gctl("pools", "show", "gpus", "--json", key=boss_key).stdout)
    assert shown == {**shown, "name": "gpus", "available": 2}


def test_gctl_pools_refusals_and_their_exit_codes(gc: Fleet, boss_key: str) -> None:
    assert gc.gctl("pools", "list", key=boss_key).stdout.strip() == "no pools"
    missing = gc.gctl("pools", "show", "nowhere", key=boss_key)
    assert missing.returncode == EXIT_ERROR and "(not_found)" in missing.stderr
    both = gc.gctl("pools", "create", "x", "--member", "1", "--capacity", "1", key=boss_key)
    assert both.returncode == EXIT_USAGE
    assert "give the members (--member M, repeatable) or --capacity N" in both.stderr
    neither = gc.gctl("pools", "create", "x", key=boss_key)
    assert neither.returncode == EXIT_USAGE
    # A hand's work and leases key reads pools, never makes one.
    denied = gc.gctl("pools", "create", "ports", "--capacity", "2")
    assert denied.returncode == EXIT_AUTH and "(scope_denied)" in denied.stderr
    assert not Pool.objects.exists()
    gc.gctl("pools", "create", "ports", "--capacity", "2", key=boss_key)
    taken = gc.gctl("--json", "pools", "create", "ports", "--capacity", "3", key=boss_key)
    assert taken.returncode == EXIT_ERROR
    assert json.loads(taken.stdout)["error"]["code"] == "pool_exists"
    assert Pool.objects.get().members == ["1", "2"]


def test_gctl_lease_queue_says_each_waiter(gc: Fleet, boss_key: str, workspace: Workspace) -> None:
    empty = gc.gctl("lease", "queue", key=boss_key)
    assert (empty.returncode, empty.stdout.strip()) == (EXIT_OK, "no request is waiting")
    # A waiter that does not come back counts for WAITER_TTL_S (5 s): three gctl starts on a
    # loaded machine outlast that, so the engine's clock stands still at the wall clock's now
    # (the live server runs in this process; gctl words the times against the wall clock).
    clock.freeze(datetime.now(UTC))
    for holder, process in (("hand-b", "b:1"), ("hand-a", "a:1")):
        queue.join(
            workspace_id=workspace.pk,
            resource="src/auth/",
            holder=holder,
            process_id=process,
            mode="exclusive",
        )
    said = gc.gctl("lease", "queue", "src/", key=boss_key).stdout.strip().splitlines()
    assert len(said) == 2
    assert re.fullmatch(
        rf"src/auth/: hand hand-b is next in line \(exclusive\), queued {WHEN}", said[0]
    ), said
    assert said[1].startswith("src/auth/: hand hand-a is number 2 in line (exclusive), queued ")
    assert gc.gctl("lease", "queue", "docs/", key=boss_key).stdout.strip() == (
        "no request is waiting on docs/'s line"
    )
    listed = json.loads(gc.gctl("--json", "lease", "queue", key=boss_key).stdout)
    assert [(w["holder"], w["position"]) for w in listed] == [("hand-b", 1), ("hand-a", 2)]
    bad = gc.gctl("lease", "queue", "../x", key=boss_key)
    assert bad.returncode == EXIT_ERROR and "(validation_error)" in bad.stderr


def test_gctl_attestations_and_evidence_say_who_saw_what(
    gc: Fleet, boss_key: str, workspace: Workspace
) -> None:
    run = gc.run()
    hand = Client(gc.url, gc.key_b)
    attempt = hand.claim(run.pk, process_id="b:1")
    hand.finish(
        attempt.id,
        fence=attempt.fence,
        process_id="b:1",
        evidence=[{"kind": "pull_request", "url": PR_URL}],
    )
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    ci_key = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test")
    attested = gc.gctl(
        "attest", PR_URL, "--result", "pass", "--kind", "pull_request", key=ci_key.plaintext
    )
    assert attested.returncode == EXIT_OK, attested.stderr

    said = gc.gctl("attestations", key=boss_key)
    assert said.returncode == EXIT_OK, said.stderr
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: hand 'ci' \(key gc_{ci_key.key.prefix}\) "
        rf"attested pass for {re.escape(PR_URL)} \(pull_request\), backing attempt "
        rf"{attempt.id}; the workspace's evidence",
        said.stdout.strip(),
    ), said.stdout
    other = gc.gctl("attestations", "https://github.com/acme/app/pull/1", key=boss_key)
    assert other.stdout.strip() == "no attestations match"
    listed = json.loads(gc.gctl("--json", "attestations", PR_URL, key=boss_key).stdout)
    assert [(a["result"], a["backs"]) for a in listed] == [("pass", attempt.id)]
    denied = gc.gctl("attestations")  # a hand's work and leases key
    assert denied.returncode == EXIT_AUTH and "(scope_denied)" in denied.stderr

    evidence = gc.gctl("evidence", str(attempt.id), key=boss_key)
    assert evidence.returncode == EXIT_OK, evidence.stderr
    assert evidence.stdout.strip() == f"pull_request {PR_URL}: seen by CI (ci attested pass)"
    pieces = json.loads(gc.gctl("--json", "evidence", str(attempt.id), key=boss_key).stdout)
    assert [(p["kind"], p["grade"]) for p in pieces] == [("pull_request", "ci")]
    nowhere = gc.gctl("evidence", "999999", key=boss_key)
    assert nowhere.returncode == EXIT_ERROR and "(not_found)" in nowhere.stderr
