"""Finishing an attempt over REST, reading the evidence it left, and CI's attestations."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.api import paginated
from apikit.inputs import PAGE_PARAMS, StrictCharField, text_param, valid
from apikit.openapi import error_responses
from evidence.models import Attestation, Evidence
from evidence.services import (
    MAX_EVIDENCE_ITEMS,
    MAX_SUMMARY_LENGTH,
    MAX_URL_LENGTH,
    OBSERVERS,
    RESULTS,
    attempt_finish,
    attestation_record,
)
from fleet.api.attempts import TENURE_ERRORS
from fleet.api.inputs import fence_field
from fleet.api.presenters import attempt_json
from fleet.api.schemas import AttemptOut
from fleet.attempts import selectors as attempt_selectors
from fleet.models import GRADE_ORDER, Attempt
from hands.views import ATTEST, READ_ATTEMPT, SUPERVISE, WORK, HandAPIView, name_field


class EvidenceIn(serializers.Serializer):
    kind = StrictCharField(max_length=64, help_text="e.g. pull_request, ci_run, commit.")
    url = StrictCharField(max_length=2000, help_text="An http or https URL.")
    note = StrictCharField(max_length=2000, required=False, allow_blank=True)


class FinishIn(serializers.Serializer):
    fence = fence_field()
    process_id = name_field()
    evidence = serializers.ListField(
        child=EvidenceIn(), required=False, default=list, max_length=MAX_EVIDENCE_ITEMS
    )
    summary = StrictCharField(
        max_length=MAX_SUMMARY_LENGTH, required=False, allow_blank=True, default=""
    )
    observed_by = serializers.ChoiceField(
        choices=OBSERVERS,
        required=False,
        default="hand",
        help_text="Who saw the evidence: hand (its word) or wrapper (`gctl run` saw the command "
        "exit 0 and read what it wrote; the client's word, which the server cannot check). "
        "`ci` is never sent: it comes from an attestation.",
    )


class AttestationOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    result = serializers.ChoiceField(choices=RESULTS)
    kind = serializers.CharField(allow_null=True)
    note = serializers.CharField(allow_null=True)
    hand = serializers.CharField(
        allow_null=True,
        help_text="The hand whose key attested (CI), or github-integration-<id>. "
        f"{concealing.CONCEALED}",
    )
    key_prefix = serializers.CharField(
        allow_null=True, help_text="Empty for a GitHub integration's; null with `hand`."
    )
    lane = serializers.CharField(
        allow_null=True,
        help_text="The lane whose evidence it grades (a lane-limited key's, an integration's); "
        "null: the workspace's.",
    )
    observed_at = serializers.DateTimeField(
        help_text="When CI observed it (a pull request's merged_at, the observed_at posted, or "
        "its arrival): a URL's attestations are ordered by it, never by arrival alone."
    )
    backs = serializers.IntegerField(
        allow_null=True,
        help_text="The one attempt whose finish this pass backs (graded ci by it), if any; "
        "null to a lane-limited key when that attempt is another lane's.",
    )
    at = serializers.DateTimeField(help_text="When it arrived.")


class EvidenceOut(serializers.Serializer):
    kind = serializers.CharField()
    url = serializers.CharField()
    note = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()
    grade = serializers.ChoiceField(
        choices=GRADE_ORDER,
        help_text="hand < wrapper < ci: ci while a pass that backs this attempt is the URL's "
        "latest attestation in scope for it, else observed_by.",
    )
    observed_by = serializers.ChoiceField(choices=OBSERVERS, help_text="What the finish said.")
    attestation = AttestationOut(
        allow_null=True,
        help_text="The attestation that decided its grade: the pass that backs its attempt, "
        "else the URL's latest fail in scope, if any.",
    )


class FinishedOut(AttemptOut):
    evidence = EvidenceOut(many=True)


def attestation_json(
    item: Attestation, *, backs_shown: frozenset[int] | None = None
) -> dict[str, Any]:
    """`backs_shown`: the backed attempts the caller may read (None: all of them)."""
    backs = item.backs_id
    if backs is not None and backs_shown is not None and backs not in backs_shown:
        backs = None
    return {
        "id": item.pk,
        "url": item.url,
        "result": item.result,
        "kind": item.kind or None,
        "note": item.note or None,
        "hand": item.hand,
        "key_prefix": item.key_prefix,
        "lane": item.lane.slug if item.lane_id else None,
        "observed_at": item.observed_at,
        "backs": backs,
        "at": item.at,
    }


def evidence_json(item: Evidence) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "url": item.url,
        "note": item.note or None,
        "at": item.at,
        "grade": item.grade,
        "observed_by": item.observed_by,
        "attestation": attestation_json(item.attestation) if item.attestation else None,
    }


def _evidence_of(attempt_id: int) -> list[dict[str, Any]]:
    items = Evidence.objects.filter(attempt_id=attempt_id).select_related("attestation__lane")
    return [evidence_json(e) for e in items.order_by("pk")]


class FinishApi(HandAPIView):
    """Finish the attempt with evidence."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=FinishIn,
        description="End the attempt as finished with its evidence (http/https links only). "
        "Refused with evidence_missing (and `missing`) unless every kind the run requires is "
        "present at the grade the run requires of it (`evidence_grades`; a kind below its "
        "grade is in `missing` and in `grades_needed` and `grades_seen`, and a URL whose "
        "passing attestation backs another attempt's finish already in "
        "`backing_other_attempts`: one attestation backs one attempt); the tenure stays "
        "held, so retry once CI has attested. A retried finish answers as the first did.",
        responses={
            200: FinishedOut,
            **error_responses(*TENURE_ERRORS, "process_mismatch", "evidence_missing", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(FinishIn, request)
        view = attempt_finish(
            hand=self.hand,
            attempt_id=attempt_id,
            fence=data["fence"],
            process_id=data["process_id"],
            evidence=[dict(item) for item in data["evidence"]],
            summary=data["summary"],
            observed_by=data["observed_by"],
            lane_id=self.lane_id,
        )
        return Response({**attempt_json(view), "evidence": _evidence_of(view.attempt.pk)})


class EvidenceListApi(HandAPIView):
    """The evidence a finished attempt left."""

    required_scope = READ_ATTEMPT

    @extend_schema(
        tags=["hand"],
        responses={
            200: EvidenceOut(many=True),
            **error_responses("scope_denied", "not_found"),
        },
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = attempt_selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        return Response(_evidence_of(attempt.pk))


class AttestationIn(serializers.Serializer):
    url = StrictCharField(max_length=MAX_URL_LENGTH, help_text="A commit or pull request URL.")
    result = serializers.ChoiceField(choices=RESULTS)
    kind = StrictCharField(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="What CI took the URL for (commit, pull_request): recorded, not a filter.",
    )
    note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")
    observed_at = serializers.DateTimeField(
        required=False,
        help_text="When CI observed the result (default: now). Attestations of a URL are "
        "ordered by it; at most 5 minutes ahead of the server's clock.",
    )


class AttestedOut(AttestationOut):
    graded = serializers.IntegerField(
        help_text="How many pieces of evidence with this URL it regraded."
    )
    duplicate = serializers.BooleanField(
        help_text="The same observation (URL, result, observed_at, lane) was recorded already: "
        "this is that attestation, and nothing changed (200)."
    )


class AttestationsApi(HandAPIView):
    """CI's word on a URL: a key with the `attest` scope says it observed a commit or pull
    request pass or fail."""

    required_scope = {"GET": (ATTEST, SUPERVISE), "POST": ATTEST}

    @extend_schema(
        tags=["ci"],
        request=AttestationIn,
        description="Record that CI observed `url` with `result` at `observed_at` (default: "
        "now), and regrade the evidence with that URL (of the key's lane when the key is "
        "lane-limited, else of the workspace): a pass grades one attempt's evidence `ci` (the "
        "attempt it backs; another attempt citing the URL needs an attestation of its own), a "
        "fail puts every piece back to what its finish said (`observed_by`). Attestations of a "
        "URL are ordered by `observed_at`, so one observed before a later fail changes nothing. "
        "One posted before the finish counts for it too. The same observation again answers "
        "200 with the first and `duplicate: true`. Refused `attest_own_evidence` when evidence "
        "with the URL is the key's own hand's. Recorded with the key's hand and prefix, and as "
        "the event `attested`.",
        responses={
            200: AttestedOut,
            201: AttestedOut,
            **error_responses("scope_denied", "attest_own_evidence", body=True),
        },
    )
    def post(self, request: Request) -> Response:
        data = valid(AttestationIn, request)
        observed = attestation_record(
            hand=self.hand,
            key=self.key,
            url=data["url"],
            result=data["result"],
            kind=data["kind"],
            note=data["note"],
            observed_at=data.get("observed_at"),
        )
        body = {
            **attestation_json(observed.attestation),
            "graded": observed.graded,
            "duplicate": not observed.created,
        }
        return Response(body, status=201 if observed.created else 200)

    @extend_schema(
        tags=["ci"],
        parameters=[
            OpenApiParameter("url", str, description="Only the attestations of this URL."),
            *PAGE_PARAMS,
        ],
        responses={
            200: AttestationOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        found = Attestation.objects.filter(workspace_id=self.workspace_id).select_related("lane")
        if self.lane_id is not None:
            # A lane-limited key sees what grades its lane: its lane's and the workspace's.
            found = found.filter(Q(lane__isnull=True) | Q(lane_id=self.lane_id))
        url = text_param(request, "url", max_length=MAX_URL_LENGTH)
        if url:
            found = found.filter(url=url)
        return paginated(
            request,
            found.order_by("-id"),
            lambda rows: attestations_json(rows, lane_id=self.lane_id),
        )


def attestations_json(rows: list[Attestation], *, lane_id: int | None) -> list[dict[str, Any]]:
    shown = backed_in_lane(rows, lane_id=lane_id)
    return [attestation_json(a, backs_shown=shown) for a in rows]


def backed_in_lane(rows: list[Attestation], *, lane_id: int | None) -> frozenset[int] | None:
    """The attempts `rows` back that a lane-limited caller (`lane_id`) may read: its lane's. A
    workspace's attestation may back an attempt of any lane, and another lane's attempt is not
    found to it, so `backs` reads null there (None: every attempt may be read)."""
    if lane_id is None:
        return None
    backed = {a.backs_id for a in rows if a.backs_id is not None}
    if not backed:
        return frozenset()
    mine = Attempt.objects.filter(pk__in=backed).in_lane(lane_id).values_list("pk", flat=True)
    return frozenset(mine)
