"""Browser tests: Playwright driving Debian's Chromium (/usr/bin/chromium; never a downloaded
browser) against a live server. They skip, saying why, only when that Chromium is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from hands import services as hand_services
from hands.models import Role, Workspace

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("GC_TEST_ARTIFACTS", settings.BASE_DIR / "test-artifacts"))
PASSWORD = "a long browser password"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per module. Not per session: Playwright's sync API keeps an event loop
    running in this thread while it is open, which later tests that start their own (anyio,
    asyncio.run) would trip over."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # With that loop running, Django takes every ORM call for one from async code; the test
    # bodies are plain synchronous code, so let them through while the browser is open.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def fast_polls(settings: Any) -> None:
    """Poll every second so a test sees a change within a couple of seconds."""
    settings.GC_DASHBOARD_POLL_S = 1


@pytest.fixture
def page(browser: Any, live_server: Any, fast_polls: None) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def admin(workspace: Workspace) -> Any:
    user = get_user_model().objects.create_user(username="ada", password=PASSWORD)
    hand_services.membership_set(workspace=workspace, user=user, role=Role.ADMIN)
    return user


@pytest.fixture
def logged_in(page: Any, admin: Any) -> Any:
    page.goto("/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("heading", name="Fleet board").wait_for()
    return page
