"""The supervisor's loop in the client: a report's cost (Client, `gctl report --tokens-in
--tokens-out --cost`, MCP `report_progress`) and the idle and budget notices of the answers,
said in words by gctl and the MCP server."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from groundcontrol_client import BudgetReached, Client
from groundcontrol_client.core.errors import Denied
from groundcontrol_client.core.loop import attempt_notices, cost_fields, cost_usd_text

from fleet.costs import budgets as budget_services
from fleet.models import Attempt, BudgetHit, Report
from tests.client.conftest import Fleet, attempts_of
from tests.client.test_mcp import drive, stdio, text


def test_a_cost_goes_out_as_exact_decimal_text() -> None:
    assert cost_fields(10, None, 0.1) == {"tokens_in": 10, "cost_usd": "0.1"}
    assert cost_fields(cost_usd=Decimal("1.50")) == {"cost_usd": "1.50"}
    assert cost_fields(tokens_out=0, cost_usd="2") == {"tokens_out": 0, "cost_usd": "2"}
    assert cost_fields() == {}
    for bad in ("a lot", float("nan"), "Infinity", True):
        with pytest.raises(ValueError, match="cost_usd"):
            cost_usd_text(bad)


def test_the_notices_say_idle_and_budget_in_words() -> None:
    assert attempt_notices({"idle": False, "budget": None}) == []
    idle = {
        "idle": True,
        "progress_timeout_s": 600,
        "last_progress_at": None,
        "claimed_at": "2030-01-01T12:00:00Z",
    }
    [said] = attempt_notices(idle)
    assert said.startswith("idle: no progress reported for over 600 s (since 2030-01-01T12:00")
    budget = {
        "message": "lane docs has spent its daily budget ($5.00 of $5.00): pause",
        "period_end": "2030-01-02T00:00:00Z",
    }
    assert attempt_notices({"budget": budget}) == [
        "lane docs has spent its daily budget ($5.00 of $5.00): pause (until 2030-01-02T00:00:00Z)"
    ]


@pytest.mark.django_db(transaction=True)
def test_the_client_and_gctl_report_cost_and_gctl_says_the_budget(gc: Fleet, lane) -> None:  # noqa: ANN001
    budget_services.budget_create(lane=lane, period="day", action="pause", limit_usd=Decimal("5"))
    # Tenures that outlast two gctl start-ups on loaded cores: with the fixtures' 1 s + 1 s, the
    # first attempt was lost before gctl's claim, which then took its slot, and it was no longer
    # open when the budget paused the lane's open attempts.
    run = gc.run(slots=2, heartbeat_interval_s=60, grace_s=60)
    client = Client(gc.url, gc.key_b)
    other = client.claim(run.pk, process_id="b:1")
    answered = client.report(
        other.id,
        fence=other.fence,
        process_id="b:1",
        kind="note",
        message="m",
        tokens_in=100,
        cost_usd=4.9,
    )
    assert answered.attempt.raw["budget"] is None
    claimed = json.loads(gc.gctl("--json", "claim", str(run.pk), GC_PROCESS_ID="shell-1").stdout)
    session = {
        "GC_PROCESS_ID": "shell-1",
        "GC_ATTEMPT": str(claimed["id"]),
        "GC_ATTEMPT_FENCE": str(claimed["fence"]),
    }
    reported = gc.gctl(
        "report",
        "-m",
        "spent",
        "--tokens-in",
        "1200",
        "--tokens-out",
        "300",
        "--cost",
        "0.12",
        **session,
    )
    assert reported.returncode == 0, reported.stderr
    lines = reported.stdout.splitlines()
    assert lines[0].startswith("renewed; attempt ") and "directive pause" in lines[0]
    assert lines[1] == (
        "lane rewalk has spent its daily budget ($5.02 of $5.00): pause "
        f"(until {BudgetHit.objects.get().period_end.isoformat().replace('+00:00', 'Z')})"
    )
    row = Report.objects.get(attempt_id=claimed["id"], kind="progress")
    assert (row.tokens_in, row.tokens_out, row.cost_usd) == (1200, 300, Decimal("0.12"))
    assert Attempt.objects.get(pk=other.id).directive == "pause"
    with pytest.raises(BudgetReached) as refused_claim:
        client.claim(run.pk, process_id="b:2")
    assert refused_claim.value.get("action") == "pause"
    assert isinstance(refused_claim.value, Denied)
    bad = gc.gctl("report", "--cost", "lots", **session)
    assert bad.returncode != 0 and "cost_usd" in bad.stderr
    refused = gc.gctl("report", "--tokens-in", "-5", **session)
    assert refused.returncode != 0 and "tokens_in" in refused.stderr


@pytest.mark.django_db(transaction=True)
def test_report_progress_takes_cost_and_says_the_budget(gc: Fleet, lane) -> None:  # noqa: ANN001
    budget_services.budget_create(lane=lane, period="day", action="stop", limit_tokens=1000)
    run = gc.run()
    _, claimed, reported, refused = drive(
        stdio(gc, gc.key_a),
        [
            ("claim", {"run_id": run.pk}),
            (
                "report_progress",
                {"message": "step", "tokens_in": 900, "tokens_out": 100, "cost_usd": 0.25},
            ),
            ("report_progress", {"message": "step", "tokens_in": -1}),
        ],
    )
    assert not claimed.is_error
    (record,) = attempts_of(run)
    said = text(reported)
    # After the session's own notice of the stop (mcp_session), the answer and the budget.
    assert (
        f"Reported on attempt {record.pk}. Directive: stop. Lane rewalk has spent its daily "
        "budget (1000 of 1000 tokens): stop (until "
    ) in said
    row = Report.objects.get(attempt=record, kind="progress")
    assert (row.tokens_in, row.tokens_out, row.cost_usd) == (900, 100, Decimal("0.25"))
    assert refused.is_error and "tokens_in" in text(refused)


def test_every_report_method_sends_the_cost_as_decimal_text() -> None:
    import asyncio

    import httpx
    from groundcontrol_client import AsyncClient

    from tests.client.fakes import KEY, URL, FakeServer

    fake = FakeServer()
    client = fake.client()
    attempt = client.claim(12, process_id="p")
    client.report(attempt.id, fence=attempt.fence, process_id="p", tokens_in=5, cost_usd=0.1)

    async def send() -> None:
        async with AsyncClient(URL, KEY, transport=httpx.MockTransport(fake.handle)) as aclient:
            await aclient.report(
                attempt.id, fence=attempt.fence, process_id="p", kind="note", message="m",
                tokens_out=7, cost_usd=Decimal("2.50"),
            )  # fmt: skip

    asyncio.run(send())
    sent = fake.calls("/reports")
    assert {k: sent[-2][k] for k in ("tokens_in", "cost_usd")} == {
        "tokens_in": 5,
        "cost_usd": "0.1",
    }
    assert "tokens_out" not in sent[-2]
    assert {k: sent[-1][k] for k in ("tokens_out", "cost_usd")} == {
        "tokens_out": 7,
        "cost_usd": "2.50",
    }
