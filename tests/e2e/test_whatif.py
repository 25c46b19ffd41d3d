"""The what-if lab in a real browser: a cluster admin copies the live policy into a draft,
lets team-b lend its idle quota, replays last week under both policies (the Celery task runs
eagerly in the server: the real task and replay, no mock), watches the progress bar reach the
end, reads both results, applies the draft and finds its audit entries."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from allocations.models import TeamQuota
from tests.e2e.conftest import login
from tests.whatif.conftest import build_week

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Tasks queued by the pages run at once in the server's thread (no broker, no worker)."""
    from gpugov_site.celery import app

    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = False


def test_admin_drafts_replays_compares_and_applies_a_policy(live_server, page, personas, eager_celery):
    build_week(personas)
    login(page, live_server, personas.cluster_admin)

    # 1. A new draft: a copy of the live policy, no differences yet.
    page.click("nav >> text=What-if")
    page.wait_for_url(re.compile(r"/whatif/$"))
    page.fill("#id_draft-name", "lend more")
    page.click("text=Copy the live policy into a new draft")
    page.wait_for_url(re.compile(r"/whatif/drafts/\d+/$"))
    assert page.locator("#no-diff").is_visible()
    draft_url = page.url

    # 2. team-b lends its whole quota in the draft (live: lend limit 0), with the live forms.
    page.click("#draft-teams >> text=team-b")
    page.wait_for_url(re.compile(r"/whatif/drafts/\d+/teams/team-b/$"))
    page.locator('tr[data-instance-type="ml.p5.48xlarge"] input[name$="-lend_limit"]').fill("")
    page.click("text=Save in the draft")
    page.wait_for_url(draft_url)
    diff = page.locator("#diff .diff-row").all_inner_texts()
    assert len(diff) == 1 and "team-b / ml.p5.48xlarge" in diff[0] and "lend_limit" in diff[0], diff

    # 3. Replay the last 7 days under the live policy and the draft.
    page.click("nav >> text=What-if")
    page.check("#new-run >> text=lend more")
    page.select_option("#id_run-range", "7")
    page.click("text=Start the run")
    page.wait_for_url(re.compile(r"/whatif/runs/\d+/$"))
    page.wait_for_function("document.getElementById('run-state').textContent === 'done'")
    assert page.locator("#run-progress").evaluate("el => el.value") == 100
    assert page.locator("#run-percent").inner_text() == "100%"

    # 4. Both results side by side, the charts drawn, the jobs whose wait changed most.
    header = page.locator("#results thead").text_content() or ""
    assert "live policy" in header and "lend more" in header
    idle = page.locator("#results tr", has_text="GPU-hours idle while jobs waited").inner_text()
    assert len(idle.split("\t")) == 3, idle
    page.wait_for_selector("#chart-running .main-svg")
    assert page.locator("#chart-running .scatterlayer .trace").count() == 2
    assert page.locator(".changed-job").count() > 0
    assert "team-a" in page.locator(".changed-job").first.inner_text()

    # 5. Apply the draft: the live quota changes, audited.
    page.click("text=Open the draft")
    page.wait_for_url(draft_url)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#apply-draft")
    page.wait_for_url(draft_url)
    assert "is now the live policy" in page.locator(".message-success").inner_text()
    assert page.locator("#no-diff").is_visible()
    assert TeamQuota.objects.get(team=personas.other_team).lend_limit is None

    page.click("nav >> text=Audit")
    page.fill("#id_object", "team-b")
    page.click("text=Filter")
    page.wait_for_url(re.compile(r"/console/audit/\?.*object=team-b"))
    rows = page.locator("#audit tbody tr").all_inner_texts()
    assert any("lend_limit" in row and "admin" in row for row in rows), rows
