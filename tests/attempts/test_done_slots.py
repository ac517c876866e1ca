"""Done slots under concurrency, on PostgreSQL, each thread with its own connection: the last
finishes of a run racing each other make it done exactly once, and claims racing a finish never
take the finished slot (issue 17.1)."""

from __future__ import annotations

import pytest

from apikit.errors import GroundControlError
from evidence.services import attempt_finish
from fleet.attempts import services as attempt_services
from fleet.models import Attempt, AttemptEnd, RunState
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from hands import services as hand_services
from leases.models import Event
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PR = [{"kind": "pull_request", "url": "https://example.com/pr/1"}]
ROUNDS = 8
SLOTS = 6


def finish_all_at_once(hands: list, run) -> None:  # noqa: ANN001
    views = [
        attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=f"p{i}")
        for i, hand in enumerate(hands)
    ]

    def finisher(i: int):  # noqa: ANN202
        return lambda: attempt_finish(
            hand=hands[i],
            attempt_id=views[i].attempt.pk,
            fence=views[i].attempt.fence,
            process_id=f"p{i}",
            evidence=PR,
        )

    assert together([finisher(i) for i in range(len(hands))]) == []


def test_the_last_finishes_racing_make_the_run_done_exactly_once(workspace, lane) -> None:
    hands = [hand_services.hand_create(workspace=workspace, name=f"h{i}")[0] for i in range(SLOTS)]
    for round_ in range(ROUNDS):
        package, _ = plan_services.work_package_create(lane=lane, key=f"r{round_}", title="Race")
        run = plan_services.run_create(
            work_package=package, title="race", slots=SLOTS, evidence_required=["pull_request"]
        )
        finish_all_at_once(hands, run)
        run.refresh_from_db()
        assert run.state == RunState.DONE, f"round {round_}: the run stayed {run.state}"
        assert [v.state for v in plan_selectors.run_slots(run=run)] == ["done"] * SLOTS
        done = Event.objects.filter(kind="run_done", data__run=run.pk)
        assert done.count() == 1, f"round {round_}: {done.count()} run_done events"


def claims_racing_a_finish(holder, claimers: list, run) -> list[str]:  # noqa: ANN001
    """The holder finishes while the claimers try again and again; what each claim got."""
    view = attempt_services.attempt_claim(hand=holder, run_id=run.pk, process_id="holder")
    outcomes: list[str] = []

    def finish() -> None:
        attempt_finish(
            hand=holder,
            attempt_id=view.attempt.pk,
            fence=view.attempt.fence,
            process_id="holder",
            evidence=PR,
        )

    def claimer(hand):  # noqa: ANN001, ANN202
        def body() -> None:
            for _ in range(20):
                try:
                    attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id=hand.name)
                    outcomes.append("claimed")
                except GroundControlError as error:
                    outcomes.append(error.code)

        return body

    assert together([finish, *(claimer(hand) for hand in claimers)]) == []
    return outcomes


def test_claims_racing_a_finish_never_take_the_finished_slot(workspace, lane) -> None:
    holder = hand_services.hand_create(workspace=workspace, name="holder")[0]
    claimers = [hand_services.hand_create(workspace=workspace, name=f"c{i}")[0] for i in range(7)]
    for round_ in range(ROUNDS):
        package, _ = plan_services.work_package_create(lane=lane, key=f"c{round_}", title="Race")
        run = plan_services.run_create(
            work_package=package, title="race", slots=1, evidence_required=["pull_request"]
        )
        outcomes = claims_racing_a_finish(holder, claimers, run)
        assert "claimed" not in outcomes, f"round {round_}: a finished slot was claimed again"
        assert set(outcomes) <= {"no_open_slot", "run_closed"}
        attempts = Attempt.objects.filter(run=run)
        assert [a.end for a in attempts] == [AttemptEnd.FINISHED]
        run.refresh_from_db()
        assert run.state == RunState.DONE
