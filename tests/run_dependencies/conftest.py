"""Runs that wait for runs: a work package and a helper that makes runs through the API, as a
supervisor plans them, and a key limited to the package's lane (`alpha`)."""

from __future__ import annotations

from typing import Any

import pytest

from hands import services as hand_services
from tests.support.api import Api, mint


@pytest.fixture
def package(boss: Api, lane: Any) -> dict[str, Any]:
    response = boss.post("/lanes/rewalk/work-packages", {"title": "Release", "key": "release"})
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def plan(boss: Api, package: dict[str, Any]) -> Any:
    """`plan(title, **body)`: a run of the package, created by the supervisor's key."""

    def create(title: str, **body: Any) -> dict[str, Any]:
        response = boss.post(f"/work-packages/{package['id']}/runs", {"title": title, **body})
        assert response.status_code == 201, response.content
        return response.json()

    return create


@pytest.fixture
def alpha(workspace: Any, lane: Any) -> Api:
    """A key limited to lane rewalk (the package's), every scope."""
    hand, _ = hand_services.hand_create(workspace=workspace, name="alpha-hand", lane=lane)
    return Api(mint(hand, hand_services.ALL_SCOPES, lane=lane), hand)
