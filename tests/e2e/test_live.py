"""In a real browser: the capacity page follows a job that starts without a reload (it polls its
fragment, static/js/live.js, like the queue page); a node's page lists the jobs on it; a member
sees the cluster's free capacity and no other team's jobs.

With ``GPUGOV_SCREENSHOTS=<folder>`` each test also saves its page there (the screenshots of
docs/console.md: ``GPUGOV_SCREENSHOTS=docs/screenshots pytest tests/e2e/test_live.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from allocations.choices import JobState
from allocations.models import Job
from allocations.services import jobs as job_services
from allocations.services.loop import run_allocation_cycle
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]


def cycle() -> None:
    run = run_allocation_cycle(trigger="test")
    assert run is not None and not run.errors, run and run.errors


def screenshot(page: Any, name: str) -> None:
    """Save the page for the docs when asked to (small: the viewport, not the whole page)."""
    folder = os.environ.get("GPUGOV_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1200, "height": 760})
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


def submit(personas: Any, team: Any, user: Any, name: str, gpus: int) -> Job:
    return job_services.job_submit(
        user=user, team=team, name=name, instance_type=personas.instance_type, gpus=gpus, command="sleep 3600"
    )


def test_the_capacity_page_follows_a_job_that_starts_without_a_reload(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    submit(personas, personas.other_team, personas.other_member, "b-train", 4)
    cycle()
    login(page, live_server, personas.cluster_admin)
    page.goto(f"{live_server.url}/")
    card = page.locator(f"#type-{personas.instance_type.pk}")
    assert card.locator(".used-gpus").inner_text() == "4 of 16 ready GPUs"
    assert card.locator('tr[data-team="team-a"] td.used').inner_text() == "0"
    page.evaluate("window.__gpugovMarker = 'not reloaded'")

    # team-a starts 12 GPUs: 8 within its quota and 4 borrowed (from unallocated: none; from
    # team-b's unused quota: 4).
    jobs = [
        submit(personas, personas.team, personas.member, "a-train", 8),
        submit(personas, personas.team, personas.member, "a-eval", 4),
    ]
    cycle()
    assert {Job.objects.get(pk=job.pk).state for job in jobs} == {JobState.RUNNING}
    card.locator(".used-gpus", has_text="16 of 16 ready GPUs").wait_for()
    row = card.locator('tr[data-team="team-a"]')
    assert (row.locator("td.used").inner_text(), row.locator("td.borrowed").inner_text()) == ("8", "4")
    assert card.locator('tr[data-team="team-b"] td.lent').inner_text() == "4"
    assert page.evaluate("window.__gpugovMarker") == "not reloaded"

    # A job that has to wait shows as pending GPUs, with its wait.
    submit(personas, personas.other_team, personas.other_member, "b-waits", 8)
    cycle()
    card.locator(".pending", has_text="8 GPUs in 1 job, oldest waiting").wait_for()
    assert card.locator('tr[data-team="team-b"] td.pending').inner_text() == "8"
    assert page.evaluate("window.__gpugovMarker") == "not reloaded"
    screenshot(page, "capacity")


def test_a_nodes_page_lists_its_jobs(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    job = submit(personas, personas.team, personas.member, "on-this-node", 8)
    cycle()
    job.refresh_from_db()
    node_name = job.nodes[0][0]
    login(page, live_server, personas.cluster_admin)
    page.goto(f"{live_server.url}/console/nodes/")
    page.click(f"text={node_name}")
    page.wait_for_url("**/console/nodes/*/")
    row = page.locator(f"#node-jobs tr#job-{job.pk}")
    assert "on-this-node" in row.inner_text() and "team-a" in row.inner_text()
    assert page.locator("#node-used").inner_text() == "8 of 8"

    page.select_option('#node-state-form select[name="state"]', "draining")
    page.fill('#node-state-form input[name="reason"]', "firmware update")
    page.click("#node-state-form button[type=submit]")
    page.locator('#node-state[data-state="draining"]').wait_for()
    assert "firmware update" in page.locator('#node-history tr[data-state="draining"]').inner_text()
    screenshot(page, "node")


def test_a_member_sees_free_capacity_and_no_other_teams_jobs(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    submit(personas, personas.other_team, personas.other_member, "team-b-secret-run", 6)
    cycle()
    login(page, live_server, personas.member)
    page.goto(f"{live_server.url}/my-teams/")
    row = page.locator('#free-capacity tr[data-instance-type="ml.p5.48xlarge"]')
    assert row.locator("td.free").inner_text() == "10"
    assert row.locator("td.used").inner_text() == "6"
    text = page.locator("body").inner_text()
    assert "team-b-secret-run" not in text and "team-b" not in text
    screenshot(page, "free-capacity")
    page.goto(f"{live_server.url}/teams/team-a/submit/")
    assert page.locator('#free-capacity tr[data-instance-type="ml.p5.48xlarge"] td.free').inner_text() == "10"
    assert "team-b-secret-run" not in page.locator("body").inner_text()
