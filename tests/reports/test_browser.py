"""In a real browser: the preview shows the email with its charts drawn, and an email's
unsubscribe link works in one click plus a confirmation, without signing in."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from allocations.models import Membership
from allocations.reports.services import weekly_reports_send
from allocations.reports.weeks import Week
from tests.conftest import require_service
from tests.e2e.conftest import TIMEOUT_MS, login

pytestmark = [pytest.mark.e2e]


@pytest.fixture
def page(browser: Any) -> Any:
    """The session's browser, in a page as narrow as a mail client's reading pane."""
    context = browser.new_context(viewport={"width": 900, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()
    # ORM calls made while Playwright's sync API runs (it switches greenlets) open a
    # connection of their own; close it here, or PostgreSQL's test database cannot be
    # dropped when this is the session's last test.
    connections.close_all()


def test_preview_draws_the_charts_and_the_unsubscribe_link_works(
    transactional_db, live_server, page, week_of_history, smtp
):
    require_service(Path("/usr/bin/chromium").exists(), "chromium (renders the report charts)")
    login(page, live_server, week_of_history.member)
    page.goto(f"{live_server.url}/reports/2026-W47/teams/team-a/")
    assert page.locator("h1").inner_text() == "Team A (team team-a): week 2026-W47"
    images = page.locator("img")
    assert images.count() == 2
    for i in range(2):
        assert images.nth(i).evaluate("img => img.complete && img.naturalWidth") == 640
    # The email's own link, opened by someone who is not signed in.
    weekly_reports_send(week=Week.parse("2026-W47", "Europe/Berlin"), teams=["team-a"], cluster=False,
                        now=datetime(2026, 11, 23, 9, tzinfo=UTC))  # fmt: skip
    text = smtp.to("bob@example.com")[0].get_body(preferencelist=("plain",)).get_content()
    link = re.search(r"Unsubscribe from this report: https://gpugov\.example\.org(\S+)", text)[1]
    page.context.clear_cookies()
    page.goto(f"{live_server.url}{link}")
    assert "Stop sending the weekly report of team team-a to bob?" in page.inner_text("main, body")
    page.click("#unsubscribe-form button")
    page.locator("#unsubscribed").wait_for()
    assert not Membership.objects.get(user=week_of_history.member).weekly_report
