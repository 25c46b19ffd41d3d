"""The console in a real browser: a cluster admin creates a team whose quota exceeds the ready
capacity, sees the over-commit warning with both numbers, and finds the change in the audit."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_creates_an_over_committed_team_and_finds_it_in_the_audit(live_server, page, personas):
    login(page, live_server, personas.cluster_admin)
    assert page.locator("h1").inner_text() == "Capacity and quotas"

    # 1. Teams -> New team: 16 GPUs of ml.p5.48xlarge, where team-a and team-b already hold 16 of 16.
    page.click("nav >> text=Teams")
    page.wait_for_url(re.compile(r"/console/teams/$"))
    page.click("text=New team")
    page.wait_for_url(re.compile(r"/console/teams/new/$"))
    page.fill("#id_name", "vision")
    page.fill("#id_display_name", "Computer Vision")
    page.fill("#id_fair_share_weight", "3")
    row = page.locator('tr[data-instance-type="ml.p5.48xlarge"]')
    row.locator('input[name$="-quota"]').fill("16")
    row.locator('select[name$="-borrow_limit_kind"]').select_option("absolute")
    row.locator('input[name$="-borrow_limit"]').fill("8")
    page.click("text=Create team")

    # 2. The team's page, with the warning and both numbers.
    page.wait_for_url(re.compile(r"/console/teams/vision/$"))
    messages = page.locator(".message-warning").all_inner_texts()
    assert messages == ["Quotas of ml.p5.48xlarge add up to 32 GPUs, more than its 16 ready GPUs."]
    assert "more than its 16 ready GPUs" in page.locator(".overcommit").inner_text()

    # 3. The capacity page shows the same numbers.
    page.click("nav >> text=Capacity")
    page.wait_for_url(re.compile(r"^https?://[^/]+/$"))
    card = page.locator('section[data-instance-type="ml.p5.48xlarge"]')
    assert card.locator(".quota-sum").inner_text() == "32 GPUs"
    assert card.locator(".ready-gpus").inner_text() == "16 of 16 GPUs"
    assert "over-committed" in card.inner_text()

    # 4. Audit: the creation of the team and of its quota, by admin.
    page.click("nav >> text=Audit")
    page.wait_for_url(re.compile(r"/console/audit/$"))
    page.fill("#id_object", "vision")
    page.click("text=Filter")
    page.wait_for_url(re.compile(r"/console/audit/\?.*object=vision"))
    rows = page.locator("#audit tbody tr")
    texts = rows.all_inner_texts()
    assert len(texts) == 2, texts
    quota_row = next(t for t in texts if "vision / ml.p5.48xlarge" in t)
    assert "admin" in quota_row and "Created" in quota_row
    assert "quota: 16" in quota_row and "borrow_limit: 8" in quota_row
