"""The API's callers (tests/support/api.py) for the schedules' tests, and a GitHub integration
of the fixtures' repository in the lane `rewalk`."""

from typing import Any

import pytest

from tests.support.api import Api

REPOSITORY = "Codertocat/Hello-World"  # tests/fixtures/github's repository.full_name


@pytest.fixture
def integration(boss: Api, lane) -> dict[str, Any]:  # noqa: ANN001, F811
    response = boss.post("/lanes/rewalk/github-integrations", {"repository": REPOSITORY})
    assert response.status_code == 201, response.content
    return response.json()
