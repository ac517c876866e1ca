"""Finishing an attempt over REST, reading the evidence it left, and CI's attestations."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.api import paginated
from apikit.inputs import PAGE_PARAMS, StrictCharField, text_param, valid
from apikit.openapi import error_responses
from evidence.models import Attestation, Evidence
from evidence.services import (
    MAX_EVIDENCE_ITEMS,
    MAX_URL_LENGTH,
    OBSERVERS,
    RESULTS,
    attempt_finish,
    attestation_record,
)
from fleet import selectors
from fleet.api.attempts import TENURE_ERRORS
from fleet.api.inputs import fence_field
from fleet.api.presenters import attempt_json
from fleet.api.schemas import AttemptOut
from fleet.models import GRADE_ORDER
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
    summary = StrictCharField(max_length=10_000, required=False, allow_blank=True, default="")
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
    hand = serializers.CharField(help_text="The hand whose key attested (CI).")
    key_prefix = serializers.CharField()
    at = serializers.DateTimeField()


class EvidenceOut(serializers.Serializer):
    kind = serializers.CharField()
    url = serializers.CharField()
    note = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()
    grade = serializers.ChoiceField(
        choices=GRADE_ORDER,
        help_text="hand < wrapper < ci: ci while the URL's latest attestation passed, else "
        "observed_by.",
    )
    observed_by = serializers.ChoiceField(choices=OBSERVERS, help_text="What the finish said.")
    attestation = AttestationOut(
        allow_null=True, help_text="The URL's latest attestation, pass or fail, if any."
    )


class FinishedOut(AttemptOut):
    evidence = EvidenceOut(many=True)


def attestation_json(item: Attestation) -> dict[str, Any]:
    return {
        "id": item.pk,
        "url": item.url,
        "result": item.result,
        "kind": item.kind or None,
        "note": item.note or None,
        "hand": item.hand,
        "key_prefix": item.key_prefix,
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
    items = Evidence.objects.filter(attempt_id=attempt_id).select_related("attestation")
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
        "grade is in `missing` and in `grades_needed` and `grades_seen`); the tenure stays "
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
        attempt = selectors.attempt_get(
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


class AttestedOut(AttestationOut):
    graded = serializers.IntegerField(
        help_text="How many pieces of the workspace's evidence with this URL were regraded."
    )


class AttestationsApi(HandAPIView):
    """CI's word on a URL: a key with the `attest` scope says it observed a commit or pull
    request pass or fail."""

    required_scope = {"GET": (ATTEST, SUPERVISE), "POST": ATTEST}

    @extend_schema(
        tags=["ci"],
        request=AttestationIn,
        description="Record that CI observed `url` with `result`, and regrade every piece of "
        "the workspace's evidence with that URL: `ci` on a pass, back to what its finish said "
        "(`observed_by`) on a fail; the latest attestation of a URL decides. One posted before "
        "the finish counts for it too. Recorded with the key's hand and prefix, and as the event "
        "`attested`.",
        responses={201: AttestedOut, **error_responses("scope_denied", body=True)},
    )
    def post(self, request: Request) -> Response:
        data = valid(AttestationIn, request)
        attestation, graded = attestation_record(
            hand=self.hand,
            key=self.key,
            url=data["url"],
            result=data["result"],
            kind=data["kind"],
            note=data["note"],
        )
        return Response({**attestation_json(attestation), "graded": graded}, status=201)

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
        found = Attestation.objects.filter(workspace_id=self.workspace_id)
        url = text_param(request, "url", max_length=MAX_URL_LENGTH)
        if url:
            found = found.filter(url=url)
        return paginated(
            request, found.order_by("-id"), lambda rows: [attestation_json(a) for a in rows]
        )
