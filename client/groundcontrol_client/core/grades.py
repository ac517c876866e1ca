"""Evidence graded by who observed it, as the server answers it: the evidence an attempt left
(`GET /attempts/{id}/evidence`, a finish's answer) with its grade, and CI's attestations of a
URL (`POST /attestations`, scope `attest`). Grades, weakest first: `hand` (the hand said so),
`wrapper` (`gctl run` saw the command exit 0 and read what it wrote: the client's word), `ci` (a
separate key with the `attest` scope posted a passing result for the URL)."""

from __future__ import annotations

from groundcontrol_client.core.wire import Flag, Text, Time, WholeNumber, WireModel

GRADES = ("hand", "wrapper", "ci")


class Attestation(WireModel, title="attestation"):
    """CI's word on one URL: `result` pass or fail, by `hand` (its key's `key_prefix`), as
    observed at `observed_at` (the order of a URL's attestations), arrived `at`; confined to
    `lane` (None: the workspace); `backs` the one attempt whose finish it grades ci."""

    id: WholeNumber
    url: Text
    result: Text  # pass | fail
    kind: Text = ""
    note: Text = ""
    hand: Text = ""
    key_prefix: Text = ""
    at: Time = None
    graded: WholeNumber | None = None  # how many pieces of evidence it regraded (a POST's answer)
    observed_at: Time = None
    lane: Text | None = None
    backs: WholeNumber | None = None
    duplicate: Flag = False  # the same observation was recorded already: nothing changed


class GradedEvidence(WireModel, title="evidence"):
    """A piece of evidence an attempt left, with who observed it."""

    kind: Text
    url: Text
    note: Text = ""
    grade: Text = "hand"  # hand | wrapper | ci
    observed_by: Text = "hand"  # hand | wrapper: what the finish said
    attestation: Attestation | None = None  # what decided the grade: its pass, else latest fail
    at: Time = None


def describe_grade(grade: str) -> str:
    return {
        "hand": "the hand's word",
        "wrapper": "seen by the wrapper (gctl run)",
        "ci": "seen by CI",
    }.get(grade, grade)


def describe_evidence(item: GradedEvidence) -> str:
    """e.g. "pull_request https://…/pull/7: seen by CI (ci attested pass)"."""
    sentence = f"{item.kind} {item.url}: {describe_grade(item.grade)}"
    if item.attestation is not None:
        sentence += f" ({item.attestation.hand} attested {item.attestation.result})"
    return sentence


def describe_grades(grades: dict[str, str]) -> str:
    """A run's least grades, e.g. "pull_request seen by ci"; empty when it requires none."""
    return ", ".join(f"{kind} seen by {grade}" for kind, grade in sorted(grades.items()))
