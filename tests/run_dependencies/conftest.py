"""Runs that wait for runs: a work package and a helper that makes runs through the API, as a
supervisor plans them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import Api


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
