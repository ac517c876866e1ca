"""A supervisor changes a hand's capabilities while its claim is on the way (issue 22.6): the
claim's one statement judges by the rows as they are when it runs, so a change committed after
the claim was checked in and before its statement is never missed (a check in Python before the
statement would pass it). Each side on its own PostgreSQL connection."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from apikit.errors import GroundControlError
from fleet.attempts import services as attempt_services
from fleet.models import Attempt
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases import engine

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def _claim_paused_before_its_statement(
    monkeypatch: pytest.MonkeyPatch, hand: Any, run_id: int
) -> tuple[threading.Event, threading.Event, dict[str, Any], threading.Thread]:
    reached, go = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}
    real = engine.take_first_free

    def paused(**kwargs: Any) -> Any:
        reached.set()
        assert go.wait(10)
        return real(**kwargs)

    monkeypatch.setattr(engine, "take_first_free", paused)

    def claim() -> None:
        try:
            outcome["view"] = attempt_services.attempt_claim(
                hand=hand, run_id=run_id, process_id="host:1"
            )
        except GroundControlError as error:
            outcome["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=claim)
    thread.start()
    return reached, go, outcome, thread


def test_a_capability_removed_while_a_claim_is_on_its_way_refuses_it(
    monkeypatch: pytest.MonkeyPatch, workspace: Any, lane: Any, owner: Any
) -> None:
    hand_services.hand_set_capabilities(
        workspace_id=workspace.pk, name=owner.name, capabilities=["gpu"]
    )
    owner.refresh_from_db()
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(work_package=package, title="train", capabilities=["gpu"])
    reached, go, outcome, thread = _claim_paused_before_its_statement(monkeypatch, owner, run.pk)
    assert reached.wait(10)
    # The supervisor's change commits (its own connection: this test's) while the claim waits.
    hand_services.hand_set_capabilities(workspace_id=workspace.pk, name=owner.name, capabilities=[])
    go.set()
    thread.join(10)
    assert "view" not in outcome
    assert outcome["error"].code == "capability_missing"
    assert outcome["error"].fields["missing"] == ["gpu"]
    assert not Attempt.objects.filter(run=run).exists()


def test_a_capability_added_while_a_claim_is_on_its_way_lets_it_through(
    monkeypatch: pytest.MonkeyPatch, workspace: Any, lane: Any, owner: Any
) -> None:
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(work_package=package, title="train", capabilities=["gpu"])
    reached, go, outcome, thread = _claim_paused_before_its_statement(monkeypatch, owner, run.pk)
    assert reached.wait(10)
    hand_services.hand_set_capabilities(
        workspace_id=workspace.pk, name=owner.name, capabilities=["gpu"]
    )
    go.set()
    thread.join(10)
    assert "error" not in outcome, outcome
    assert Attempt.objects.filter(run=run, hand=owner).count() == 1


def test_a_run_patched_to_need_more_while_a_claim_is_on_its_way_refuses_it(
    monkeypatch: pytest.MonkeyPatch, workspace: Any, lane: Any, owner: Any
) -> None:
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(work_package=package, title="train")
    reached, go, outcome, thread = _claim_paused_before_its_statement(monkeypatch, owner, run.pk)
    assert reached.wait(10)
    plan_services.run_set_capabilities(
        workspace_id=workspace.pk, run_id=run.pk, capabilities=["browser"]
    )
    go.set()
    thread.join(10)
    assert outcome["error"].code == "capability_missing"
    assert not Attempt.objects.filter(run=run).exists()
