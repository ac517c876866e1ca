"""A finish and CI's attestation of its URL racing, on PostgreSQL, each on its own thread and
connection: whichever commits first, the evidence ends graded `ci` (the finish reads an
attestation committed before it; an attestation regrades evidence committed before it; the
per-URL lock orders the two, so neither misses the other)."""

from __future__ import annotations

import time
from unittest import mock

import pytest

from evidence import services as evidence_services
from evidence.models import Evidence
from evidence.services import attempt_finish, attestation_record
from fleet.services import attempts as attempt_services
from fleet.services import plan as plan_services
from hands import services as hand_services
from tests.concurrency.test_done_slots import together

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROUNDS = 6
_record = evidence_services.record_event


def _slow_record(**fields: object) -> object:
    """The attestation's event, then a pause before it commits: the window in which an
    unordered finish would read no attestation and store evidence its UPDATE never saw."""
    made = _record(**fields)
    time.sleep(0.3)
    return made


def test_a_finish_racing_its_attestation_is_graded_ci_every_time(workspace, lane) -> None:
    hand, _ = hand_services.hand_create(workspace=workspace, name="hand-a")
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    key = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test").key
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(
        work_package=package, title="race", slots=ROUNDS, evidence_required=["pull_request"]
    )
    for round_ in range(ROUNDS):
        url = f"https://github.com/acme/app/pull/{round_}"
        view = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p")

        def finish(view=view, url=url) -> None:  # noqa: ANN001
            attempt_finish(
                hand=hand,
                attempt_id=view.attempt.pk,
                fence=view.attempt.fence,
                process_id="p",
                evidence=[{"kind": "pull_request", "url": url}],
            )

        def attest(url=url) -> None:  # noqa: ANN001
            attestation_record(hand=ci, key=key, url=url, result="pass")

        with mock.patch.object(evidence_services, "record_event", _slow_record):
            assert together([finish, attest]) == []
        assert Evidence.objects.get(url=url).grade == "ci", f"round {round_}"
