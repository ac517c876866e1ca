"""Finishing an attempt with evidence: the run's required kinds and the least grade of each,
http(s) links only; and CI's attestations of a URL, which grade the evidence carrying it.

A piece of evidence's grade, written once (`evidence_grade`): `ci` when the latest attestation
of its URL in the workspace passed, else what the finish said it was (`observed_by`: `hand`, or
`wrapper` from `gctl run`, which is the client's word). A finish reads the attestations already
posted; an attestation posted later regrades the evidence already stored, in one statement. The
two take the same per-URL lock (PostgreSQL), so neither misses the other."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.db import connection, transaction
from django.db.models import F, Value

from apikit.errors import ValidationFailed
from evidence.errors import EvidenceMissing
from evidence.models import Attestation, AttestationResult, Evidence
from fleet.models import GRADE_ORDER, AttemptEnd, EvidenceGrade, Run
from fleet.selectors import AttemptView, attempt_view
from fleet.services.attempts import attempt_end, attempt_for_ending
from hands.models import Hand, HandKey
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now
from leases.models import EventKind

MAX_EVIDENCE_ITEMS = 50
MAX_URL_LENGTH = 2000
_UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f<>\"\\^`{|}]")
# What a finish may say observed its evidence; `ci` is only ever an attestation's doing.
OBSERVERS = [EvidenceGrade.HAND.value, EvidenceGrade.WRAPPER.value]
RESULTS = [result.value for result in AttestationResult]
_RANK = {grade: rank for rank, grade in enumerate(GRADE_ORDER)}


def evidence_grade(*, observed_by: str, attestation: Attestation | None) -> str:
    """The grade of evidence the finish said `observed_by` saw, whose URL's latest attestation
    is `attestation` (or None). The SQL form is `attestation_record`'s UPDATE."""
    if attestation is not None and attestation.result == AttestationResult.PASS:
        return EvidenceGrade.CI.value
    return observed_by


def grade_at_least(grade: str, needed: str) -> bool:
    return _RANK[grade] >= _RANK[needed]


def validate_evidence_url(url: object, *, field: str = "url") -> str:
    """Only absolute http(s) links with a host: no javascript:, data:, file: or relative URLs."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise ValidationFailed(
            f"{field} must be an http(s) URL of at most {MAX_URL_LENGTH} characters",
            fields={field: ["An http or https URL."]},
        )
    parts = urlsplit(url)
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or _UNSAFE_URL_CHARS.search(url)
    ):
        raise ValidationFailed(
            f"{field} must be an http or https URL", fields={field: ["An http or https URL."]}
        )
    return url


def validate_evidence(items: object) -> list[dict[str, str]]:
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > MAX_EVIDENCE_ITEMS:
        raise ValidationFailed(
            f"evidence must be a list of at most {MAX_EVIDENCE_ITEMS} items",
            fields={"evidence": [f"A list of at most {MAX_EVIDENCE_ITEMS} items."]},
        )
    cleaned = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValidationFailed(
                "each evidence item is an object {kind, url, note?}",
                fields={f"evidence[{position}]": ["An object with kind and url."]},
            )
        kind = item.get("kind")
        if not isinstance(kind, str) or not (0 < len(kind) <= 64):
            raise ValidationFailed(
                "evidence kind must be a short string",
                fields={f"evidence[{position}].kind": ["A string of at most 64 characters."]},
            )
        url = validate_evidence_url(item.get("url"), field=f"evidence[{position}].url")
        note = item.get("note") or ""
        if not isinstance(note, str) or len(note) > 2000:
            raise ValidationFailed(
                "evidence note must be at most 2000 characters",
                fields={f"evidence[{position}].note": ["At most 2000 characters."]},
            )
        cleaned.append({"kind": kind, "url": url, "note": note})
    return cleaned


@refusals_recorded
def attempt_finish(
    *,
    hand: Hand,
    attempt_id: int,
    fence: int,
    process_id: str,
    evidence: list[dict[str, Any]] | None,
    summary: str = "",
    observed_by: str = EvidenceGrade.HAND.value,
    lane_id: int | None = None,
) -> AttemptView:
    """End the attempt as finished, with its evidence, in one transaction.

    Refused with `evidence_missing` unless every kind the run requires is present, at the grade
    the run requires of it (`evidence_grades`); the tenure then stays held, so the hand retries
    the finish once CI has attested. A retried finish of an attempt already finished by the
    same process answers as the first did.
    """
    items = validate_evidence(evidence)
    if observed_by not in OBSERVERS:
        raise ValidationFailed(
            f"observed_by must be one of {', '.join(OBSERVERS)} (ci comes from an attestation)",
            fields={"observed_by": [f"One of: {', '.join(OBSERVERS)}."]},
        )
    if not isinstance(summary, str) or len(summary) > 10_000:
        raise ValidationFailed(
            "summary must be text", fields={"summary": ["At most 10000 characters."]}
        )
    attempt, done = attempt_for_ending(
        hand=hand,
        attempt_id=attempt_id,
        fence=fence,
        process_id=process_id,
        end=AttemptEnd.FINISHED,
        lane_id=lane_id,
    )
    if done:
        return attempt_view(attempt)
    with transaction.atomic():
        # End the tenure first, so a lost attempt answers lease_lost whatever it carries; a
        # missing kind then rolls the release back.
        view = attempt_end(
            hand=hand,
            attempt=attempt,
            process_id=process_id,
            end=AttemptEnd.FINISHED,
            summary=summary,
        )
        urls = sorted({item["url"] for item in items})
        _lock_urls(hand.workspace_id, urls)
        latest = _latest_attestations(hand.workspace_id, urls)
        rows = [
            Evidence(
                workspace_id=attempt.workspace_id,
                attempt=attempt,
                observed_by=observed_by,
                grade=evidence_grade(observed_by=observed_by, attestation=latest.get(item["url"])),
                attestation=latest.get(item["url"]),
                **item,
            )
            for item in items
        ]
        # The run's rules, read with its workspace named (not the foreign key's lazy load).
        required, grades = (
            Run.objects.filter(workspace_id=attempt.workspace_id, pk=attempt.run_id)
            .values_list("evidence_required", "evidence_grades")
            .get()
        )
        _refuse_short(required, grades, rows)
        Evidence.objects.bulk_create(rows)
    return view


def _refuse_short(required: list[str], grades: dict[str, str], rows: list[Evidence]) -> None:
    """Raise `evidence_missing` unless each required kind is there at the grade it needs:
    `missing` lists every kind short (absent or below its grade); `grades_needed` and
    `grades_seen` say, for each kind that was there but below, the grade it needs and the best
    it had."""
    best: dict[str, str] = {}
    for row in rows:
        if row.kind not in best or not grade_at_least(best[row.kind], row.grade):
            best[row.kind] = row.grade
    absent = sorted(kind for kind in required if kind not in best)
    below = {
        kind: needed
        for kind, needed in sorted(grades.items())
        if kind in best and not grade_at_least(best[kind], needed)
    }
    if not absent and not below:
        return
    parts = [f"the run requires evidence of kind: {', '.join(absent)}"] if absent else []
    parts += [
        f"the run requires {kind} evidence seen by {needed} (the best sent was seen by "
        f"{best[kind]}" + ("; no passing attestation of its URL yet)" if needed == "ci" else ")")
        for kind, needed in below.items()
    ]
    fields: dict[str, Any] = {"missing": sorted([*absent, *below])}
    if below:
        fields["grades_needed"] = below
        fields["grades_seen"] = {kind: best[kind] for kind in below}
    raise EvidenceMissing("; ".join(parts), **fields)


def _lock_urls(workspace_id: int, urls: list[str]) -> None:
    """Take each URL's lock for the rest of the transaction (PostgreSQL; SQLite writes one at a
    time), in one order so that two callers never wait on each other in a circle. Without it a
    finish could read the attestations before a concurrent one commits while that one's
    regrading UPDATE cannot yet see the finish's rows, and the evidence would miss its grade."""
    if not urls or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        # A volatile function in the select list runs after the ORDER BY: locks in hash order.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext('gc-attest:' || %s), hashtext(u)) "
            "FROM unnest(CAST(%s AS text[])) AS u ORDER BY hashtext(u)",
            [str(workspace_id), urls],
        )


def _latest_attestations(workspace_id: int, urls: list[str]) -> dict[str, Attestation]:
    """The latest attestation of each URL (attestation_url_idx; a few rows per URL)."""
    latest: dict[str, Attestation] = {}
    if not urls:
        return latest
    found = Attestation.objects.filter(workspace_id=workspace_id, url__in=urls).order_by("-id")
    for attestation in found:
        latest.setdefault(attestation.url, attestation)
    return latest


def _validate_short_text(value: object, *, field: str, max_length: int, required: bool) -> str:
    if value is None or value == "":
        if required:
            raise ValidationFailed(f"{field} is required", fields={field: ["Required."]})
        return ""
    if not isinstance(value, str) or len(value) > max_length:
        raise ValidationFailed(
            f"{field} must be a string of at most {max_length} characters",
            fields={field: [f"At most {max_length} characters."]},
        )
    return value


@refusals_recorded
def attestation_record(
    *, hand: Hand, key: HandKey, url: str, result: str, kind: str = "", note: str = ""
) -> tuple[Attestation, int]:
    """Record that `hand` (CI, through a key with the `attest` scope) observed `url` with
    `result`, and regrade the workspace's evidence with that URL: `ci` on a pass, back to what
    its finish said on a fail. Returns the attestation and how many pieces were regraded.
    `kind` is what CI took the URL for (a note: it does not narrow what is graded)."""
    return attestation_observe(
        workspace_id=hand.workspace_id,
        observer=hand.name,
        key_prefix=key.prefix,
        url=url,
        result=result,
        kind=kind,
        note=note,
    )


def attestation_observe(
    *,
    workspace_id: int,
    observer: str,
    key_prefix: str,
    url: str,
    result: str,
    kind: str = "",
    note: str = "",
) -> tuple[Attestation, int]:
    """An attestation by `observer` (a hand's name, or another observer the server trusts, such
    as a lane's GitHub integration, with `key_prefix` empty), and the regrading of the
    workspace's evidence with its URL (`attestation_record`)."""
    url = validate_evidence_url(url)
    if result not in RESULTS:
        raise ValidationFailed(
            f"result must be one of {', '.join(RESULTS)}",
            fields={"result": [f"One of: {', '.join(RESULTS)}."]},
        )
    kind = _validate_short_text(kind, field="kind", max_length=64, required=False)
    note = _validate_short_text(note, field="note", max_length=2000, required=False)
    with transaction.atomic():
        _lock_urls(workspace_id, [url])
        now = db_now()
        attestation = Attestation.objects.create(
            workspace_id=workspace_id,
            url=url,
            result=result,
            kind=kind,
            note=note,
            hand=observer,
            key_prefix=key_prefix,
            at=now,
        )
        grade = (
            Value(EvidenceGrade.CI.value) if result == AttestationResult.PASS else F("observed_by")
        )
        graded = Evidence.objects.filter(attempt__workspace_id=workspace_id, url=url).update(
            grade=grade, attestation=attestation
        )
        record_event(
            workspace_id=workspace_id,
            kind=EventKind.ATTESTED,
            at=now,
            actor=observer,
            hand=observer,
            data={
                "url": url,
                "result": result,
                "kind": kind or None,
                "key_prefix": key_prefix,
                "attestation": attestation.pk,
                "graded": graded,
            },
        )
    return attestation, graded
