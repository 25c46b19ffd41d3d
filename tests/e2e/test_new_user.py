"""What a new user tripped on, in a real browser: Cancel asks first (with and without
JavaScript), the job page's labels sit beside their values, buttons look like the product's,
and the project's documentation is served in the console and linked from it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from allocations.choices import JobState
from tests import factories as f
from tests.conftest import TIMEOUT_MS
from tests.e2e import test_dashboards
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page_without_js(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1360, "height": 900}, java_script_enabled=False)
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()
    from django.db import connections

    connections.close_all()


@pytest.mark.parametrize("with_js", [True, False], ids=["javascript", "no-javascript"])
def test_cancel_asks_for_confirmation_and_keep_it_cancels_nothing(
    live_server, page, page_without_js, personas, with_js
):
    tab = page if with_js else page_without_js
    job = f.make_job(personas.team, personas.instance_type, 2, submitter=personas.member, name="finetune")
    login(tab, live_server, personas.member)
    tab.goto(f"{live_server.url}/jobs/{job.pk}/")

    # 1. Cancel on the job page leads to a question, not to a cancelled job.
    tab.click("#cancel-job")
    tab.wait_for_selector("#cancel-confirm")
    assert tab.locator("h1").inner_text() == f"Cancel job finetune #{job.pk}?"
    assert "pending in the queue of team team-a" in tab.locator("#cancel-confirm").inner_text()
    job.refresh_from_db()
    assert job.state == JobState.PENDING

    # 2. "Keep it" goes back to the job, still pending.
    tab.click("#keep-job")
    tab.wait_for_url(re.compile(rf"/jobs/{job.pk}/$"))
    assert tab.locator("#job-state").inner_text() == "Pending"

    # 3. Asked again and confirmed, it is cancelled.
    tab.click("#cancel-job")
    tab.click("#confirm-cancel")
    tab.wait_for_url(re.compile(rf"/jobs/{job.pk}/$"))
    assert tab.locator("#job-state").inner_text() == "Cancelled"
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_job_page_labels_sit_beside_their_values_and_buttons_look_alike(live_server, page, personas):
    job = f.make_job(personas.team, personas.instance_type, 2, submitter=personas.member, name="finetune")
    login(page, live_server, personas.member)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    facts = page.locator("#job-facts")
    for label in ("State", "Team", "GPUs", "Submitted"):
        dt = facts.locator("dt", has_text=re.compile(rf"^{label}$")).bounding_box()
        dd = facts.locator(f"dt:text-is('{label}') + dd").bounding_box()
        assert dt and dd
        assert dd["x"] > dt["x"] + dt["width"], label  # to its right
        assert abs((dd["y"] + dd["height"] / 2) - (dt["y"] + dt["height"] / 2)) < dd["height"], label

    # The job page's plain Cancel button is drawn as the product's .button, not the browser's.
    def look(selector: str) -> list[str]:
        return page.eval_on_selector(
            selector,
            "e => { const s = getComputedStyle(e); return [s.backgroundColor, s.color, s.borderRadius]; }",
        )

    page.goto(f"{live_server.url}/jobs/{job.pk}/cancel/")
    product = look("#confirm-cancel")
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    plain = look("#cancel-job")
    assert plain[2] == product[2] == "6px"
    assert plain[0] != "rgb(239, 239, 239)"  # Chromium's own button face


def test_the_documentation_is_one_click_away_from_every_page(live_server, page, personas):
    login(page, live_server, personas.cluster_admin)
    page.click("#footer-docs")
    page.wait_for_url(re.compile(r"/docs/$"))
    page.click("#doc-list >> text=Glossary: the words of the governance policy")
    page.wait_for_url(re.compile(r"/docs/glossary/$"))
    assert page.locator("#doc h1").inner_text() == "Glossary: the words of the governance policy"
    assert page.locator("#doc h2#preemption").is_visible()

    # The policy form's options point at the same page.
    page.goto(f"{live_server.url}/console/policy/")
    page.click("#policy-glossary")
    page.wait_for_url(re.compile(r"/docs/glossary/$"))


def test_the_team_form_shows_only_the_borrow_cap_in_force(live_server, page, personas):
    login(page, live_server, personas.cluster_admin)
    page.goto(f"{live_server.url}/console/teams/team-a/")
    row = page.locator('tr[data-instance-type="ml.p5.48xlarge"]')
    percent = row.locator('input[name$="-borrow_limit_percent"]')
    gpus = row.locator('input[name$="-borrow_limit"]')
    kind = row.locator('select[name$="-borrow_limit_kind"]')
    assert kind.input_value() == "percent"
    assert percent.is_visible() and not gpus.is_visible()
    kind.select_option("absolute")
    assert gpus.is_visible() and not percent.is_visible()
    kind.select_option("unlimited")
    assert not gpus.is_visible() and not percent.is_visible()


def test_the_import_pages_help_sits_under_its_textarea(live_server, page, personas):
    login(page, live_server, personas.cluster_admin)
    page.goto(f"{live_server.url}/console/import/")
    textarea = page.locator("#id_document").bounding_box()
    help_text = page.locator("#import-form .help", has_text="A bundle exported by gpugov").bounding_box()
    assert textarea and help_text
    assert help_text["y"] >= textarea["y"] + textarea["height"]  # below it, not beside its bottom edge
    assert abs(help_text["x"] - textarea["x"]) < 2  # aligned with it on the left


@pytest.fixture
def recorded(personas: Any, settings: Any) -> Any:
    """The dashboards' browser tests' history (ten days backfilled, team-b borrowing now)."""
    return test_dashboards.recorded.__wrapped__(personas, settings)


def test_dashboard_charts_keep_their_axis_titles_inside_and_legends_in_words(live_server, page, recorded):
    login(page, live_server, recorded.member)
    page.goto(f"{live_server.url}/dashboards/teams/team-a/?range=1d")
    for key in ("usage", "pending", "wait_time"):
        chart = page.locator(f"#chart-{key}.js-plotly-plot")
        chart.wait_for()
        box = chart.locator(".main-svg").first.bounding_box()
        assert box
        for title in chart.locator(".g-xtitle text, .g-ytitle text, .g-y2title text").all():
            inside = title.bounding_box()
            assert inside, key
            assert box["x"] <= inside["x"] and inside["x"] + inside["width"] <= box["x"] + box["width"], key
            assert box["y"] <= inside["y"] and inside["y"] + inside["height"] <= box["y"] + box["height"], key
        legend = chart.locator(".legendtext").all_text_contents()
        assert all("_" not in name for name in legend), (key, legend)
    pending = page.locator("#chart-pending .legendtext").all_text_contents()
    assert "GPUs asked by pending jobs" in pending
