"""A finish and CI's attestation of its URL racing, on PostgreSQL, each on its own thread and
connection: whichever commits first, the evidence ends graded `ci` (the finish reads an
attestation committed before it; an attestation regrades evidence committed before it; the
per-URL lock orders the two, so neither misses the other). And the forgery rules under
concurrent calls (issue 30): one merge delivered many times at once is one attestation; a fail
and an earlier pass racing end at the fail whichever commits first; two finishes racing for one
attestation, one wins."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from unittest import mock

import pytest

from evidence import services as evidence_services
from evidence.errors import EvidenceMissing
from evidence.models import Attestation, Evidence
from evidence.services import attempt_finish, attestation_record
from fleet.attempts import services as attempt_services
from fleet.plan import services as plan_services
from hands import services as hand_services
from schedules import github
from tests.support.threads import together

pytestmark = [pytest.mark.concurrency, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

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


THREADS = 8
PR_URL = "https://github.com/Codertocat/Hello-World/pull/2"


def _merged_payload() -> dict:
    import json
    from pathlib import Path

    raw = Path(__file__).resolve().parents[1] / "fixtures" / "github" / "pull_request-closed.json"
    payload = json.loads(raw.read_text())
    payload["pull_request"].update(merged=True, merged_at="2019-05-15T15:21:18Z")
    return payload


def _finished(hand, run, url: str):  # noqa: ANN001, ANN202
    view = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="p")
    attempt_finish(
        hand=hand,
        attempt_id=view.attempt.pk,
        fence=view.attempt.fence,
        process_id="p",
        evidence=[{"kind": "pull_request", "url": url}],
    )
    return view


def test_one_merge_replayed_at_once_under_new_delivery_ids_is_one_attestation(
    workspace, lane
) -> None:
    hand, _ = hand_services.hand_create(workspace=workspace, name="hand-a")
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(work_package=package, title="r", slots=2)
    _finished(hand, run, PR_URL)
    _finished(hand, run, PR_URL)
    integration = github.integration_create(
        lane=lane, repository="Codertocat/Hello-World", actor="boss"
    ).integration
    payload = _merged_payload()
    answers: list[github.DeliveryAnswer] = []

    def deliver(i: int) -> None:
        answers.append(
            github.delivery_receive(
                integration=integration,
                delivery_id=f"d-{i}",
                event="pull_request",
                payload=payload,
            )
        )

    assert together([lambda i=i: deliver(i) for i in range(THREADS)]) == []
    assert Attestation.objects.count() == 1
    assert sorted(a.outcome for a in answers) == ["attested"] + ["existing"] * (THREADS - 1)
    assert sum(a.graded for a in answers) == 1
    assert sorted(Evidence.objects.values_list("grade", flat=True)) == ["ci", "hand"]


def test_a_fail_and_an_earlier_pass_racing_end_at_the_fail(workspace, lane) -> None:
    hand, _ = hand_services.hand_create(workspace=workspace, name="hand-a")
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    key = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test").key
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    run = plan_services.run_create(work_package=package, title="r", slots=ROUNDS)
    for round_ in range(ROUNDS):
        url = f"https://github.com/acme/app/pull/{round_}"
        _finished(hand, run, url)
        moment = datetime(2020, 1, 1, 12, round_, tzinfo=UTC)

        def fail(url=url, moment=moment) -> None:  # noqa: ANN001
            attestation_record(hand=ci, key=key, url=url, result="fail", observed_at=moment)

        def earlier_pass(url=url, moment=moment) -> None:  # noqa: ANN001
            attestation_record(
                hand=ci, key=key, url=url, result="pass", observed_at=moment.replace(hour=11)
            )

        assert together([fail, earlier_pass, earlier_pass]) == []
        stored = Evidence.objects.select_related("attestation").get(url=url)
        assert (stored.grade, stored.attestation.result) == ("hand", "fail"), f"round {round_}"
        assert Attestation.objects.filter(url=url).count() == 2


def test_two_finishes_racing_for_one_attestation_one_wins(workspace, lane) -> None:
    ci, _ = hand_services.hand_create(workspace=workspace, name="ci")
    key = hand_services.key_issue(hand=ci, scopes=["attest"], actor="test").key
    hands = [hand_services.hand_create(workspace=workspace, name=f"h{i}")[0] for i in range(2)]
    package, _ = plan_services.work_package_create(lane=lane, key="race", title="Race")
    for round_ in range(ROUNDS):
        url = f"https://github.com/acme/app/pull/{round_}"
        attestation_record(hand=ci, key=key, url=url, result="pass")
        runs = [
            plan_services.run_create(
                work_package=package,
                title=f"r{round_}-{i}",
                slots=1,
                evidence_grades={"pull_request": "ci"},
            )
            for i in range(2)
        ]
        views = [
            attempt_services.attempt_claim(hand=h, run_id=r.pk, process_id="p")
            for h, r in zip(hands, runs, strict=True)
        ]
        refused: list[EvidenceMissing] = []

        def finish(hand, view, url=url, refused=refused) -> None:  # noqa: ANN001
            try:
                attempt_finish(
                    hand=hand,
                    attempt_id=view.attempt.pk,
                    fence=view.attempt.fence,
                    process_id="p",
                    evidence=[{"kind": "pull_request", "url": url}],
                )
            except EvidenceMissing as error:
                refused.append(error)

        bodies = [lambda h=h, v=v: finish(h, v) for h, v in zip(hands, views, strict=True)]
        assert together(bodies) == []
        assert len(refused) == 1, f"round {round_}"
        assert refused[0].fields["backing_other_attempts"] == [url]
        [won] = Evidence.objects.filter(url=url)
        assert won.grade == "ci"
        assert Attestation.objects.get(url=url).backs_id == won.attempt_id
