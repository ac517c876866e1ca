"""gctl's commands for the record and the money against the live server: `gctl refusals`, `gctl
events`, `gctl costs [reports | void]` and `gctl budgets list|show|set`, as sentences and as the
server's JSON, and the exit code of each refusal (docs/agents.md, "Exit codes")."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from decimal import Decimal

import pytest
from groundcontrol_client import Client, LeaseHeld, ScopeDenied
from groundcontrol_client.core.when import absolute

from fleet.models import Budget, Report, Run
from hands.models import Hand, Lane
from leases.models import Event
from leases.models import Refusal as RefusalRecord
from tests.support.live import Fleet, mint

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_AUTH = 0, 1, 2, 5


@pytest.fixture
def boss_key(owner: Hand, lane: Lane) -> str:
    return mint(owner, ["plan", "supervise"])


def test_gctl_refusals_says_each_refused_call(gc: Fleet, boss_key: str) -> None:
    with Client(gc.url, gc.key_a) as a, Client(gc.url, gc.key_b) as b:
        a.lease_acquire("src/auth/", ttl_s=60, process_id="host-a:1")
        with pytest.raises(LeaseHeld):
            b.lease_acquire("src/auth/", ttl_s=60, process_id="host-b:1")
        with pytest.raises(ScopeDenied):
            b.events()
    held = RefusalRecord.objects.get(code="lease_held")
    said = gc.gctl("refusals", "--code", "lease_held", key=boss_key)
    assert said.returncode == EXIT_OK, said.stderr
    assert said.stdout.strip() == (
        f"{absolute(held.at)}: hand 'hand-b' was refused lease_held on POST "
        f"/api/v1/leases/acquire: {held.message} (request {held.request_id})"
    )
    both = gc.gctl("refusals", "--hand", "hand-b", key=boss_key).stdout.splitlines()
    assert [line.split(" was refused ")[1].split(" ")[0] for line in both] == [
        "scope_denied",
        "lease_held",
    ]
    assert len(gc.gctl("refusals", "--limit", "1", key=boss_key).stdout.splitlines()) == 1
    body = json.loads(gc.gctl("refusals", "--json", key=boss_key).stdout)
    assert [item["code"] for item in body] == ["scope_denied", "lease_held"]
    assert body[1]["request_id"] == held.request_id
    none = gc.gctl("refusals", "--code", "stale_fence", key=boss_key)
    assert none.stdout.strip() == "no refused calls match"


def test_gctl_events_says_each_transition(gc: Fleet, boss_key: str) -> None:
    with Client(gc.url, gc.key_b) as b:
        b.lease_acquire("docs/", ttl_s=60, process_id="host-b:1")
    acquired = Event.objects.get(kind="lease_acquired")
    said = gc.gctl("events", "--kind", "lease_acquired", "--hand", "hand-b", key=boss_key)
    assert said.returncode == EXIT_OK, said.stderr
    assert said.stdout.strip() == (
        f"{absolute(acquired.at)}: lease_acquired by hand 'hand-b' (key "
        f"gc_{acquired.actor_key}): docs/ at fence 1"
    )
    since = str(acquired.pk - 1)  # an event's id: those after it
    body = json.loads(gc.gctl("--json", "events", "--since", since, key=boss_key).stdout)
    assert [item["id"] for item in body] == [acquired.pk]
    assert body[0]["resource"] == "docs/"
    refused = gc.gctl("events", key=gc.key_a)  # a work key
    assert refused.returncode == EXIT_AUTH
    assert "(scope_denied)" in refused.stderr
    bad = gc.gctl("events", "--since", "yesterday", key=boss_key)
    assert bad.returncode == EXIT_ERROR
    assert "(validation_error)" in bad.stderr


def test_gctl_costs_totals_lists_and_voids(
    gc: Fleet, boss_key: str, make_run: Callable[..., Run]
) -> None:
    run = make_run(title="Summarise the log", slots=1)
    with Client(gc.url, gc.key_a) as a:
        attempt = a.claim(run.pk, process_id="host-a:1")
        a.report(attempt.id, fence=attempt.fence, tokens_in=40_000, tokens_out=2_000, cost_usd=0.62)
        a.report(attempt.id, fence=attempt.fence, cost_usd="0.41")
    said = gc.gctl("costs", "--by", "run", key=boss_key)
    assert said.returncode == EXIT_OK, said.stderr
    assert said.stdout.splitlines() == [
        "spent in the reports kept: $1.03 (40,000 tokens in, 2,000 out), by run:",
        f"  run {run.pk} (Summarise the log): $1.03 (40,000 tokens in, 2,000 out)",
    ]
    body = json.loads(gc.gctl("costs", "--json", key=boss_key).stdout)
    assert (body["by"], body["total"]["cost_usd"]) == ("lane", "1.030000")

    second = Report.objects.get(attempt_id=attempt.id, cost_usd=Decimal("0.41"))
    listed = gc.gctl("costs", "reports", "--run", str(run.pk), key=boss_key).stdout.splitlines()
    assert listed[0] == (
        f"report {second.pk} at {absolute(second.at)}: attempt {attempt.id} of hand 'hand-a' "
        f"(run {run.pk}, lane rewalk) cost $0.41 (0 tokens in, 0 out)"
    )
    voided = gc.gctl("costs", "void", str(second.pk), "--reason", "a test's tokens", key=boss_key)
    assert voided.returncode == EXIT_OK, voided.stderr
    assert voided.stdout.strip() == (
        f"voided report {second.pk}'s cost ($0.41, attempt {attempt.id}): no total or budget "
        "counts it from now on"
    )
    again = gc.gctl("costs", "void", str(second.pk), "--reason", "twice", key=boss_key)
    assert again.stdout.strip() == (
        f"report {second.pk}'s cost ($0.41) was voided already: a test's tokens; nothing changed"
    )
    total = json.loads(gc.gctl("--json", "costs", key=boss_key).stdout)["total"]
    assert total["cost_usd"] == "0.620000"
    bad = gc.gctl("costs", "--since", "last week", key=boss_key)
    assert (bad.returncode, "(validation_error)" in bad.stderr) == (EXIT_ERROR, True)


def test_gctl_sets_and_lists_budgets(gc: Fleet, boss_key: str, lane: Lane) -> None:
    made = gc.gctl(
        "budgets", "set", "rewalk", "--period", "day", "--action", "pause", "--usd", "5",
        key=boss_key,
    )  # fmt: skip
    assert made.returncode == EXIT_OK, made.stderr
    budget = Budget.objects.get(lane=lane)
    assert re.fullmatch(
        rf"set budget {budget.pk}: lane rewalk's daily budget is \$5\.00, pause when reached; "
        r"spent \$0\.00 and 0 tokens in this period \(until \d{4}-\d\d-\d\d 00:00:00 UTC, in "
        r"\d+ (hours?|minutes?|s)\)",
        made.stdout.strip(),
    ), made.stdout
    changed = gc.gctl(
        "--json", "budgets", "set", "rewalk", "--period", "day", "--action", "stop",
        "--tokens", "1000", key=boss_key,
    )  # fmt: skip
    body = json.loads(changed.stdout)
    assert (body["id"], body["action"], body["limit_usd"], body["limit_tokens"]) == (
        budget.pk,
        "stop",
        None,
        1000,
    )
    listed = gc.gctl("budgets", "list", "--lane", "rewalk", key=boss_key)
    assert listed.stdout.startswith(
        f"budget {budget.pk}: lane rewalk's daily budget is 1,000 tokens, stop when reached"
    )
    assert json.loads(gc.gctl("budgets", "list", "--json", key=boss_key).stdout)[0]["id"] == (
        budget.pk
    )
    shown = gc.gctl("budgets", "show", str(budget.pk), key=boss_key)
    assert shown.stdout.startswith(
        f"budget {budget.pk}: lane rewalk's daily budget is 1,000 tokens, stop when reached"
    ), shown.stdout
    unknown = gc.gctl("budgets", "show", str(budget.pk + 1000), key=boss_key)
    assert (unknown.returncode, "(not_found)" in unknown.stderr) == (EXIT_ERROR, True)
    # No limit: usage. A lane that is not there: not found. A work key: auth.
    no_limit = gc.gctl("budgets", "set", "rewalk", "--period", "day", "--action", "pause")
    assert no_limit.returncode == EXIT_USAGE
    missing = gc.gctl(
        "budgets", "set", "nowhere", "--period", "day", "--action", "pause", "--usd", "1",
        key=boss_key,
    )  # fmt: skip
    assert (missing.returncode, "(not_found)" in missing.stderr) == (EXIT_ERROR, True)
    worker = gc.gctl("budgets", "list", key=gc.key_a)
    assert (worker.returncode, "(scope_denied)" in worker.stderr) == (EXIT_AUTH, True)
