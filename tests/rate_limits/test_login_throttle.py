"""Repeated failed logins are slowed: after five free failures each try waits, doubling, and a
waiting try is answered 429 without its password being checked. Every try takes its place in the
pair's, the username's and the address's windows before its password is checked, so concurrent
tries cannot all slip past the count; the tight cap is per (username, address), so an attacker
at one address does not lock the user out from another."""

from __future__ import annotations

import threading
import time
from uuid import uuid4

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.db import connection
from django.test import Client

from dashboard import login_throttle

pytestmark = [pytest.mark.security, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _own_cache(settings) -> None:  # noqa: ANN001
    """The throttle's counts under a key prefix of this test's own. The cache (Redis in CI) is
    shared with every other test process on the machine: flushing it between tests wiped the
    counts of this same test running in another process (two CI runs at once failed four of
    these tests), and their flush ours."""
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "KEY_PREFIX": f"login-throttle-{uuid4().hex}"}
    }


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


@pytest.fixture
def fast_hasher(settings) -> None:  # noqa: ANN001
    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]


@pytest.fixture
def checks(monkeypatch) -> list[str]:  # noqa: ANN001
    """Every password check the backend runs, each held a moment (off the main thread) so that
    concurrent tries overlap: on today's code all of them then read "no wait yet" before any
    failure lands."""
    seen: list[str] = []
    lock = threading.Lock()
    original = ModelBackend.authenticate

    def counted(self, request, username=None, password=None, **kwargs):  # noqa: ANN001, ANN202
        with lock:
            seen.append(username)
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)  # only the concurrent test's threads are held
        return original(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counted)
    return seen


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_wrong_passwords_get_at_most_the_pair_limit_of_checks(
    fast_hasher,  # noqa: ANN001
    checks,  # noqa: ANN001
) -> None:
    get_user_model().objects.create_user("ada", password="the right password")
    tries = 20
    barrier = threading.Barrier(tries)
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        client = Client()
        try:
            barrier.wait()
            status = attempt(client, "wrong").status_code
            with lock:
                statuses.append(status)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(tries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(statuses) == tries
    assert len(checks) <= login_throttle.PAIR_LIMIT
    assert statuses.count(200) == len(checks)  # each check answered the form with its error
    assert statuses.count(429) == tries - len(checks)  # the others were refused unchecked
    # Every place was taken or given back: the window holds exactly the checked tries.
    assert attempt(Client(), "the right password").status_code == 429


@pytest.mark.django_db
def test_a_user_locked_out_at_one_address_still_logs_in_from_another(
    fast_hasher,  # noqa: ANN001
    user,  # noqa: ANN001
    checks,  # noqa: ANN001
) -> None:
    attacker = Client()
    for _ in range(30):
        attempt(attacker, "wrong", address="10.6.6.6")
    assert len(checks) <= login_throttle.PAIR_LIMIT
    assert attempt(attacker, "the right password", address="10.6.6.6").status_code == 429
    assert "_auth_user_id" not in attacker.session

    ada = Client()
    response = attempt(ada, "the right password", address="10.0.0.7")
    assert response.status_code == 302
    assert ada.session["_auth_user_id"] == str(user.pk)


@pytest.mark.django_db
def test_the_username_limit_holds_across_many_addresses(fast_hasher, user) -> None:  # noqa: ANN001
    client = Client()
    for index in range(login_throttle.USERNAME_LIMIT - 1):  # one failure from each address
        address = f"10.1.{index // 250}.{index % 250}"
        assert attempt(client, "wrong", address=address).status_code == 200

    # The real user logs in: the pair is cleared, the username's other failures stand.
    ada = Client()
    assert attempt(ada, "the right password", address="10.0.0.7").status_code == 302
    assert attempt(client, "wrong", address="10.2.0.1").status_code == 200  # the fiftieth

    # The window is full: from a fresh address even the right password is refused unchecked.
    fresh = Client()
    refused = attempt(fresh, "the right password", address="10.3.0.1")
    assert refused.status_code == 429
    assert b"Too many failed logins" in refused.content
    assert "_auth_user_id" not in fresh.session
    # Another username from those addresses is not held by ada's window.
    get_user_model().objects.create_user("bob", password="bob's password")
    other = client.post(
        "/login/", {"username": "bob", "password": "bob's password"}, REMOTE_ADDR="10.3.0.1"
    )
    assert other.status_code == 302


def _locked_out(client: Client, **meta: str) -> bool:
    for _ in range(6):
        client.post("/login/", {"username": "ada", "password": "wrong"}, **meta)
    answer = client.post("/login/", {"username": "ada", "password": "the right password"}, **meta)
    return answer.status_code == 429


def test_it_counts_the_address_the_trusted_proxy_saw(user, settings) -> None:  # noqa: ANN001
    # The one definition of a caller's address (apikit.clients), as the API's limits use it.
    settings.GC_TRUSTED_PROXY_HOPS = 1
    proxy = {"REMOTE_ADDR": "10.0.0.254"}
    assert _locked_out(Client(), HTTP_X_FORWARDED_FOR="203.0.113.7", **proxy)
    # Another client behind the same proxy is a pair of its own, so it logs in.
    fresh = Client().post(
        "/login/",
        {"username": "ada", "password": "the right password"},
        HTTP_X_FORWARDED_FOR="203.0.113.8",
        **proxy,
    )
    assert fresh.status_code == 302


def test_a_forwarded_for_is_ignored_without_a_trusted_proxy(user, settings) -> None:  # noqa: ANN001
    settings.GC_TRUSTED_PROXY_HOPS = 0
    client = Client()
    for n in range(6):  # a fresh made-up address per try buys nothing
        client.post(
            "/login/",
            {"username": "ada", "password": "wrong"},
            HTTP_X_FORWARDED_FOR=f"198.51.100.{n}",
            REMOTE_ADDR="10.0.0.1",
        )
    assert attempt(client, "the right password", address="10.0.0.1").status_code == 429


def test_with_its_store_out_of_reach_a_login_answers_503_and_checks_no_password(
    user,
    monkeypatch,  # noqa: ANN001
) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    def down(*args: object, **kwargs: object) -> None:
        raise RedisConnectionError("Error 32 while writing to socket. Broken pipe.")

    checked: list[str] = []
    real = ModelBackend.authenticate

    def counting(self, request, username=None, password=None, **kwargs):  # noqa: ANN001, ANN202
        checked.append(password)
        return real(self, request, username=username, password=password, **kwargs)

    monkeypatch.setattr(ModelBackend, "authenticate", counting)
    for name in ("incr", "add", "get", "get_many", "set", "set_many", "decr", "delete_many"):
        monkeypatch.setattr(login_throttle.cache, name, down)
    answer = attempt(Client(), "the right password")
    assert answer.status_code == 503
    assert b"unreachable" in answer.content
    assert checked == []  # fail closed: nothing is checked that was counted nowhere


# --- Locking a user out from everywhere (issue 33, item 9c) ------------------------------------


def _guess_from(addresses: list[str], tries: int, now: list[float]) -> list[int]:
    """`tries` wrong passwords for ada from each address, each after its wait has run out (a
    patient attacker: the doubling wait delays the tries, it does not refuse them)."""
    statuses = []
    for address in addresses:
        client = Client()
        for _ in range(tries):
            now[0] += login_throttle.MAX_DELAY_S / 8  # past every wait ten tries set
            statuses.append(attempt(client, "wrong", address=address).status_code)
    return statuses


@pytest.mark.django_db
def test_five_addresses_cannot_lock_a_user_out_of_the_address_she_logs_in_from(
    fast_hasher,  # noqa: ANN001
    user,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Five addresses times ten tries filled the username's window, and for 15 minutes ada was
    refused everywhere, unchecked, at her own desk too. An address she logged in from is hers:
    the username's window does not hold it."""
    now = [1_000_000.0]
    monkeypatch.setattr(login_throttle.time, "time", lambda: now[0])
    ada = Client()
    assert attempt(ada, "the right password", address="10.0.0.7").status_code == 302
    ada.logout()

    attackers = [f"203.0.113.{n}" for n in range(1, 6)]
    statuses = _guess_from(attackers, login_throttle.PAIR_LIMIT, now)
    assert statuses.count(200) == login_throttle.USERNAME_LIMIT  # every guess checked
    # The username's window is full: a fresh address is refused unchecked (guessing from many
    # addresses stays capped)...
    fresh = Client()
    assert attempt(fresh, "the right password", address="198.51.100.9").status_code == 429
    assert "_auth_user_id" not in fresh.session
    # ...but ada, at the address she logged in from, logs in.
    response = attempt(ada, "the right password", address="10.0.0.7")
    assert response.status_code == 302
    assert ada.session["_auth_user_id"] == str(user.pk)


@pytest.mark.django_db
def test_a_known_address_does_not_open_the_usernames_window_to_guessing(
    fast_hasher,  # noqa: ANN001
    user,  # noqa: ANN001
    checks,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Brute force from one address is still slowed, her own included (a guesser behind her
    address): the pair's window and the waits hold it, and failures never make an address
    known, so the guesser's other addresses stay in the username's window."""
    now = [1_000_000.0]
    monkeypatch.setattr(login_throttle.time, "time", lambda: now[0])
    ada = Client()
    assert attempt(ada, "the right password", address="10.0.0.7").status_code == 302
    ada.logout()
    checks.clear()

    guesser = Client()
    for _ in range(5):
        assert attempt(guesser, "wrong", address="10.0.0.7").status_code == 200
    assert attempt(guesser, "wrong", address="10.0.0.7").status_code == 200  # sets a wait
    assert attempt(guesser, "wrong", address="10.0.0.7").status_code == 429  # unchecked
    statuses = _guess_from(["10.0.0.7"], 30, now)
    assert len(checks) == login_throttle.PAIR_LIMIT  # the pair's window, whatever the wait
    assert statuses.count(200) == login_throttle.PAIR_LIMIT - 6
    assert attempt(guesser, "the right password", address="10.0.0.7").status_code == 429

    # Failures make no address known: from elsewhere the username's window still counts.
    statuses = _guess_from([f"203.0.113.{n}" for n in range(1, 6)], login_throttle.PAIR_LIMIT, now)
    assert statuses.count(200) == login_throttle.USERNAME_LIMIT
    assert attempt(Client(), "the right password", address="203.0.113.6").status_code == 429
