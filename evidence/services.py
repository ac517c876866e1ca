"""Finishing an attempt with evidence: the run's required kinds and the least grade of each,
http(s) links only; and CI's attestations of a URL, which grade the evidence carrying it.

A piece of evidence's grade (`evidence_grade`): `ci` when a passing attestation of its URL backs
its attempt, else what the finish said it was (`observed_by`: `hand`, or `wrapper` from `gctl
run`, which is the client's word). Which attestations count for an attempt's evidence
(`attestation_deciding`; its SQL form is the regrading statement in `attestation_observe`):

1. Only those in scope for it: of its workspace, workspace-wide or of its own lane (a
   lane-limited key's and a lane's integration's attest only that lane), and never one by the
   attempt's own hand (the attester: the key's hand, or the hand whose key made the
   integration).
2. Ordered by when CI observed them (`observed_at`, then id), never by arrival alone: the
   latest fail undoes every pass observed before it, and a pass observed before a fail that
   arrives late changes nothing. One observation is one row (a replay inserts nothing).
3. A pass backs the finish of one attempt (`Attestation.backs`, set once by a conditional
   UPDATE): the attempt it backs is graded `ci` by it; another attempt citing the URL needs an
   attestation of its own, and its refusal says so.

A finish reads the attestations already posted; an attestation posted later regrades the
evidence already stored, in one statement. The two take the same per-URL lock (PostgreSQL), so
neither misses the other."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.db import connection, transaction
from django.db.models import Q

from apikit.errors import ValidationFailed
from apikit.retries import retried
from evidence.errors import AttestOwnEvidence, EvidenceMissing
from evidence.models import Attestation, AttestationResult, Evidence
from fleet.attempts.selectors import AttemptView, attempt_view
from fleet.attempts.services import attempt_end, attempt_for_ending
from fleet.models import GRADE_ORDER, Attempt, AttemptEnd, EvidenceGrade, Run
from hands.models import Hand, HandKey
from leases.audit import record_event, refusals_recorded
from leases.clock import db_now
from leases.models import EventKind

MAX_EVIDENCE_ITEMS = 50
MAX_URL_LENGTH = 2000
# A finish's summary, in characters.
MAX_SUMMARY_LENGTH = 10_000
_UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f<>\"\\^`{|}]")
# What a finish may say observed its evidence; `ci` is only ever an attestation's doing.
OBSERVERS = [EvidenceGrade.HAND.value, EvidenceGrade.WRAPPER.value]
RESULTS = [result.value for result in AttestationResult]
_RANK = {grade: rank for rank, grade in enumerate(GRADE_ORDER)}
# How far ahead of the database's clock an attestation's observed_at may be (another machine's
# clock: GitHub's merged_at, CI's own). Further ahead would put it out of reach of every later
# fail.
MAX_OBSERVED_AHEAD = timedelta(minutes=5)


def evidence_grade(*, observed_by: str, attestation: Attestation | None) -> str:
    """The grade of evidence the finish said `observed_by` saw, whose deciding attestation is
    `attestation` (a pass that backs its attempt, the latest fail, or None)."""
    if attestation is not None and attestation.result == AttestationResult.PASS:
        return EvidenceGrade.CI.value
    return observed_by


@dataclass(frozen=True)
class Deciding:
    """What an attempt's evidence of one URL is graded by (`attestation_deciding`)."""

    attestation: Attestation | None  # the pass to back the attempt, else the latest fail
    taken: bool  # a pass newer than the latest fail backs another attempt (and none is free)


def _observed(attestation: Attestation) -> tuple[datetime, int]:
    return attestation.observed_at, attestation.pk


def attestation_deciding(attestations: list[Attestation], *, attempt_id: int) -> Deciding:
    """From the attestations of one URL in scope for the attempt (the module's rule 1), the one
    that decides its evidence's grade: the latest pass observed after the latest fail that
    backs no other attempt (rules 2 and 3), else the latest fail (or None)."""
    ordered = sorted(attestations, key=_observed)
    fails = [a for a in ordered if a.result == AttestationResult.FAIL]
    latest_fail = fails[-1] if fails else None
    after = [
        a
        for a in ordered
        if a.result == AttestationResult.PASS
        and (latest_fail is None or _observed(a) > _observed(latest_fail))
    ]
    free = [a for a in after if a.backs_id in (None, attempt_id)]
    if free:
        return Deciding(free[-1], False)
    return Deciding(latest_fail, bool(after))


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
@retried
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
    if not isinstance(summary, str) or len(summary) > MAX_SUMMARY_LENGTH:
        raise ValidationFailed(
            "summary must be text",
            fields={"summary": [f"At most {MAX_SUMMARY_LENGTH} characters."]},
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
        # missing kind then rolls the release back (and the backing the finish took with it).
        view = attempt_end(
            hand=hand,
            attempt=attempt,
            process_id=process_id,
            end=AttemptEnd.FINISHED,
            summary=summary,
        )
        urls = sorted({item["url"] for item in items})
        _lock_urls(hand.workspace_id, urls)
        deciding = _deciding_attestations(attempt, urls)
        rows = [
            Evidence(
                workspace_id=attempt.workspace_id,
                attempt=attempt,
                observed_by=observed_by,
                grade=evidence_grade(
                    observed_by=observed_by, attestation=deciding[item["url"]].attestation
                ),
                attestation=deciding[item["url"]].attestation,
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
        taken = sorted(url for url, found in deciding.items() if found.taken)
        _refuse_short(required, grades, rows, taken)
        Evidence.objects.bulk_create(rows)
    return view


def _refuse_short(
    required: list[str], grades: dict[str, str], rows: list[Evidence], taken: list[str]
) -> None:
    """Raise `evidence_missing` unless each required kind is there at the grade it needs:
    `missing` lists every kind short (absent or below its grade); `grades_needed` and
    `grades_seen` say, for each kind that was there but below, the grade it needs and the best
    it had; `backing_other_attempts` the URLs of those kinds whose passing attestation backs
    another attempt's finish already."""
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
    short_urls = {row.url: row.kind for row in rows if row.kind in below}
    elsewhere = [url for url in taken if url in short_urls]

    def why(kind: str, needed: str) -> str:
        if needed != "ci":
            return ")"
        urls = [url for url in elsewhere if short_urls[url] == kind]
        if urls:
            return (
                f"; the passing attestation of {', '.join(urls)} backs another attempt's finish "
                "already: each attempt needs an attestation of its own)"
            )
        return "; no passing attestation of its URL yet)"

    parts = [f"the run requires evidence of kind: {', '.join(absent)}"] if absent else []
    parts += [
        f"the run requires {kind} evidence seen by {needed} (the best sent was seen by "
        f"{best[kind]}" + why(kind, needed)
        for kind, needed in below.items()
    ]
    fields: dict[str, Any] = {"missing": sorted([*absent, *below])}
    if below:
        fields["grades_needed"] = below
        fields["grades_seen"] = {kind: best[kind] for kind in below}
    if elsewhere:
        fields["backing_other_attempts"] = elsewhere
    raise EvidenceMissing("; ".join(parts), **fields)


def _lock_urls(workspace_id: int, urls: list[str]) -> None:
    """Take each URL's lock for the rest of the transaction, in one order so that two callers
    never wait on each other in a circle. Without it a finish could read the attestations
    before a concurrent one commits while that one's regrading UPDATE cannot yet see the
    finish's rows, and the evidence would miss its grade."""
    if not urls:
        return
    with connection.cursor() as cursor:
        # A volatile function in the select list runs after the ORDER BY: locks in hash order.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext('gc-attest:' || %s), hashtext(u)) "
            "FROM unnest(CAST(%s AS text[])) AS u ORDER BY hashtext(u)",
            [str(workspace_id), urls],
        )


def _deciding_attestations(attempt: Attempt, urls: list[str]) -> dict[str, Deciding]:
    """For each URL, the attestation that decides the attempt's evidence of it
    (`attestation_deciding` over those in scope for the attempt: attestation_url_idx, a few
    rows per URL), the pass it takes backing the attempt by one conditional UPDATE. Called
    under the URLs' locks."""
    found: dict[str, list[Attestation]] = {url: [] for url in urls}
    if urls:
        in_scope = (
            Attestation.objects.filter(workspace_id=attempt.workspace_id, url__in=urls)
            .filter(Q(lane__isnull=True) | Q(lane_id=attempt.lane_id))
            # Never the attempt's own hand's word (a NULL attester, an integration made on
            # the dashboard, is kept: exclude() keeps NULLs).
            .exclude(attester_id=attempt.hand_id)
        )
        for attestation in in_scope:
            found[attestation.url].append(attestation)
    deciding = {}
    for url, attestations in found.items():
        decided = attestation_deciding(attestations, attempt_id=attempt.pk)
        chosen = decided.attestation
        if chosen is not None and chosen.result == AttestationResult.PASS:
            # The backing is taken once: the row count says whether this attempt has it.
            took = (
                Attestation.objects.filter(pk=chosen.pk)
                .filter(Q(backs__isnull=True) | Q(backs_id=attempt.pk))
                .update(backs_id=attempt.pk)
            )
            if not took:
                decided = Deciding(None, True)
        deciding[url] = decided
    return deciding


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


@dataclass(frozen=True)
class Observed:
    """An attestation recorded (or, `created` False, the one that recorded the same
    observation already: nothing was done), and how many pieces of evidence it regraded."""

    attestation: Attestation
    graded: int
    created: bool


@refusals_recorded
def attestation_record(
    *,
    hand: Hand,
    key: HandKey,
    url: str,
    result: str,
    kind: str = "",
    note: str = "",
    observed_at: datetime | None = None,
) -> Observed:
    """Record that `hand` (CI, through a key with the `attest` scope) observed `url` with
    `result` at `observed_at` (default: now), and regrade the evidence with that URL in scope
    (the key's lane when it is lane-limited, else the workspace's): `ci` on a pass (one
    attempt's), back to what its finish said on a fail. `kind` is what CI took the URL for (a
    note: it does not narrow what is graded). Refused `attest_own_evidence` when evidence in
    scope with that URL is the hand's own."""
    return attestation_observe(
        workspace_id=hand.workspace_id,
        observer=hand.name,
        attester_id=hand.pk,
        key_prefix=key.prefix,
        lane_id=key.lane_id,
        url=url,
        result=result,
        kind=kind,
        note=note,
        observed_at=observed_at,
        refuse_own=True,
    )


def observation_key(*, lane_id: int | None, url: str, result: str, observed_at: datetime) -> str:
    """One observation's identity: the same lane, URL, result and moment are the same
    observation (a replayed delivery, a retried POST), whoever sends it again."""
    moment = observed_at.astimezone(UTC).isoformat()
    text = f"{lane_id if lane_id is not None else '-'}|{result}|{moment}|{url}"
    return hashlib.sha256(text.encode()).hexdigest()


_INSERT = """
INSERT INTO {attestation} (workspace_id, url, result, kind, note, hand, key_prefix,
                           attester_id, lane_id, observed_at, observation, at)
VALUES (%(workspace)s, %(url)s, %(result)s, %(kind)s, %(note)s, %(observer)s, %(key_prefix)s,
        %(attester)s, %(lane)s, %(observed)s, %(observation)s, %(now)s)
ON CONFLICT DO NOTHING
RETURNING id
"""

# Evidence in scope for the new attestation: its workspace and URL, of an attempt in its lane
# (when it has one) and not of the attester's hand.
_IN_SCOPE = """
e.workspace_id = %(workspace)s AND e.url = %(url)s
AND EXISTS (
  SELECT 1 FROM {attempt} AS t WHERE t.id = e.attempt_id
  AND (CAST(%(lane)s AS bigint) IS NULL OR t.lane_id = %(lane)s)
  AND (CAST(%(attester)s AS bigint) IS NULL OR t.hand_id <> %(attester)s))
"""

# A fail: every piece in scope whose deciding attestation was observed before it goes back to
# what its finish said.
_REGRADE_FAIL = (
    """
UPDATE {evidence} AS e SET grade = e.observed_by, attestation_id = %(new)s
WHERE """
    + _IN_SCOPE
    + """
AND NOT EXISTS (
  SELECT 1 FROM {attestation} AS c
  WHERE c.id = e.attestation_id AND (c.observed_at, c.id) > (%(observed)s, %(new)s))
"""
)

# A pass backs one attempt: the first (by id) whose evidence of the URL in scope is not graded
# ci and whose deciding attestation was observed before this one. The backing is taken by this
# one conditional statement (and only while the attestation backs none) ...
_BACK = (
    """
UPDATE {attestation} SET backs_id = (
  SELECT e.attempt_id FROM {evidence} AS e
  LEFT JOIN {attestation} AS c ON c.id = e.attestation_id
  WHERE """
    + _IN_SCOPE
    + """
  AND e.grade <> 'ci' AND (c.id IS NULL OR (c.observed_at, c.id) < (%(observed)s, %(new)s))
  ORDER BY e.attempt_id LIMIT 1)
WHERE id = %(new)s AND backs_id IS NULL
"""
)

# ... and the evidence of the attempt it backs, only that attempt's, is graded by it.
_GRADE_BACKED = """
UPDATE {evidence} SET grade = 'ci', attestation_id = %(new)s
WHERE workspace_id = %(workspace)s AND url = %(url)s
AND attempt_id = (SELECT backs_id FROM {attestation} WHERE id = %(new)s)
"""


def _sql(template: str) -> str:
    return template.format(
        evidence=Evidence._meta.db_table,
        attempt=Attempt._meta.db_table,
        attestation=Attestation._meta.db_table,
    )


def attestation_observe(
    *,
    workspace_id: int,
    observer: str,
    attester_id: int | None,
    key_prefix: str,
    lane_id: int | None,
    url: str,
    result: str,
    kind: str = "",
    note: str = "",
    observed_at: datetime | None = None,
    refuse_own: bool = False,
) -> Observed:
    """An attestation by `observer` (a hand's name, or another observer the server trusts, such
    as a lane's GitHub integration, with `key_prefix` empty), confined to `lane_id` (None: the
    workspace), never grading the attempts of `attester_id`'s hand; and the regrading of the
    evidence with its URL in that scope, in one statement (the module's rules).

    An observation already recorded (the same URL, result, `observed_at` and scope: a replayed
    delivery, a retried POST that carries its observed_at) inserts nothing (ON CONFLICT DO
    NOTHING) and answers the first, `created` False. With `refuse_own`, evidence in scope with
    the URL that is `attester_id`'s own refuses it (`attest_own_evidence`)."""
    url = validate_evidence_url(url)
    if result not in RESULTS:
        raise ValidationFailed(
            f"result must be one of {', '.join(RESULTS)}",
            fields={"result": [f"One of: {', '.join(RESULTS)}."]},
        )
    kind = _validate_short_text(kind, field="kind", max_length=64, required=False)
    note = _validate_short_text(note, field="note", max_length=2000, required=False)
    if observed_at is not None and (
        not isinstance(observed_at, datetime) or observed_at.tzinfo is None
    ):
        raise ValidationFailed(
            "observed_at must be a time with its offset",
            fields={"observed_at": ["An ISO 8601 time with its offset."]},
        )
    with transaction.atomic():
        _lock_urls(workspace_id, [url])
        now = db_now()
        observed = now if observed_at is None else observed_at
        if observed > now + MAX_OBSERVED_AHEAD:
            raise ValidationFailed(
                f"observed_at {observed.isoformat()} is ahead of the server's clock "
                f"({now.isoformat()}) by more than {MAX_OBSERVED_AHEAD.total_seconds():.0f} s",
                fields={"observed_at": ["Not in the future."]},
            )
        if refuse_own and attester_id is not None:
            own = Evidence.objects.filter(
                workspace_id=workspace_id, url=url, attempt__hand_id=attester_id
            ).in_lane(lane_id)
            if own.exists():
                raise AttestOwnEvidence(
                    f"{url} is evidence of {observer}'s own attempt: a hand never attests its "
                    "own work (CI attests with a key of a hand of its own)",
                    url=url,
                )
        key = observation_key(lane_id=lane_id, url=url, result=result, observed_at=observed)
        adapt = connection.ops.adapt_datetimefield_value
        params = {
            "workspace": workspace_id,
            "url": url,
            "result": result,
            "kind": kind,
            "note": note,
            "observer": observer,
            "key_prefix": key_prefix,
            "attester": attester_id,
            "lane": lane_id,
            "observed": adapt(observed),
            "observation": key,
            "now": adapt(now),
        }
        with connection.cursor() as cursor:
            cursor.execute(_sql(_INSERT), params)
            inserted = cursor.fetchone()
            if inserted is None:
                first = Attestation.objects.select_related("lane").get(
                    workspace_id=workspace_id, observation=key
                )
                return Observed(first, 0, False)
            params["new"] = inserted[0]
            if result == AttestationResult.PASS:
                cursor.execute(_sql(_BACK), params)
                cursor.execute(_sql(_GRADE_BACKED), params)
            else:
                cursor.execute(_sql(_REGRADE_FAIL), params)
            graded = cursor.rowcount
        attestation = Attestation.objects.select_related("lane").get(pk=inserted[0])
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
                "observed_at": observed.isoformat(),
                "lane": attestation.lane.slug if attestation.lane else None,
                "backs": attestation.backs_id,
                "graded": graded,
            },
        )
    return Observed(attestation, graded, True)
