"""The client's grade sentences: a refusal naming the grade, a graded piece of evidence, a
run's required grades; and parsing the server's graded evidence and attestations."""

from __future__ import annotations

from groundcontrol_client import (
    Attestation,
    EvidenceMissing,
    GradedEvidence,
    Run,
    describe_evidence,
)
from groundcontrol_client.core.errors import describe
from groundcontrol_client.core.models import describe_required, describe_run

MESSAGE = (
    "the run requires pull_request evidence seen by ci (the best sent was seen by hand; no "
    "passing attestation of its URL yet)"
)


def test_a_refusal_for_want_of_ci_says_to_finish_again_once_ci_attests() -> None:
    error = EvidenceMissing(
        MESSAGE,
        fields={
            "missing": ["pull_request"],
            "grades_needed": {"pull_request": "ci"},
            "grades_seen": {"pull_request": "hand"},
        },
    )
    sentence = describe(error)
    assert sentence.startswith(MESSAGE + ": once CI has attested its URL")
    assert "finish again with the same evidence" in sentence
    assert sentence.endswith("or release with a reason.")


def test_a_refusal_for_want_of_the_wrapper_says_so() -> None:
    error = EvidenceMissing(
        "the run requires commit evidence seen by wrapper (the best sent was seen by hand)",
        fields={"missing": ["commit"], "grades_needed": {"commit": "wrapper"}},
    )
    assert "gctl run's finish is the wrapper's" in describe(error)


def test_a_refusal_without_grades_reads_as_before() -> None:
    error = EvidenceMissing("evidence missing", fields={"missing": ["pull_request"]})
    assert "the brief asks for evidence of kind pull_request" in describe(error)


def test_graded_evidence_and_its_attestation_parse_and_read_as_a_sentence() -> None:
    item = GradedEvidence.from_wire(
        {
            "kind": "pull_request",
            "url": "https://git.test/pull/9",
            "note": None,
            "at": "2030-01-01T12:00:00+00:00",
            "grade": "ci",
            "observed_by": "wrapper",
            "attestation": {
                "id": 3,
                "url": "https://git.test/pull/9",
                "result": "pass",
                "kind": None,
                "note": None,
                "hand": "ci",
                "key_prefix": "abc",
                "at": "2030-01-01T12:01:00+00:00",
            },
        }
    )
    assert isinstance(item.attestation, Attestation)
    assert (item.grade, item.observed_by, item.attestation.hand) == ("ci", "wrapper", "ci")
    assert describe_evidence(item) == (
        "pull_request https://git.test/pull/9: seen by CI (ci attested pass)"
    )


def test_a_run_says_the_grades_it_requires() -> None:
    assert describe_required(["commit", "pull_request"], {"pull_request": "ci"}) == (
        "commit, pull_request (seen by ci)"
    )
    assert describe_required([], {}) == "none"
    run = Run.from_wire(
        {
            "id": 4,
            "title": "Fix",
            "state": "open",
            "lane": "rewalk",
            "work_package": 1,
            "work_package_key": "wp",
            "evidence_required": ["pull_request"],
            "evidence_grades": {"pull_request": "ci"},
            "slots": 1,
            "slots_by_state": {"open": 1, "held": 0, "done": 0},
            "heartbeat_interval_s": 30,
            "grace_s": 60,
        }
    )
    assert run.evidence_grades == {"pull_request": "ci"}
    assert "evidence: pull_request (seen by ci);" in describe_run(run)
