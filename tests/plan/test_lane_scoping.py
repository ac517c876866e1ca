"""Lane scoping is one rule (`hands.scoping.InLane`): every model a lane limits says how its rows
reach their lane and narrows with `in_lane`, which hands a lane-limited caller its lane's rows
only and a workspace-wide caller all of them."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps

from fleet.models import Run, WorkPackage
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand, Lane, Workspace
from hands.scoping import InLane

pytestmark = pytest.mark.django_db

# Models with a lane that are reached only through it (their URLs sit under /lanes/{slug}/, the
# lane found by `hands.selectors.lane_get`, itself in_lane), or by a rule of their own: an
# attestation a lane-limited key sees is its lane's or the workspace's (evidence/api.py).
THROUGH_THEIR_LANE = {"Schedule", "GitHubIntegration", "Attestation"}


def test_every_model_with_a_lane_is_scoped_by_in_lane() -> None:
    unscoped = []
    for model in apps.get_models():
        has_lane = any(
            field.concrete and getattr(field, "related_model", None) is Lane
            for field in model._meta.get_fields()
        )
        if not has_lane or model.__name__ in THROUGH_THEIR_LANE:
            continue
        if not isinstance(model._default_manager.all(), InLane) or not hasattr(model, "LANE"):
            unscoped.append(model.__name__)
    assert unscoped == []


def _lanes(workspace: Workspace) -> tuple[Lane, Lane]:
    first, _ = hand_services.lane_create(workspace=workspace, slug="first")
    second, _ = hand_services.lane_create(workspace=workspace, slug="second")
    return first, second


def _run_in(lane: Lane) -> Run:
    package, _ = plan_services.work_package_create(lane=lane, key=f"wp-{lane.slug}", title="P")
    return plan_services.run_create(work_package=package, title="R", brief="b", slots=1)


@pytest.mark.parametrize(
    ("model", "make"),
    [
        (Lane, lambda lane: lane),
        (
            Hand,
            lambda lane: hand_services.hand_create(
                workspace=lane.workspace, name=f"h-{lane.slug}", lane=lane
            )[0],
        ),
        (WorkPackage, lambda lane: _run_in(lane).work_package),
        (Run, _run_in),  # reaches its lane through its work package
    ],
)
def test_in_lane_keeps_a_lanes_rows_and_a_workspace_wide_caller_sees_all(
    workspace: Workspace, model: Any, make: Any
) -> None:
    first, second = _lanes(workspace)
    mine, theirs = make(first), make(second)
    rows = model.objects.filter(workspace=workspace)
    assert list(rows.in_lane(first.pk)) == [mine]
    assert list(rows.in_lane(second.pk)) == [theirs]
    assert set(rows.in_lane(None)) == {mine, theirs}
