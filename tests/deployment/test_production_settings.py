"""Production-safe by default (issue 18, item 7): no start with a key anyone knows, a key of its
own on the embedded default, a 503 page (never a 500) while the database is unreachable, and a
Content-Security-Policy on every answer.

TLS (GC_TLS and the deploy check) is in tests/deployment/test_settings.py; `Connection: close`
on a real server in tests/deployment/test_server.py; the policy in a real browser in
tests/browser/test_csp.py.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from fleet.attempts import services as attempt_services
from groundcontrol import secret_key as keys
from hands import services as hand_services
from hands.models import Role

pytestmark = pytest.mark.security

ROOT = Path(__file__).resolve().parent.parent.parent
POSTGRES_URL = "postgresql://gc:gc@db.example.invalid:5432/gc"


def _settings_of(env: dict[str, str], *names: str) -> subprocess.CompletedProcess[str]:
    """Load the settings in a fresh interpreter with exactly `env` (and PATH), printing `names`."""
    code = "import django; django.setup(); from django.conf import settings; " + "; ".join(
        f"print(repr(settings.{name}))" for name in names
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "groundcontrol.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- The secret key -----------------------------------------------------------------------------


def test_it_refuses_to_start_on_postgres_without_a_secret_key(tmp_path: Path) -> None:
    for debug in ("0", "1"):
        done = _settings_of(
            {"DATABASE_URL": POSTGRES_URL, "DEBUG": debug, "GC_VAR_DIR": str(tmp_path)},
            "SECRET_KEY",
        )
        assert done.returncode != 0
        assert "ImproperlyConfigured: SECRET_KEY is not set and DATABASE_URL is (a production" in (
            done.stderr
        )
        assert "secrets.token_urlsafe(50)" in done.stderr
    assert not (tmp_path / keys.KEY_FILE).exists()


def test_it_refuses_to_start_with_the_published_development_key(tmp_path: Path) -> None:
    for database in ({}, {"DATABASE_URL": POSTGRES_URL}):
        for debug in ("0", "1"):
            done = _settings_of(
                {
                    **database,
                    "SECRET_KEY": keys.PUBLISHED_DEV_KEY,
                    "DEBUG": debug,
                    "GC_VAR_DIR": str(tmp_path),
                },
                "SECRET_KEY",
            )
            assert done.returncode != 0
            assert "SECRET_KEY is the development key that earlier versions published" in (
                done.stderr
            )


def test_the_deploy_check_stops_on_the_published_development_key(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env={**environ, "SECRET_KEY": keys.PUBLISHED_DEV_KEY, "GC_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "development key that earlier versions published" in done.stderr


def test_the_embedded_default_mints_a_private_key_once_and_keeps_it(tmp_path: Path) -> None:
    env = {"GC_VAR_DIR": str(tmp_path)}  # nothing else set: the embedded default, DEBUG off
    first = _settings_of(env, "SECRET_KEY", "DEBUG")
    assert first.returncode == 0, first.stderr
    key, debug = first.stdout.split()
    assert debug == "False"
    path = tmp_path / keys.KEY_FILE
    assert repr(path.read_text().strip()) == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) > 60 and key.strip("'") != keys.PUBLISHED_DEV_KEY
    again = _settings_of(env, "SECRET_KEY")
    assert again.stdout.split() == [key]
    # The temporary file it was written to is gone.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_sqlite_database_is_refused_for_postgresql_everywhere(tmp_path: Path) -> None:
    done = _settings_of(
        {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "GC_VAR_DIR": str(tmp_path)},
        "SECRET_KEY",
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "DATABASE_URL" in done.stderr, done.stderr
    assert not (tmp_path / keys.KEY_FILE).exists()


def test_a_given_key_is_used_and_nothing_is_minted(tmp_path: Path) -> None:
    given = "k" * 20 + "-given-key-of-the-operator-" + "z" * 20
    for database in ({}, {"DATABASE_URL": POSTGRES_URL}):
        done = _settings_of(
            {**database, "SECRET_KEY": given, "GC_VAR_DIR": str(tmp_path)}, "SECRET_KEY"
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == repr(given)
    assert not (tmp_path / keys.KEY_FILE).exists()


def test_a_weak_key_is_refused_on_postgres_with_debug_off(tmp_path: Path) -> None:
    """Issue 33, item 9a: `SECRET_KEY=x` started a production install (PostgreSQL, DEBUG off),
    whose sessions anyone could then sign. It is refused, saying why, without repeating it."""
    for weak, why in (
        ("x", "SECRET_KEY is 1 characters long; a key has at least 32"),
        ("Password123" * 3, "SECRET_KEY repeats a shorter string"),
    ):
        done = _settings_of(
            {"DATABASE_URL": POSTGRES_URL, "SECRET_KEY": weak, "GC_VAR_DIR": str(tmp_path)},
            "SECRET_KEY",
        )
        assert done.returncode != 0, done.stdout
        said = f"ImproperlyConfigured: {why}, too weak to sign sessions with while DEBUG is off"
        assert said in done.stderr, done.stderr
        assert "secrets.token_urlsafe(50)" in done.stderr
        assert weak not in done.stderr or weak == "x"  # (an "x" is in any sentence)
    assert not (tmp_path / keys.KEY_FILE).exists()


def test_a_weak_key_still_serves_development_with_debug_on(tmp_path: Path) -> None:
    done = _settings_of(
        {
            "DATABASE_URL": POSTGRES_URL,
            "SECRET_KEY": "x",
            "DEBUG": "1",
            "GC_VAR_DIR": str(tmp_path),
        },
        "SECRET_KEY",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr("x")


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("x", "is 1 characters long; a key has at least 32"),
        ("hunter2", "is 7 characters long; a key has at least 32"),
        ("k3y-" + "a1b2c3d4e5f6g7h8i9j0k1l2m3n", "is 31 characters long; a key has at least 32"),
        ("x" * 50, "is made of 1 different characters; a key has at least 8"),
        ("abcdefg" * 8, "is made of 7 different characters; a key has at least 8"),
        ("changeme" * 4, "is made of 7 different characters; a key has at least 8"),
        ("Password123" * 3, "repeats a shorter string"),
        (
            "django-insecure-" + "q8$z@v0!c^k1m#n2p%r3s&t4u*w5y(x6",
            "starts with 'django-insecure-', the mark of a key django-admin wrote into a "
            "settings file",
        ),
    ],
    ids=["x", "word", "31", "one-character", "seven", "seven-repeated", "repeated", "django"],
)
def test_the_weak_keys_and_why(key: str, why: str) -> None:
    assert keys.weakness(key) == why
    with pytest.raises(ImproperlyConfigured) as refused:
        keys.secret_key(given=key, embedded=False, require=False, var_dir=Path("/nonexistent"))
    assert str(refused.value).startswith(f"SECRET_KEY {why}, too weak")
    assert key == "x" or key not in str(refused.value)  # never repeated (an "x" is in any)
    # With DEBUG on (development) it is taken as given.
    assert (
        keys.secret_key(
            given=key, embedded=False, require=False, var_dir=Path("/nonexistent"), debug=True
        )
        == key
    )


def test_every_generated_key_and_a_written_passphrase_pass() -> None:
    import secrets

    for key in (
        secrets.token_urlsafe(50),  # docs/deploy.md's
        secrets.token_hex(16),  # `openssl rand -hex 16`: 32 characters
        secrets.token_hex(32),
        secrets.token_urlsafe(24),
        "dev-only-not-secret-0123456789abcdef",
        "k" * 20 + "-given-key-of-the-operator-" + "z" * 20,
    ):
        assert keys.weakness(key) is None, key
    # Eight different characters, 32 of them, not a repetition: the floor, passed.
    assert keys.weakness("aabbccddeeffgghh" + "hhggffeeddccbbaa") is None


def test_GC_REQUIRE_SECRET_KEY_refuses_to_mint_one(tmp_path: Path) -> None:
    done = _settings_of({"GC_VAR_DIR": str(tmp_path), "GC_REQUIRE_SECRET_KEY": "1"}, "SECRET_KEY")
    assert done.returncode != 0
    assert "SECRET_KEY is not set and GC_REQUIRE_SECRET_KEY is on" in done.stderr
    assert not (tmp_path / keys.KEY_FILE).exists()


def test_processes_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from groundcontrol.secret_key import persisted_key;"
        " print(persisted_key(Path(sys.argv[1])))"
    )
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / "var")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    answers = {start.communicate(timeout=60)[0].strip() for start in starts}
    assert answers == {(tmp_path / "var" / keys.KEY_FILE).read_text().strip()}


def test_threads_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    barrier = threading.Barrier(16)
    answers: list[str] = []

    def start() -> None:
        barrier.wait()
        answers.append(keys.persisted_key(tmp_path))

    threads = [threading.Thread(target=start) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 16 and len(set(answers)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [keys.KEY_FILE]


def test_without_hard_links_the_key_is_still_created_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(*args: Any) -> None:
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(os, "link", no_links)
    key = keys.persisted_key(tmp_path)
    path = tmp_path / keys.KEY_FILE
    assert path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.persisted_key(tmp_path) == key


def test_a_var_dir_that_cannot_hold_the_key_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ImproperlyConfigured, match="no key could be kept in .*a-file"):
        keys.secret_key(given="", embedded=True, require=False, var_dir=blocker / "var")


# --- A database outage: 503 pages -----------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def database_unreachable() -> Iterator[None]:
    """The database cannot be reached: the connection is closed and the next one goes to a port
    nobody listens on (as tests/waits/test_wait.py does)."""
    db = connections["default"]
    saved = dict(db.settings_dict)
    db.close()
    db.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        yield
    finally:
        db.close()
        db.settings_dict.clear()
        db.settings_dict.update(saved)


def _logged_in(workspace, *, raise_request_exception: bool = True) -> Client:  # noqa: ANN001
    user = get_user_model().objects.create_user(username="ada", password="pw-ada-long-enough")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client(raise_request_exception=raise_request_exception)
    client.force_login(user)
    return client


def _assert_outage_page(response: Any) -> None:
    assert response.status_code == 503, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "The database is unreachable" in html
    assert "the database is unreachable; nothing was written; retry later" in html.lower()
    request_id = response["X-Request-ID"]
    assert request_id and f"<code>{request_id}</code>" in html
    assert response["Cache-Control"] == "no-store"
    assert "Content-Security-Policy" in response


@pytest.mark.django_db(transaction=True)
def test_every_page_answers_503_while_the_database_is_unreachable(workspace, make_run) -> None:  # noqa: ANN001
    run = make_run()
    hand = hand_services.hand_create(workspace=workspace, name="hand-a")[0]
    attempt = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="h:1").attempt
    client = _logged_in(workspace)
    pages = [
        "/",
        "/chart/",
        "/lanes/",
        "/lanes/rewalk/",
        f"/work-packages/{run.work_package_id}/",
        f"/runs/{run.pk}/",
        "/hands/",
        f"/hands/{hand.pk}/",
        "/leases/",
        "/refusals/",
        "/events/",
        "/members/",
        "/admin/",
        # Logged in, the login page redirects to the board: it looks the user up first.
        "/login/",
    ]
    posts = [
        "/workspace/",
        f"/runs/{run.pk}/close/",
        f"/attempts/{attempt.pk}/directive/",
        "/leases/break/",
        "/logout/",
    ]
    with database_unreachable():
        answers = {page: client.get(page) for page in pages}
        answers["/ (an HTMX poll)"] = client.get("/", headers={"HX-Request": "true"})
        answers.update({f"POST {page}": client.post(page, {"reason": "x"}) for page in posts})
        # Someone logging in: the password check is the first query.
        anonymous = Client()
        answers["POST /login/"] = anonymous.post(
            "/login/", {"username": "ada", "password": "pw-ada-long-enough"}
        )
    for page, response in answers.items():
        assert response.status_code == 503, page
        _assert_outage_page(response)
    # Pages that need no database keep working: the login form, and the way to it.
    with database_unreachable():
        login = Client().get("/login/")
        board = Client().get("/")
    assert login.status_code == 200 and b"Log in" in login.content
    assert board.status_code == 302 and board["Location"].startswith("/login/")
    # And once the database is back, so is the board.
    assert client.get("/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_middleware_that_meets_the_outage_first_answers_503_too(workspace, settings) -> None:  # noqa: ANN001
    # With the CSRF secret kept in the session, CsrfViewMiddleware loads the session before any
    # view runs: Django answers that middleware's failure with a 500 of its own.
    settings.CSRF_USE_SESSIONS = True
    client = _logged_in(workspace, raise_request_exception=False)
    with database_unreachable():
        answers = [client.get("/login/"), client.get("/"), client.post("/lanes/", {"x": "y"})]
    for response in answers:
        _assert_outage_page(response)


@pytest.mark.django_db(transaction=True)
def test_other_errors_are_still_500(workspace, monkeypatch) -> None:  # noqa: ANN001
    from dashboard import pages

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug, not an outage")

    monkeypatch.setattr(pages, "memberships_for", broken)
    client = _logged_in(workspace, raise_request_exception=False)
    assert client.get("/").status_code == 500


# --- Content-Security-Policy on every answer ------------------------------------------------------


def _patterns(resolvers: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in resolvers:
        if isinstance(entry, URLResolver):
            route = str(entry.pattern)
            yield from _patterns(entry.url_patterns, prefix + route)
        else:
            yield prefix, entry


def _url_of(prefix: str, pattern: URLPattern, values: dict[str, str]) -> str:
    """A URL the pattern matches, with `values` for its parameters (by name, else by type)."""
    if isinstance(pattern.pattern, RoutePattern):
        route = prefix + str(pattern.pattern)

        def value(match: re.Match[str]) -> str:
            converter, name = match.group(1) or "str", match.group(2)
            return values.get(name) or ("1" if converter == "int" else "x")

        path = re.sub(r"<(?:(\w+):)?(\w+)>", value, route)
        return "/" + path
    # Regular expressions: the admin's list of an app's models, and the catch-alls.
    if "app_label" in pattern.pattern.regex.groupindex:
        return "/" + prefix + "auth/"
    return "/" + prefix + "no-such-page/"


@pytest.mark.django_db
def test_every_page_and_answer_carries_the_policy(workspace, make_run) -> None:  # noqa: ANN001
    run = make_run()
    hand = hand_services.hand_create(workspace=workspace, name="hand-a")[0]
    key = hand_services.key_issue(hand=hand, scopes=["work"], actor="test")
    attempt = attempt_services.attempt_claim(hand=hand, run_id=run.pk, process_id="h:1").attempt
    user = get_user_model().objects.create_superuser(username="root", password="pw-root-long")
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    client = Client()
    client.force_login(user)
    values = {
        "pk": str(run.pk),
        "run_id": str(run.pk),
        "work_package_id": str(run.work_package_id),
        "attempt_id": str(attempt.pk),
        "slug": "rewalk",
        "index": "0",
        "prefix": key.key.prefix,
        "name": hand.name,
        "object_id": str(hand.pk),
    }
    urls = {
        _url_of(prefix, pattern, values)
        for prefix, pattern in _patterns(get_resolver().url_patterns)
    }
    # Every area of the URLconf is there: the dashboard, the API, its docs, ops and the admin.
    for expected in ("/", f"/runs/{run.pk}/", "/api/v1/docs/", "/api/v1/me", "/healthz", "/admin/"):
        assert expected in urls
    assert len(urls) > 60
    for url in sorted(urls):
        response = client.get(url)
        assert response.status_code < 500, (url, response.status_code)
        policy = response.get("Content-Security-Policy", "")
        assert "default-src 'self'" in policy, (url, policy)
        assert "object-src 'none'" in policy and "frame-ancestors 'none'" in policy, url
        script = re.search(r"script-src ([^;]*)", policy).group(1)  # type: ignore[union-attr]
        assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script, (url, policy)
    # And so do the API's own answers, with a key.
    me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {key.plaintext}"})
    assert me.status_code == 200 and "default-src 'self'" in me["Content-Security-Policy"]


@pytest.mark.django_db
def test_the_api_docs_inline_script_and_style_carry_the_policys_nonce() -> None:
    response = Client().get("/api/v1/docs/")
    assert response.status_code == 200
    nonce = re.search(r"'nonce-([^']+)'", response["Content-Security-Policy"]).group(1)  # type: ignore[union-attr]
    html = response.content.decode()
    tags = re.findall(r"<(script|style)(\s[^>]*)?>", html)
    inline = [attributes or "" for _, attributes in tags if "src=" not in (attributes or "")]
    assert len(inline) == 2 and all(f'nonce="{nonce}"' in attributes for attributes in inline)
    assert "SwaggerUIBundle(" in html


@pytest.mark.django_db
def test_the_dashboard_has_no_inline_script_or_style(workspace, make_run) -> None:  # noqa: ANN001
    run = make_run()
    client = _logged_in(workspace)
    answers = [client.get(page) for page in ("/", f"/runs/{run.pk}/", "/hands/", "/events/")]
    for response in [*answers, Client().get("/login/")]:
        assert response.status_code == 200
        html = response.content.decode()
        page = response.request["PATH_INFO"]
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), page
        assert "<style" not in html and " style=" not in html, page
        assert not re.search(r"\son[a-z]+=", html), page
        # htmx is told not to insert a style of its own nor evaluate attributes.
        assert '"includeIndicatorStyles": false' in html and '"allowEval": false' in html


def test_the_csrf_refusal_page_has_no_inline_style() -> None:
    # Django's own has one, which the policy would block: templates/403_csrf.html replaces it.
    response = Client(enforce_csrf_checks=True).post("/login/", {"username": "x"})
    assert response.status_code == 403
    html = response.content.decode()
    assert "CSRF verification failed" in html and "<style" not in html
    assert "Content-Security-Policy" in response
