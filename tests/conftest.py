"""Shared fixtures, defined once: three actors (owner, teammate, outsider), a plan, the database
clock; the API's callers, the dashboard's people and the jobs' helpers (tests/support/)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.conf import settings

from fleet.models import Run
from fleet.plan import services as plan_services
from hands import services as hand_services
from hands.models import Hand, Workspace
from leases import clock
from tests.support import processes
from tests.support.api import anonymous, api_a, api_b, api_outsider, boss, run  # noqa: F401
from tests.support.jobs import claim, quiet_notifications, receiver  # noqa: F401
from tests.support.live import gc  # noqa: F401 - the live server, for agents' processes
from tests.support.people import (  # noqa: F401
    make_fleet,
    outsider_client,
    supervisor_client,
    viewer_client,
    workspace_admin_client,
)


def pytest_report_header(config: pytest.Config) -> list[str]:
    db = settings.DATABASES["default"]
    where = f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}"
    redis = settings.REDIS_URL or "none (embedded default)"
    return [f"Ground Control tests on PostgreSQL at {where}; Redis: {redis}"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold a slow test first. scripts/test hands out files in this order
    (`--dist loadfile --no-loadscope-reorder`), so a long file starts while there is other work
    to run beside it, instead of keeping one worker busy alone at the end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _stop_laptops() -> Iterator[None]:
    """The embedded PostgreSQL a laptop install's test started stops with the test."""
    yield
    processes.stop_laptops()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """A PostgreSQL test database of this process's own (test_<name>[_gw<n>]_<pid>), so that two
    test runs on one server (developers side by side, a long run beside CI, each with its
    workers) never drop each other's."""
    from pytest_django.fixtures import _set_suffix_to_test_databases

    _set_suffix_to_test_databases(suffix=str(os.getpid()))


@pytest.fixture
def frozen_clock() -> Iterator[datetime]:
    """The database clock as the engine sees it, frozen at a round instant; tests advance it."""
    start = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    clock.freeze(start)
    yield start
    clock.unfreeze()


@pytest.fixture(autouse=True)
def _reset_clock() -> Iterator[None]:
    yield
    clock.unfreeze()


@pytest.fixture
def workspace(db: None) -> Workspace:
    return hand_services.workspace_get_or_create(name="acme")


@pytest.fixture
def outsider_workspace(db: None) -> Workspace:
    return hand_services.workspace_get_or_create(name="elsewhere")


@pytest.fixture
def lane(workspace: Workspace):  # noqa: ANN201
    lane, _ = hand_services.lane_create(workspace=workspace, slug="rewalk", name="Rewalk")
    return lane


@pytest.fixture
def make_run(lane):  # noqa: ANN001, ANN201
    counter = iter(range(1_000_000))

    def make(**kwargs: object) -> Run:
        package, _ = plan_services.work_package_create(
            lane=lane, key=f"wp-{next(counter)}", title="Package"
        )
        options = {"title": "Run", "brief": "Do the thing", "slots": 2}
        options.update(kwargs)
        return plan_services.run_create(work_package=package, **options)

    return make


@pytest.fixture
def one_slot(make_run) -> Run:  # noqa: ANN001
    """A run of one slot whose finish needs a pull request, with a 100 s window and 60 s grace."""
    return make_run(
        slots=1, heartbeat_interval_s=100, grace_s=60, evidence_required=["pull_request"]
    )


@pytest.fixture
def owner(workspace: Workspace) -> Hand:
    return hand_services.hand_create(workspace=workspace, name="hand-a")[0]


@pytest.fixture
def teammate(workspace: Workspace) -> Hand:
    return hand_services.hand_create(workspace=workspace, name="hand-b")[0]


@pytest.fixture
def outsider(outsider_workspace: Workspace) -> Hand:
    return hand_services.hand_create(workspace=outsider_workspace, name="hand-a")[0]
