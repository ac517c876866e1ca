"""The board answers while Redis is down (issue 30, item 9): no page needs the cache (the board's
chart is drawn from the record), so with the cache pointed at a port nothing listens on, every
page answers 200 (the board, filtered or not, its HTMX poll, the chart and the rest), an action
goes through, and the API holds as it did.

The one use of the cache that refuses instead is the login throttle's: with its store out of
reach a try cannot be counted, so the login form answers 503 (never 500) without checking the
password (dashboard/login_throttle.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from redis.exceptions import RedisError

from fleet.attempts import services as attempt_services
from fleet.attempts.services import AttemptView as Claimed
from hands.models import Hand, Workspace
from tests.support.api import Api, mint

pytestmark = pytest.mark.django_db

# Nothing listens on port 1: every connection is refused at once.
UNREACHABLE = {
    "default": {"BACKEND": "apikit.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
}
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def redis_down() -> Iterator[None]:
    with override_settings(CACHES=UNREACHABLE):
        with pytest.raises(RedisError):
            cache.get("anything")  # really unreachable: the pages must do without it
        yield


@pytest.fixture
def attempt(owner: Hand, make_run) -> Claimed:  # noqa: ANN001
    return attempt_services.attempt_claim(hand=owner, run_id=make_run().pk, process_id="host:1")


def pages_of(attempt: Claimed) -> list[str]:
    record = attempt.attempt
    return [
        "/",
        "/?lane=rewalk",
        "/?state=live",
        "/?hand=hand-a",
        "/chart/",
        "/board/handoffs/",
        "/lanes/",
        "/lanes/rewalk/",
        f"/work-packages/{record.run.work_package_id}/",
        f"/runs/{record.run_id}/",
        "/hands/",
        f"/hands/{record.hand_id}/",
        f"/hands/{record.hand_id}/keys/new/",
        "/leases/",
        "/pools/",
        "/refusals/",
        "/events/",
        "/friction/",
        "/friction/export.json",
        "/members/",
    ]


def test_every_page_answers_while_the_cache_is_unreachable(
    redis_down: None, workspace_admin_client: Client, attempt: Claimed
) -> None:
    for url in pages_of(attempt):
        response = workspace_admin_client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    board = workspace_admin_client.get("/").content.decode()
    assert "Fleet board" in board and "hand-a" in board
    assert workspace_admin_client.get("/?lane=rewalk", **HTMX).status_code == 200
    assert workspace_admin_client.get("/", **HTMX).status_code == 200


def test_an_action_goes_through_while_the_cache_is_unreachable(
    redis_down: None, workspace_admin_client: Client, attempt: Claimed
) -> None:
    record = attempt.attempt
    paused = workspace_admin_client.post(
        f"/attempts/{record.pk}/directive/", {"directive": "pause"}
    )
    assert paused.status_code in (200, 302), paused.status_code
    record.refresh_from_db()
    assert record.directive == "pause"


def test_the_api_holds_while_the_cache_is_unreachable(redis_down: None, owner: Hand) -> None:
    api = Api(mint(owner, ["leases"]), owner)
    assert api.get("/me").status_code == 200
    taken = api.post("/leases/acquire", {"resource": "src/", "ttl_s": 30, "process_id": "p"})
    assert taken.status_code == 201, taken.content


def test_the_login_form_refuses_plainly_while_its_store_is_unreachable(
    redis_down: None, workspace: Workspace, client: Client
) -> None:
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "ada", "password": "whatever"})
    assert response.status_code == 503
