"""Finishing an attempt over REST, and reading the evidence it left."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apikit.inputs import StrictCharField, valid
from apikit.openapi import error_responses
from evidence.models import Evidence
from evidence.services import MAX_EVIDENCE_ITEMS, attempt_finish
from fleet import selectors
from fleet.api.attempts import TENURE_ERRORS
from fleet.api.inputs import fence_field
from fleet.api.presenters import attempt_json
from fleet.api.schemas import AttemptOut
from hands.views import READ_ATTEMPT, WORK, HandAPIView, name_field


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


class EvidenceOut(serializers.Serializer):
    kind = serializers.CharField()
    url = serializers.CharField()
    note = serializers.CharField(allow_null=True)
    at = serializers.DateTimeField()


class FinishedOut(AttemptOut):
    evidence = EvidenceOut(many=True)


def evidence_json(item: Evidence) -> dict[str, Any]:
    return {"kind": item.kind, "url": item.url, "note": item.note or None, "at": item.at}


class FinishApi(HandAPIView):
    """Finish the attempt with evidence."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=FinishIn,
        description="End the attempt as finished with its evidence (http/https links only). "
        "Refused with evidence_missing (and `missing`) unless every kind the run requires is "
        "present. A retried finish answers as the first did.",
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
            lane_id=self.lane_id,
        )
        items = Evidence.objects.filter(attempt_id=view.attempt.pk).order_by("pk")
        return Response({**attempt_json(view), "evidence": [evidence_json(e) for e in items]})


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
        items = Evidence.objects.filter(attempt=attempt).order_by("pk")
        return Response([evidence_json(e) for e in items])
