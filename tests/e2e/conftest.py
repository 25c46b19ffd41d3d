"""Browser tests: Playwright's sync API driving Debian's Chromium against pytest-django's
``live_server``. Other surfaces' browser tests reuse ``browser``, ``page`` and ``login``.

Playwright's sync API runs an event loop in the test's thread, so Django's guard against ORM
calls from async code has to be lifted for these tests (the ORM calls are synchronous anyway).

The ``playwright``, ``browser`` and ``page`` fixtures live in ``tests/conftest.py`` (one
Playwright for the whole session: a second ``sync_playwright()`` cannot start while one runs).
"""

from __future__ import annotations

import os
from typing import Any

from tests.conftest import CHROMIUM, CHROMIUM_ARGS, PASSWORD, TIMEOUT_MS  # noqa: F401  (re-exported)

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"


def login(page: Any, live_server: Any, user: Any, password: str = PASSWORD) -> None:
    """Sign ``user`` in through the login form and wait until the browser has left it."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", user.get_username())
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
