"""Shared test set-up: services the suite drives for real.

A test that needs a service calls ``require_service(name, why)``: with CI=true a missing
service fails the test (CI must start it); elsewhere the test skips and says why.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
IN_CI = os.environ.get("CI", "").lower() == "true"

# In CI every property test draws the same examples on every run, so that a red run is
# repeatable and a rare draw cannot fail one submission and pass the next; on a developer's
# machine each run explores new ones (a failure there is kept in hypothesis' database).
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if IN_CI:
    hypothesis_settings.load_profile("ci")


def require_service(available: bool, what: str) -> None:
    """Skip (or, in CI, fail) the calling test when ``what`` is not available here."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} is not available on this machine")


def require_shared(relative: str) -> Path:
    """A path inside ../shared, which CI has but a user's clone does not."""
    path = SHARED / relative
    require_service(path.exists(), f"../shared/{relative} (the steering repository's shared files)")
    return path


# --- Test personas, in one place (STYLE.md) ---------------------------------------------------
PASSWORD = "pw-for-tests-only"


class Personas:
    """A small cluster with two teams and one user per role.

    ``team`` (team-a, quota 8 of ml.p5.48xlarge) has a team admin, a member and a viewer;
    ``other_team`` (team-b, quota 8) has ``other_member``; ``cluster_admin`` is staff.
    """

    def __init__(self) -> None:
        from tests import factories as f

        self.cluster = f.make_cluster()
        self.instance_type = f.make_instance_type("ml.p5.48xlarge", 8)
        self.nodes = f.make_nodes(self.instance_type, 2)
        self.priority_classes = f.make_priority_classes()
        self.team = f.make_team("team-a", {self.instance_type: 8})
        self.other_team = f.make_team("team-b", {self.instance_type: 8})
        self.cluster_admin = f.make_user("admin", staff=True)
        self.team_admin = f.make_user("alice")
        self.member = f.make_user("bob")
        self.viewer = f.make_user("victor")
        self.other_member = f.make_user("olga")
        self.outsider = f.make_user("nobody")
        f.make_member(self.team_admin, self.team, "team-admin")
        f.make_member(self.member, self.team, "member")
        f.make_member(self.viewer, self.team, "viewer")
        f.make_member(self.other_member, self.other_team, "member")


@pytest.fixture
def personas(db: None) -> Personas:
    return Personas()


# --- Browser tests: one Playwright and one Chromium for the whole session ---------------------
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


@pytest.fixture(scope="session")
def playwright() -> Iterator[Any]:
    require_service(CHROMIUM.exists(), f"Chromium at {CHROMIUM} (scripts/test-prereqs installs it)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in the test's thread; the ORM calls stay synchronous.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
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
    # ORM calls made while Playwright's sync API runs (it switches greenlets) may open a
    # connection of their own; close it, or PostgreSQL's test database cannot be dropped.
    from django.db import connections

    connections.close_all()


@pytest.fixture(autouse=True)
def forget_throttled_requests() -> Iterator[None]:
    """The request throttles count in the cache, which outlives a test (a file, or Redis, where
    it outlives the run too): without this, earlier requests from the test client's address
    (127.0.0.1) would count against this test, in whichever folder it is."""
    from django.conf import settings
    from django.core.cache import cache

    keys = [f"throttle_{scope}_127.0.0.1" for scope in settings.GPUGOV_THROTTLE_RATES]
    # A cache that is down (tests/chaos stops Redis on purpose) has no counts to forget.
    with contextlib.suppress(Exception):
        cache.delete_many(keys)
    yield
    with contextlib.suppress(Exception):
        cache.delete_many(keys)
