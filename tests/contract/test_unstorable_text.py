"""Text PostgreSQL cannot store (a NUL, a lone surrogate) wherever a caller can put it: a cookie's
quoted value, a report's details, the input an error quotes. Each is refused or dropped before it
reaches the database, never answered 500.

- A cookie's quoted value may spell a NUL as `\\000`, which Django's cookie parser unquotes: a
  session id holding one reached PostgreSQL and every page answered 500. Such a cookie is
  dropped, as if never sent.
- A report's `details` holding a NUL or a lone surrogate (in a key or a string) reached jsonb,
  which refuses both: now a 400 naming `details`.
- An error that quotes what the caller sent (DRF's `"x" is not a valid choice.`) with a lone
  surrogate could be neither encoded as UTF-8 nor stored: an error's message and fields now
  carry U+FFFD in place of a lone surrogate or a NUL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from hands import services as hand_services
from hands.models import Role
from leases.models import Event, Refusal
from tests.support.api import API, Api, error_of

pytestmark = [pytest.mark.hostile, pytest.mark.django_db]

# --- A NUL in a cookie -------------------------------------------------------------------------

NUL_SESSION = 'sessionid="abcdefghijklmnop\\000"'


def test_it_answers_the_pages_when_the_session_cookie_holds_a_nul(workspace) -> None:  # noqa: ANN001
    client = Client(raise_request_exception=False)
    board = client.get("/", HTTP_COOKIE=NUL_SESSION)
    assert board.status_code == 302 and board["Location"].startswith("/login/")
    assert client.get("/login/", HTTP_COOKIE=NUL_SESSION).status_code == 200
    assert client.get("/admin/", HTTP_COOKIE=NUL_SESSION).status_code == 302


def test_a_user_with_such_a_cookie_can_still_log_in(workspace) -> None:  # noqa: ANN001
    user = get_user_model().objects.create_user(username="ada", password="pw-ada-long-enough")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client(raise_request_exception=False)
    client.cookies.load(NUL_SESSION)
    logged_in = client.post("/login/", {"username": "ada", "password": "pw-ada-long-enough"})
    assert logged_in.status_code == 302, logged_in.content
    assert client.get("/").status_code == 200


# --- What jsonb cannot hold, in a report's details ---------------------------------------------
# PostgreSQL's jsonb refuses a NUL (`\u0000`) and a lone surrogate (`\ud800`) anywhere in a
# document, key or value: a report carrying one in its details answered 500.

UNSTORABLE = [
    '{"a": "\\ud800"}',
    '{"\\udc00": 1}',
    '{"a": ["x", {"b": "\\u0000"}]}',
    '{"a\\u0000": 1}',
]


@pytest.mark.parametrize("details", UNSTORABLE)
def test_it_refuses_details_that_jsonb_cannot_hold(api_a: Api, run: Any, details: str) -> None:
    claimed = api_a.post(f"/runs/{run.pk}/claim", {"process_id": "p"}).json()
    api = api_a
    before = Event.objects.count()
    body = (
        f'{{"fence": {claimed["fence"]}, "kind": "progress", "process_id": "p", '
        f'"message": "m", "details": {details}}}'
    )
    response = api.client.post(
        f"{API}/attempts/{claimed['id']}/reports",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.key}"},
    )
    error = error_of(response, 400, "validation_error")
    assert list(error["fields"]) == ["details"], error
    assert Event.objects.count() == before


# --- An error quoting a lone surrogate ---------------------------------------------------------


@pytest.mark.parametrize("bad", ["x\ud800y", "x\u0000y", "\udfff"])
def test_an_error_quoting_what_cannot_be_encoded_answers_400_and_is_recorded(
    boss: Api,
    api_a: Api,
    run,
    bad: str,  # noqa: ANN001
) -> None:
    claim = api_a.post(f"/runs/{run.id}/claim", {"process_id": "p:1"})
    assert claim.status_code == 201, claim.content
    attempt = claim.json()["id"]
    # json.dumps keeps the lone surrogate as the escape a hostile client sends.
    answer = boss.client.post(
        f"{API}/attempts/{attempt}/directive",
        data=json.dumps({"directive": bad}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {boss.key}"},
    )
    error = error_of(answer, 400, "validation_error")
    assert "\ufffd" in error["fields"]["directive"][0]
    recorded = Refusal.objects.get(code="validation_error")
    assert "\ufffd" in recorded.details["fields"]["directive"][0]
