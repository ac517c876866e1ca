"""Repeated failed logins are slowed: after five free failures each try waits, doubling, and a
waiting try is answered 429 without its password being checked."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from dashboard import login_throttle

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _clean_cache():  # noqa: ANN202
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def user():  # noqa: ANN201
    return get_user_model().objects.create_user("ada", password="the right password")


def attempt(client: Client, password: str, address: str = "10.0.0.1"):  # noqa: ANN201
    return client.post("/login/", {"username": "ada", "password": password}, REMOTE_ADDR=address)


def test_it_lets_five_failures_through_then_makes_the_next_try_wait(user, monkeypatch) -> None:  # noqa: ANN001
    now = [1_000_000.0]
    monkeypatch.setattr(login_throttle.time, "time", lambda: now[0])
    client = Client()
    for _ in range(5):
        assert attempt(client, "wrong").status_code == 200  # the form again, with its error
    assert attempt(client, "wrong").status_code == 200  # the sixth failure sets a wait...
    waiting = attempt(client, "the right password")  # ...and even the right password waits
    assert waiting.status_code == 429
    assert b"Too many failed logins" in waiting.content
    assert "_auth_user_id" not in client.session

    now[0] += login_throttle.FIRST_DELAY_S + 0.1
    assert attempt(client, "wrong").status_code == 200  # the seventh failure doubles the wait
    now[0] += login_throttle.FIRST_DELAY_S + 0.1
    assert attempt(client, "the right password").status_code == 429
    now[0] += login_throttle.FIRST_DELAY_S
    assert attempt(client, "the right password").status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)


def test_a_success_forgets_the_usernames_failures(user) -> None:  # noqa: ANN001
    client = Client()
    for _ in range(4):
        attempt(client, "wrong")
    assert attempt(client, "the right password").status_code == 302
    assert login_throttle.login_wait_s(username="ada", address="10.0.0.2") == 0


def test_one_address_guessing_many_usernames_is_slowed_too(db) -> None:  # noqa: ANN001
    client = Client()
    for index in range(6):
        client.post(
            "/login/", {"username": f"user{index}", "password": "x"}, REMOTE_ADDR="10.9.9.9"
        )
    response = client.post(
        "/login/", {"username": "fresh", "password": "x"}, REMOTE_ADDR="10.9.9.9"
    )
    assert response.status_code == 429


def test_the_wait_is_capped(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(login_throttle.time, "time", lambda: 0.0)
    for _ in range(60):
        wait = login_throttle.login_failed(username="ada", address="10.0.0.1")
    assert wait == login_throttle.MAX_DELAY_S
