"""Hand calls on attempts (claim, brief, report, release) and the supervisor's view of them
(list, directive). One class per endpoint, thin: validate, call a service, present."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from apikit import concealing
from apikit.api import paginated
from apikit.inputs import PAGE_PARAMS, choice_param, valid
from apikit.openapi import error_responses
from apikit.reads import REPLICA_HEADERS, replica_list
from fleet.api.inputs import ClaimIn, DirectiveIn, ReleaseIn
from fleet.api.presenters import attempt_json, checkpoint_json
from fleet.api.records import int_param
from fleet.api.schemas import AttemptOut, BriefOut, ClaimOut
from fleet.attempts import selectors as attempt_selectors
from fleet.attempts import services as attempt_services
from fleet.attempts.checkpoints import checkpoint_inherited
from fleet.models import Attempt
from hands.views import READ_ATTEMPT, SUPERVISE, WORK, HandAPIView


def inherited_json(attempt: Attempt, lane_id: int | None) -> dict[str, Any]:
    """The checkpoint `attempt` inherits from an earlier attempt on its slot, as JSON."""
    return checkpoint_json(
        checkpoint_inherited(
            workspace_id=attempt.workspace_id,
            run_id=attempt.run_id,
            slot_id=attempt.slot_id,
            attempt_id=attempt.pk,
            lane_id=lane_id,
        )
    )


class ClaimApi(HandAPIView):
    """Claim the lowest open slot of the run (or `slot`): a new tenure, fence + 1. The answer
    carries the last checkpoint an earlier attempt on the slot reported."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=ClaimIn,
        responses={
            201: ClaimOut,
            **error_responses(
                "scope_denied",
                "not_found",
                "no_open_slot",
                "slot_taken",
                "run_closed",
                "capability_missing",
                "budget_reached",
                body=True,
            ),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        data = valid(ClaimIn, request)
        view = attempt_services.attempt_claim(
            hand=self.hand,
            run_id=run_id,
            process_id=data["process_id"],
            slot=data.get("slot"),
            lane_id=self.lane_id,
            key=self.key,
        )
        return Response(attempt_json(view) | inherited_json(view.attempt, self.lane_id), status=201)


class AttemptApi(HandAPIView):
    """One attempt with its computed state and the lease of its tenure."""

    required_scope = READ_ATTEMPT

    @extend_schema(
        tags=["hand"], responses={200: AttemptOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = attempt_selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        return Response(attempt_json(attempt_selectors.attempt_view(attempt)))


class BriefApi(HandAPIView):
    """What the attempt is for: the run's brief, its required evidence, package and lane, and
    the last checkpoint an earlier attempt on its slot reported."""

    required_scope = READ_ATTEMPT

    @extend_schema(
        tags=["hand"], responses={200: BriefOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, attempt_id: int) -> Response:
        attempt = attempt_selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        run, package = attempt.run, attempt.run.work_package
        return Response(
            {
                "attempt": attempt_json(attempt_selectors.attempt_view(attempt)),
                "run": {
                    "id": run.pk,
                    "title": run.title,
                    "brief": run.brief,
                    "evidence_required": run.evidence_required,
                    "evidence_grades": run.evidence_grades,
                },
                "work_package": {
                    "id": package.pk,
                    "title": package.title,
                    "key": package.key,
                    "external_ref": package.external_ref or None,
                },
                "lane": {"slug": attempt.lane.slug, "name": attempt.lane.name},
                **inherited_json(attempt, self.lane_id),
            }
        )


TENURE_ERRORS = ("scope_denied", "not_found", "not_holder", "lease_lost", "stale_fence")


class ReleaseApi(HandAPIView):
    """Give the slot back with a reason; it is open again at once."""

    required_scope = WORK

    @extend_schema(
        tags=["hand"],
        request=ReleaseIn,
        responses={
            200: AttemptOut,
            **error_responses(*TENURE_ERRORS, "process_mismatch", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(ReleaseIn, request)
        view = attempt_services.attempt_release(
            hand=self.hand,
            attempt_id=attempt_id,
            fence=data["fence"],
            process_id=data["process_id"],
            reason=data["reason"],
            lane_id=self.lane_id,
        )
        return Response(attempt_json(view))


class AttemptsApi(HandAPIView):
    """Every attempt of the workspace, newest first, by state, lane, hand and run."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        parameters=[
            OpenApiParameter("state", str, enum=attempt_selectors.ATTEMPT_STATES),
            OpenApiParameter("lane", str, description="A lane's slug."),
            OpenApiParameter("hand", str, description="A hand's name."),
            OpenApiParameter("run", int, description="A run's id."),
            OpenApiParameter(
                "idle", str, enum=["true", "false"], description="Only idle (or not idle) ones."
            ),
            *PAGE_PARAMS,
            *REPLICA_HEADERS,
        ],
        responses={
            200: AttemptOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    @replica_list
    def get(self, request: Request) -> Response:
        params = request.query_params
        attempts = attempt_selectors.attempts_list(
            workspace_id=self.workspace_id,
            state=choice_param(request, "state", attempt_selectors.ATTEMPT_STATES),
            lane_slug=params.get("lane", ""),
            hand_name=params.get("hand", ""),
            run_id=int_param(request, "run"),
            lane_id=self.lane_id,
            idle={"": None, "true": True, "false": False}[
                choice_param(request, "idle", ["true", "false"])
            ],
        )
        if concealing.unnamed(params.get("hand", "")):  # another lane's hand: nobody's name
            attempts = attempts.none()
        return paginated(
            request,
            attempts,
            lambda rows: [attempt_json(v) for v in attempt_selectors.attempt_views(rows)],
        )


class DirectiveApi(HandAPIView):
    """Set an attempt's directive: continue, pause or stop."""

    required_scope = SUPERVISE

    @extend_schema(
        tags=["supervisor"],
        request=DirectiveIn,
        description="continue, pause or stop: the hand reads it in its next report's answer.",
        responses={
            200: AttemptOut,
            **error_responses("scope_denied", "not_found", "lease_lost", body=True),
        },
    )
    def post(self, request: Request, attempt_id: int) -> Response:
        data = valid(DirectiveIn, request)
        # Looked up first so a lane-limited key cannot steer another lane's attempt.
        attempt_selectors.attempt_get(
            workspace_id=self.workspace_id, attempt_id=attempt_id, lane_id=self.lane_id
        )
        view = attempt_services.attempt_set_directive(
            workspace_id=self.workspace_id,
            attempt_id=attempt_id,
            directive=data["directive"],
            actor=self.hand.name,
        )
        return Response(attempt_json(view))
