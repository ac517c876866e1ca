"""The pages' middleware (groundcontrol/middleware.py): skipped on the API's paths, kept on every
page, the Content-Security-Policy built once is the one django-csp would build, and the static
files found once per process."""

from __future__ import annotations

from unittest import mock

import pytest
from csp.constants import HEADER
from csp.decorators import csp_update
from csp.utils import build_policy
from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.test import Client, RequestFactory, override_settings

from groundcontrol import middleware
from hands import services as hand_services


@pytest.fixture
def key(workspace) -> str:  # noqa: ANN001
    hand = hand_services.hand_create(workspace=workspace, name="hand-a")[0]
    return hand_services.key_issue(hand=hand, scopes=["work"], actor="test").plaintext


@pytest.mark.django_db
def test_an_api_answer_reads_no_session_and_sets_no_cookie(key: str) -> None:
    user = get_user_model().objects.create_user(username="someone", password="pw-long-enough")
    client = Client()
    client.force_login(user)  # a signed-in browser calling the API with a key
    response = client.get("/api/v1/me", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    assert not response.cookies
    # No page middleware ran: no messages or htmx details on the request, its session never
    # loaded, and its user is the key's hand (set by DRF's authentication), never the person.
    request = response.wsgi_request
    assert not request.session.accessed
    assert not hasattr(request, "_messages") and not hasattr(request, "htmx")
    assert not isinstance(request.user, get_user_model())
    assert response["X-Frame-Options"] == "DENY"  # Django's own, on every answer
    assert response[HEADER] == build_policy()


@pytest.mark.django_db
def test_a_page_still_has_its_session_csrf_and_frame_options() -> None:
    response = Client().get("/login/")
    assert response.status_code == 200
    assert "csrftoken" in response.cookies
    assert response["X-Frame-Options"] == "DENY"
    request = response.wsgi_request
    assert hasattr(request, "user") and hasattr(request, "session") and hasattr(request, "htmx")
    refused = Client(enforce_csrf_checks=True).post("/login/", {"username": "x"})
    assert refused.status_code == 403


@pytest.mark.django_db
def test_a_page_with_a_nonce_is_given_its_own_policy() -> None:
    response = Client().get("/api/v1/docs/")
    nonce = response.wsgi_request._csp_nonce
    assert response[HEADER] == build_policy(nonce=nonce)
    assert f"'nonce-{nonce}'" in response[HEADER]


def test_a_view_that_changes_its_policy_keeps_the_change() -> None:
    @csp_update({"img-src": ["https://example.org"]})
    def view(request):  # noqa: ANN001, ANN202
        return HttpResponse("ok")

    built = middleware.CSPMiddleware(view)
    response = built(RequestFactory().get("/somewhere"))
    assert response[HEADER] == build_policy(update={"img-src": ["https://example.org"]})
    assert "https://example.org" in response[HEADER]


def test_a_nonce_drawn_after_the_header_is_written_is_an_error() -> None:
    from csp.exceptions import CSPNonceError

    built = middleware.CSPMiddleware(lambda request: HttpResponse("ok"))
    request = RequestFactory().get("/api/v1/me")
    response = built(request)
    assert response[HEADER] == build_policy()
    with pytest.raises(CSPNonceError):
        str(request.csp_nonce)


def test_the_static_files_are_found_once_and_served_to_every_client_made_after() -> None:
    assert Client().get("/static/js/dashboard.js").status_code == 200
    # Every later middleware (each test client builds its own) serves from what was found.
    with mock.patch("whitenoise.middleware.finders.get_finders", side_effect=AssertionError):
        answer = Client().get("/static/css/dashboard.css")
        assert answer.status_code == 200
        assert b"".join(answer.streaming_content)
        assert Client().get("/static/css/missing.css").status_code == 404


def test_a_setting_the_responders_are_built_with_finds_them_again() -> None:
    assert Client().get("/static/js/dashboard.js")["Cache-Control"] != "max-age=7, public"
    with override_settings(WHITENOISE_MAX_AGE=7):
        answer = Client().get("/static/js/dashboard.js")
    assert answer.status_code == 200
    assert answer["Cache-Control"] == "max-age=7, public"
