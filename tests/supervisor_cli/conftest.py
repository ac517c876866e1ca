"""A supervisor on the live server: a planner's key (plan and supervise), a worker's (work and
leases only), a key limited to lane `rewalk` and a second lane `docs`; each call sent through
both shells, `Client` and `AsyncClient` (`shells.py`), from the same test."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hands import services as hand_services
from hands.models import Hand, Lane, Workspace
from tests.supervisor_cli.shells import Shell, shell_for
from tests.support.live import Fleet, mint

SUPERVISOR = ("plan", "supervise")


@pytest.fixture
def docs(workspace: Workspace) -> Lane:
    lane, _ = hand_services.lane_create(workspace=workspace, slug="docs", name="Docs")
    return lane


@pytest.fixture
def planner_key(gc: Fleet, owner: Hand, lane: Lane) -> str:
    return mint(owner, SUPERVISOR)


@pytest.fixture
def lane_key(gc: Fleet, owner: Hand, lane: Lane) -> str:
    """A supervisor's key limited to lane rewalk."""
    return hand_services.key_issue(
        hand=owner, scopes=list(SUPERVISOR), actor="test", lane=lane
    ).plaintext


@pytest.fixture(params=["Client", "AsyncClient"])
def shell(request: pytest.FixtureRequest, gc: Fleet) -> Callable[[str], Shell]:
    """`shell(key)`: calls with `key` through one of the two shells (each test runs twice)."""
    return lambda key: shell_for(str(request.param), gc, key)


@pytest.fixture
def planner(shell: Callable[[str], Shell], planner_key: str) -> Shell:
    return shell(planner_key)


@pytest.fixture
def worker(shell: Callable[[str], Shell], gc: Fleet) -> Shell:
    """Hand a's work and leases key (`gc.key_a`), through the same shell."""
    return shell(gc.key_a)
