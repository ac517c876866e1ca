"""Finishing an attempt with evidence: the run's required kinds, http(s) links only."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from apikit.errors import ValidationFailed
from evidence.errors import EvidenceMissing
from evidence.models import Evidence
from fleet.models import AttemptEnd
from fleet.selectors import AttemptView, attempt_view
from fleet.services.attempts import attempt_end, attempt_for_ending
from hands.models import Hand
from leases.audit import refusals_recorded

MAX_EVIDENCE_ITEMS = 50
MAX_URL_LENGTH = 2000
_UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f<>\"\\^`{|}]")


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
    lane_id: int | None = None,
) -> AttemptView:
    """End the attempt as finished, with its evidence, in one transaction.

    Refused with `evidence_missing` unless every kind the run requires is present. A retried
    finish of an attempt already finished by the same process answers as the first did.
    """
    items = validate_evidence(evidence)
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
        missing = sorted(set(attempt.run.evidence_required) - {item["kind"] for item in items})
        if missing:
            raise EvidenceMissing(
                f"the run requires evidence of kind: {', '.join(missing)}", missing=missing
            )
        Evidence.objects.bulk_create(Evidence(attempt=attempt, **item) for item in items)
    return view
