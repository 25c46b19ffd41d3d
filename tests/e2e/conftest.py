"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's
``live_server``. Other surfaces' browser tests reuse ``browser``, ``page`` and ``login``.

Playwright's sync API runs an event loop in the test's thread, so Django's guard against ORM
calls from async code has to be lifted for these tests (the ORM calls are synchronous anyway).

Playwright and the browser are started once for this package (not the whole session): a
second ``sync_playwright()`` cannot start while one is running, so a browser test elsewhere
(e.g. ``tests/interop``) that starts its own must find this one stopped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PASSWORD, require_service

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 20_000  # a generous ceiling for one step on a busy 2-core machine, not a measurement


@pytest.fixture(scope="package")
def playwright() -> Iterator[Any]:
    require_service(CHROMIUM.exists(), f"Chromium at {CHROMIUM} (scripts/test-prereqs installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Any) -> Iterator[Any]:
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page in its own context (no cookies shared between tests)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    yield page
    context.close()


def login(page: Any, live_server: Any, user: Any, password: str = PASSWORD) -> None:
    """Sign ``user`` in through the login form and wait until the browser has left it."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
