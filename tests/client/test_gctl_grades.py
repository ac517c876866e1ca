"""Evidence grades through gctl against the live server: `gctl run`'s finish is the wrapper's,
`gctl finish` the hand's; `gctl attest` (an `attest` key, as CI has) grades it `ci`; `gctl run
--await-ci` keeps the slot until CI attests; a finish below the run's grade names it."""

from __future__ import annotations

import json
import subprocess

import pytest

from evidence.models import Attestation, Evidence
from fleet.models import AttemptEnd
from hands import services as hand_services
from hands.models import Workspace
from leases.models import Refusal
from tests.client.conftest import GCTL, ONE_SHOT, PR_URL, Fleet, attempts_of, mint, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WRITE_PR = f'echo "pull_request={PR_URL}" >> "$GC_EVIDENCE_FILE"'


@pytest.fixture
def ci_key(workspace: Workspace) -> str:
    hand, _ = hand_services.hand_create(workspace=workspace, name="ci")
    return mint(hand, ["attest"])


def test_gctl_runs_finish_is_graded_wrapper_and_gctl_finish_hand(gc: Fleet) -> None:
    run = gc.run(slots=2, **ONE_SHOT)
    done = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", WRITE_PR)
    assert done.returncode == 0, done.stderr
    (record,) = attempts_of(run)
    item = Evidence.objects.get(attempt=record)
    assert (item.observed_by, item.grade) == ("wrapper", "wrapper")

    claimed = json.loads(gc.gctl("--json", "claim", str(run.pk), "--process-id", "p").stdout)
    session = {
        "GC_PROCESS_ID": "p",
        "GC_ATTEMPT": str(claimed["id"]),
        "GC_ATTEMPT_FENCE": str(claimed["fence"]),
    }
    finished = gc.gctl("finish", "--evidence", f"pull_request={PR_URL}", **session)
    assert finished.returncode == 0, finished.stderr
    assert Evidence.objects.get(attempt_id=claimed["id"]).grade == "hand"


def test_a_run_needing_ci_releases_naming_the_grade_without_await_ci(gc: Fleet) -> None:
    run = gc.run(evidence_grades={"pull_request": "ci"})
    assert "evidence: pull_request (seen by ci)" in gc.gctl("runs").stdout
    refused = gc.gctl("run", "--run", str(run.pk), "--", "sh", "-c", WRITE_PR)
    assert refused.returncode == 1
    last = refused.stderr.splitlines()[-1]
    assert "pull_request evidence seen by ci" in last
    assert "(the best sent was seen by wrapper" in last
    assert "--await-ci" in last and "$GC_EVIDENCE_FILE" not in last
    assert last.endswith("(evidence_missing)")
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.RELEASED


def test_gctl_run_await_ci_finishes_once_ci_attests(gc: Fleet, ci_key: str) -> None:
    run = gc.run(evidence_grades={"pull_request": "ci"})
    wrapper = subprocess.Popen(
        [GCTL, "run", "--run", str(run.pk), "--await-ci", "60", "--", "sh", "-c", WRITE_PR],
        env=gc.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: attempts_of(run), timeout=30)
        # Refused at least once, the tenure still held: the wrapper waits for CI.
        wait_for(lambda: not attempts_of(run)[0].end and _refused_once(), timeout=30)
        attested = gc.gctl(
            "attest", PR_URL, "--result", "pass", "--kind", "pull_request", key=ci_key
        )
        assert attested.returncode == 0, attested.stderr
        assert attested.stdout.startswith(f"attested pass for {PR_URL} as hand ci: ")
        _, stderr = wrapper.communicate(timeout=60)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
    assert wrapper.returncode == 0, stderr
    assert "waiting up to" in stderr and "for CI to attest" in stderr
    (record,) = attempts_of(run)
    assert record.end == AttemptEnd.FINISHED
    item = Evidence.objects.select_related("attestation").get(attempt=record)
    assert (item.grade, item.observed_by, item.attestation.hand) == ("ci", "wrapper", "ci")


def test_gctl_attest_needs_the_attest_scope(gc: Fleet) -> None:
    refused = gc.gctl("attest", PR_URL, "--result", "pass")
    assert refused.returncode == 5
    assert "(scope_denied)" in refused.stderr
    assert not Attestation.objects.exists()


def _refused_once() -> bool:
    return Refusal.objects.filter(code="evidence_missing").exists()
