"""In a real browser (the console's Playwright fixtures, tests/e2e/conftest.py): a member
submits a job that has to wait and sees why and where it stands; after the job blocking it is
cancelled and a cycle runs, the queue page shows it running without a reload (the page polls
its fragment, static/js/live.js)."""

from __future__ import annotations

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


def test_a_waiting_job_shows_its_reason_and_position_then_runs_without_a_reload(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    base = live_server.url
    # 1. Team-a's admin runs 8 GPUs: the team's quota. Its limit is 12 (8 + 50%).
    blocker = job_services.job_submit(
        user=personas.team_admin,
        team=personas.team,
        name="blocker",
        instance_type=personas.instance_type,
        gpus=8,
        command="sleep 3600",
    )
    cycle()
    assert Job.objects.get(pk=blocker.pk).state == JobState.RUNNING

    # 2. The member submits 8 more GPUs through the form: 16 > 12, it has to wait.
    login(page, live_server, personas.member)
    page.goto(f"{base}/teams/team-a/submit/")
    page.fill("#id_name", "waits")
    page.select_option("#id_instance_type", "ml.p5.48xlarge")
    page.fill("#id_gpus", "8")
    page.fill("#id_command", "python train.py")
    page.click("#job-submit-form button[type=submit]")
    page.wait_for_url("**/jobs/*/")
    waiting = Job.objects.get(name="waits")
    cycle()  # the engine records why it waits
    waiting.refresh_from_db()
    assert (waiting.state, waiting.pending_reason_code) == (JobState.PENDING, "borrow-limit")

    page.goto(f"{base}/teams/team-a/")
    row = page.locator(f"#pending-jobs tr#job-{waiting.pk}")
    assert row.locator("td.position").inner_text() == "1"
    reason = row.locator("td.reason").inner_text()
    assert "borrow-limit" in reason and "12" in reason, reason

    # 3. The blocker is cancelled and a cycle runs; the open page shows the job running.
    page.evaluate("window.__gpugovMarker = 'not reloaded'")
    job_services.job_cancel(user=personas.team_admin, job=blocker)
    cycle()
    if Job.objects.get(pk=waiting.pk).state != JobState.RUNNING:
        cycle()  # the first cycle may only stop the cancelled job on the backend
    assert Job.objects.get(pk=waiting.pk).state == JobState.RUNNING
    page.locator(f"#running-jobs tr#job-{waiting.pk}").wait_for(timeout=15_000)
    assert page.locator(f"#pending-jobs tr#job-{waiting.pk}").count() == 0
    assert page.evaluate("window.__gpugovMarker") == "not reloaded"


def test_the_job_page_follows_the_job_without_a_reload(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    job = job_services.job_submit(
        user=personas.member,
        team=personas.team,
        name="follow-me",
        instance_type=personas.instance_type,
        gpus=8,
        command="python train.py",
    )
    login(page, live_server, personas.member)
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    assert page.locator("#job-state").get_attribute("data-state") == "pending"
    page.evaluate("window.__gpugovMarker = 'not reloaded'")

    cycle()
    page.locator('#job-state[data-state="running"]').wait_for()
    assert page.locator('#job-history tr[data-kind="started"]').count() == 1
    assert page.evaluate("window.__gpugovMarker") == "not reloaded"
