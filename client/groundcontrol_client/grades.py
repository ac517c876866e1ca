"""Evidence graded by who observed it, as the server answers it: the evidence an attempt left
(`GET /attempts/{id}/evidence`, a finish's answer) with its grade, and CI's attestations of a
URL (`POST /attestations`, scope `attest`). Grades, weakest first: `hand` (the hand said so),
`wrapper` (`gctl run` saw the command exit 0 and read what it wrote: the client's word), `ci` (a
separate key with the `attest` scope posted a passing result for the URL)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from groundcontrol_client.models import _int, _parsing, _time

GRADES = ("hand", "wrapper", "ci")


@dataclass(frozen=True)
class Attestation:
    """CI's word on one URL: `result` pass or fail, by `hand` (its key's `key_prefix`), as
    observed at `observed_at` (the order of a URL's attestations), arrived `at`; confined to
    `lane` (None: the workspace); `backs` the one attempt whose finish it grades ci."""

    id: int
    url: str
    result: str  # pass | fail
    kind: str
    note: str
    hand: str
    key_prefix: str
    at: datetime | None
    graded: int | None  # how many pieces of evidence it regraded (in the answer to a POST)
    observed_at: datetime | None
    lane: str | None
    backs: int | None
    duplicate: bool  # the same observation was recorded already: nothing changed
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("attestation")
    def from_wire(cls, data: dict[str, Any]) -> Attestation:
        graded = data.get("graded")
        return cls(
            id=_int(data, "id"),
            url=str(data["url"]),
            result=str(data["result"]),
            kind=str(data.get("kind") or ""),
            note=str(data.get("note") or ""),
            hand=str(data.get("hand") or ""),
            key_prefix=str(data.get("key_prefix") or ""),
            at=_time(data.get("at")),
            graded=graded if isinstance(graded, int) else None,
            observed_at=_time(data.get("observed_at")),
            lane=str(data["lane"]) if data.get("lane") else None,
            backs=data["backs"] if isinstance(data.get("backs"), int) else None,
            duplicate=data.get("duplicate") is True,
            raw=data,
        )


@dataclass(frozen=True)
class GradedEvidence:
    """A piece of evidence an attempt left, with who observed it."""

    kind: str
    url: str
    note: str
    grade: str  # hand | wrapper | ci
    observed_by: str  # hand | wrapper: what the finish said
    attestation: Attestation | None  # what decided the grade: its pass, else the latest fail
    at: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    @_parsing("evidence")
    def from_wire(cls, data: dict[str, Any]) -> GradedEvidence:
        attestation = data.get("attestation")
        return cls(
            kind=str(data["kind"]),
            url=str(data["url"]),
            note=str(data.get("note") or ""),
            grade=str(data.get("grade") or "hand"),
            observed_by=str(data.get("observed_by") or "hand"),
            attestation=Attestation.from_wire(attestation) if attestation else None,
            at=_time(data.get("at")),
            raw=data,
        )


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
