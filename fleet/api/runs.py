"""The plan over REST: work packages, runs and their slots (list, add, reopen), and the runs a
`work` key can find work in."""

from __future__ import annotations

import json
from base64 import urlsafe_b64decode, urlsafe_b64encode
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from apikit.api import NewestFirst, paginated
from apikit.errors import ValidationFailed
from apikit.inputs import PAGE_PARAMS, choice_param, created_or_found, text_param, valid
from apikit.openapi import error_responses
from fleet.api.inputs import (
    RUN_STATES,
    SLOT_STATES,
    RunCreateIn,
    RunPatchIn,
    SlotReopenIn,
    SlotsAddIn,
    WorkPackageIn,
)
from fleet.api.presenters import run_json, runs_json, slot_json, work_package_json
from fleet.api.schemas import RunOut, SlotOut, WorkPackageOut
from fleet.models import Run, WorkPackage
from fleet.plan import selectors as plan_selectors
from fleet.plan import services as plan_services
from hands import selectors as hand_selectors
from hands.idempotency import idempotent
from hands.models import Lane
from hands.views import (
    CREATED_OR_FOUND,
    IDEMPOTENCY_PARAMS,
    MAX_NAME,
    PLAN,
    PLAN_READ,
    READ_ATTEMPT,
    SUPERVISE,
    WORK,
    HandAPIView,
)

# `GET /runs?ready=`: true is the ready queue; false, or absent, every run as before.
READY_CHOICES = ["true", "false"]


class SlotsApi(HandAPIView):
    """A run's slots: open (free, or its holder lost), held, or done (finished: never handed
    out again unless a supervisor reopens it), with holder and fence; POST adds slots."""

    required_scope = {"GET": READ_ATTEMPT, "POST": PLAN}

    @extend_schema(
        tags=["hand"],
        parameters=[OpenApiParameter("state", str, enum=SLOT_STATES)],
        responses={
            200: SlotOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, run_id: int) -> Response:
        state = choice_param(request, "state", SLOT_STATES)
        run = plan_selectors.run_get(
            workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id
        )
        return Response(
            [slot_json(view) for view in plan_selectors.run_slots(run=run, state=state)]
        )

    @extend_schema(
        tags=["plan"],
        request=SlotsAddIn,
        description="Add open slots to a run that is open or done (a done run is open again); "
        "recorded as the event slots_added with the reason.",
        responses={
            201: RunOut,
            **error_responses("scope_denied", "not_found", "run_closed", body=True),
        },
    )
    def post(self, request: Request, run_id: int) -> Response:
        data = valid(SlotsAddIn, request)
        run = plan_services.run_add_slots(
            workspace_id=self.workspace_id,
            run_id=run_id,
            count=data["count"],
            reason=data["reason"],
            actor=self.hand.name,
            lane_id=self.lane_id,
        )
        return Response(runs_json([run])[0], status=201)


class SlotReopenApi(HandAPIView):
    """Reopen a done slot: claimable again at the next fence; a done run is open again."""

    required_scope = PLAN

    @extend_schema(
        tags=["plan"],
        request=SlotReopenIn,
        description="Recorded as the event slot_reopened with the reason. The finished "
        "attempt and its evidence stay on record.",
        responses={
            200: SlotOut,
            **error_responses("scope_denied", "not_found", "slot_not_done", body=True),
        },
    )
    def post(self, request: Request, run_id: int, index: int) -> Response:
        data = valid(SlotReopenIn, request)
        view = plan_services.slot_reopen(
            workspace_id=self.workspace_id,
            run_id=run_id,
            index=index,
            reason=data["reason"],
            actor=self.hand.name,
            lane_id=self.lane_id,
        )
        return Response(slot_json(view))


class RunsIndexApi(HandAPIView):
    """The workspace's runs (a lane-limited key: its lane's), newest first, with how their
    slots stand: how a hand finds work to claim."""

    required_scope = (WORK, PLAN, SUPERVISE)

    @extend_schema(
        tags=["hand"],
        parameters=[
            OpenApiParameter(
                "state", str, enum=RUN_STATES, description="open: runs that take claims."
            ),
            OpenApiParameter("lane", str, description="A lane's slug."),
            OpenApiParameter(
                "ready",
                str,
                enum=READY_CHOICES,
                description="true: the ready queue: runs a hand could claim now (open, of an "
                "open work package, waiting for no run, with an open slot), by priority (0 "
                "first), then age (oldest first), then id.",
            ),
            *PAGE_PARAMS,
        ],
        responses={
            200: RunOut(many=True),
            **error_responses("scope_denied", "validation_error"),
        },
    )
    def get(self, request: Request) -> Response:
        ready = choice_param(request, "ready", READY_CHOICES) == "true"
        return (ready_page if ready else paginated)(
            request,
            plan_selectors.runs_of_workspace(
                workspace_id=self.workspace_id,
                state=choice_param(request, "state", RUN_STATES),
                lane_slug=text_param(request, "lane", max_length=MAX_NAME),
                lane_id=self.lane_id,
                # A worker's key finds only the runs its hand can take; a planner's or a
                # supervisor's sees every run (each says the capabilities it needs).
                fitting=(
                    None
                    if PLAN in self.key.scopes or SUPERVISE in self.key.scopes
                    else list(self.hand.capabilities)
                ),
                ready=ready,
            ),
            runs_json,
        )


def ready_page(
    request: Request, queryset: QuerySet[Run], render: Callable[[list[Run]], list[Any]]
) -> Response:
    """One page of the ready queue (`plan_selectors.ready_queue`, ordered by priority, age and
    id), its cursor the last row's place in that order: a page costs one indexed query however
    deep it is (as `paginated`'s, whose cursor is a primary key), and the same size limits."""
    size = NewestFirst().get_page_size(request)
    after = _ready_position(request.query_params.get("cursor"))
    if after is not None:
        priority, created_at, pk = after
        queryset = queryset.filter(
            Q(priority__gt=priority)
            | Q(priority=priority, created_at__gt=created_at)
            | Q(priority=priority, created_at=created_at, pk__gt=pk)
        )
    rows = list(queryset[: size + 1])
    response = Response(render(rows[:size]))
    if len(rows) > size:
        last = rows[size - 1]
        cursor = urlsafe_b64encode(
            json.dumps([last.priority, last.created_at.isoformat(), last.pk]).encode()
        ).decode()
        next_url = replace_query_param(request.build_absolute_uri(), "cursor", cursor)
        response["Link"] = f'<{next_url}>; rel="next"'
        response["X-Next-Cursor"] = cursor
    return response


def _ready_position(cursor: str | None) -> tuple[int, datetime, int] | None:
    """The place a ready queue's cursor names, or None for the first page; anything else is a
    cursor this server did not give out."""
    if cursor is None or cursor == "":
        return None
    try:
        priority, created_at, pk = json.loads(urlsafe_b64decode(cursor.encode("ascii")))
        at = datetime.fromisoformat(created_at)
        if not all(type(n) is int and 0 <= n < 2**63 for n in (priority, pk)) or not at.tzinfo:
            raise ValueError(cursor)
    except (ValueError, TypeError, UnicodeError):
        raise ValidationFailed(
            "cursor is not one this server gave out", fields={"cursor": ["An opaque cursor."]}
        ) from None
    return priority, at, pk


class WorkPackagesApi(HandAPIView):
    """A lane's work packages (idempotent on their key)."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    def _lane(self, slug: str) -> Lane:
        return hand_selectors.lane_get(
            workspace_id=self.workspace_id, slug=slug, lane_id=self.lane_id
        )

    @extend_schema(
        tags=["plan"],
        parameters=PAGE_PARAMS,
        responses={
            200: WorkPackageOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, slug: str) -> Response:
        return paginated(
            request,
            plan_selectors.work_packages_list(lane=self._lane(slug)),
            lambda rows: [work_package_json(x) for x in rows],
        )

    @extend_schema(
        tags=["plan"],
        request=WorkPackageIn,
        parameters=IDEMPOTENCY_PARAMS,
        description="Idempotent on the package's key in the lane: " + CREATED_OR_FOUND,
        responses={
            201: WorkPackageOut,
            200: WorkPackageOut,
            **error_responses("scope_denied", "not_found", "idempotency_conflict", body=True),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        data = valid(WorkPackageIn, request)
        lane = self._lane(slug)

        def create() -> Response:
            package, created = plan_services.work_package_create(
                lane=lane,
                key=data["key"],
                title=data["title"],
                external_ref=data.get("external_ref") or "",
            )
            return Response(work_package_json(package), status=created_or_found(created))

        return idempotent(request, create)


class RunsApi(HandAPIView):
    """A work package's runs, each with its brief, required evidence and slots."""

    required_scope = {"GET": PLAN_READ, "POST": PLAN}

    def _package(self, work_package_id: int) -> WorkPackage:
        return plan_selectors.work_package_get(
            workspace_id=self.workspace_id, work_package_id=work_package_id, lane_id=self.lane_id
        )

    @extend_schema(
        tags=["plan"],
        parameters=PAGE_PARAMS,
        responses={
            200: RunOut(many=True),
            **error_responses("scope_denied", "not_found", "validation_error"),
        },
    )
    def get(self, request: Request, work_package_id: int) -> Response:
        return paginated(
            request,
            plan_selectors.runs_list(work_package=self._package(work_package_id)),
            lambda rows: runs_json(rows, counted=False),
        )

    @extend_schema(
        tags=["plan"],
        request=RunCreateIn,
        parameters=IDEMPOTENCY_PARAMS,
        responses={
            201: RunOut,
            **error_responses(
                "scope_denied", "not_found", "run_closed", "idempotency_conflict", body=True
            ),
        },
    )
    def post(self, request: Request, work_package_id: int) -> Response:
        data = valid(RunCreateIn, request)
        package = self._package(work_package_id)

        def create() -> Response:
            run = plan_services.run_create(work_package=package, lane_id=self.lane_id, **data)
            return Response(run_json(run), status=201)

        return idempotent(request, create)


class RunApi(HandAPIView):
    """One run; PATCH changes it (its state, capabilities, idle settings, priority, the runs it
    waits for): one change, all of it or nothing (`plan_services.run_update`)."""

    required_scope = {"GET": (PLAN, SUPERVISE, WORK), "PATCH": PLAN}

    @extend_schema(
        tags=["plan"], responses={200: RunOut, **error_responses("scope_denied", "not_found")}
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = plan_selectors.run_get(
            workspace_id=self.workspace_id, run_id=run_id, lane_id=self.lane_id
        )
        return Response(run_json(run))

    @extend_schema(
        tags=["plan"],
        request=RunPatchIn,
        description="Close a run (it takes no more claims; its attempts go on) or reopen it; "
        "set the capabilities a hand needs to claim its slots; set its progress timeout and "
        "idle directive; set its priority and the runs it waits for. One change: refused for "
        "any field (`validation_error`, or `dependency_cycle` for a change that would close a "
        "cycle, naming it), it writes none of them. A change of any field but the state that "
        "changes something writes one run_changed event (`data.changed`: each field's `from` "
        "and `to`).",
        responses={
            200: RunOut,
            **error_responses("scope_denied", "not_found", "dependency_cycle", body=True),
        },
    )
    def patch(self, request: Request, run_id: int) -> Response:
        data = valid(RunPatchIn, request)
        run = plan_services.run_update(
            workspace_id=self.workspace_id,
            run_id=run_id,
            actor=self.hand.name,
            lane_id=self.lane_id,
            **data,
        )
        return Response(
            run_json(plan_selectors.run_get(workspace_id=self.workspace_id, run_id=run.pk))
        )
