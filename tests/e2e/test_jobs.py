"""In a real browser: the console's job list finds a job by its submitter, and on a busy demo
cluster no estimated start contradicts the queue's positions (within a team and instance type a
job starts no sooner than the job ahead of it, or its estimate says why)."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from allocations.choices import JobState
from allocations.models import InstanceType, Job, PriorityClass, Team, TeamQuota
from allocations.services import jobs as job_services
from allocations.services.loop import run_allocation_cycle
from tests.conftest import PASSWORD
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]


def cycle() -> None:
    run = run_allocation_cycle(trigger="test")
    assert run is not None and not run.errors, run and run.errors


def busy_demo(pending_target: int = 120) -> Any:
    """``manage.py load_demo``'s cluster, filled by its teams' users through the submit service
    until about ``pending_target`` jobs wait: random sizes, classes and durations (seeded)."""
    call_command("load_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    admin = get_user_model().objects.get(username="admin")
    admin.set_password(PASSWORD)
    admin.save()
    rng = random.Random(32)
    classes = [None, *PriorityClass.objects.all()]
    quotas = list(TeamQuota.objects.filter(quota__gt=0).select_related("team", "instance_type"))
    users = {
        team.pk: get_user_model().objects.get(username=f"{team.name}.dev") for team in Team.objects.all()
    }
    for i in range(pending_target + 60):
        quota = rng.choice(quotas)
        per_node = quota.instance_type.gpus_per_node
        gpus = rng.choice([1, 2, per_node // 2, per_node, per_node, 2 * per_node])
        job_services.job_submit(
            user=users[quota.team_id],
            team=quota.team,
            name=f"demo-{i}",
            instance_type=quota.instance_type,
            gpus=gpus,
            priority_class=rng.choice(classes),
            command="python train.py",
            requested_duration=rng.choice([1800, 3600, 4 * 3600, 12 * 3600]),
        )
        if i % 40 == 39:
            cycle()
    cycle()
    return admin


def read_rows(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        "#job-list tbody tr[data-state=pending]",
        """rows => rows.map(r => ({
            id: r.id, team: r.dataset.team, type: r.dataset.instanceType,
            position: r.dataset.position, estimate: r.dataset.estimate,
            why: (r.querySelector('.estimate-why') || {}).textContent || '',
            text: r.querySelector('td.estimate').textContent.trim(),
        }))""",
    )


# Long: loads the demo cluster, submits about 180 jobs through the service and runs cycles.
def test_estimates_never_contradict_positions_on_a_busy_demo(
    live_server: Any, page: Any, transactional_db: None
) -> None:
    admin = busy_demo()
    assert Job.objects.filter(state=JobState.PENDING).count() > 50
    assert Job.objects.filter(state=JobState.RUNNING).exists()
    login(page, live_server, admin)
    # Every pending job, a team's queue after another (the list sorts by team, then by id).
    rows: list[dict[str, str]] = []
    page.goto(f"{live_server.url}/console/jobs/?state=pending&sort=team")
    while True:
        rows += read_rows(page)
        following = page.locator("nav.pagination a", has_text="Next")
        if not following.count():
            break
        following.first.click()
        page.wait_for_load_state()
    assert len(rows) == Job.objects.filter(state=JobState.PENDING).count()
    checked = check_order(rows)
    assert checked > 20, checked  # the demo was busy enough to check something

    # The team queue page of the team with the most waiting jobs says the same.
    team = max({row["team"] for row in rows}, key=lambda name: sum(r["team"] == name for r in rows))
    page.goto(f"{live_server.url}/teams/{team}/")
    queue_rows = page.eval_on_selector_all(
        "#pending-jobs tbody tr[data-state=pending]",
        """rows => rows.map(r => ({
            id: r.id, team: '', type: r.dataset.instanceType,
            position: r.querySelector('td.position').textContent.trim(),
            estimate: r.querySelector('td.estimate').dataset.estimate,
            why: (r.querySelector('.estimate-why') || {}).textContent || '',
            text: r.querySelector('td.estimate').textContent.trim(),
        }))""",
    )
    assert len(queue_rows) == sum(row["team"] == team for row in rows)
    check_order(queue_rows)


def check_order(rows: list[dict[str, str]]) -> int:
    """Within each team and instance type, in the order of the positions: an estimate earlier
    than one ahead (or after an unknown one) carries its why, and so does every "unknown".
    Returns how many known estimates were checked."""
    queues: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in rows:
        queues.setdefault((row["team"], row["type"]), []).append(row)
    checked = 0
    for queue in queues.values():
        queue.sort(key=lambda row: int(row["position"]))
        latest: datetime | None = None  # the latest estimate of the jobs ahead
        unknown_ahead = False
        for row in queue:
            if not row["estimate"]:
                assert row["text"].startswith("unknown") and row["why"], row
                unknown_ahead = True
                continue
            start = datetime.fromisoformat(row["estimate"])
            if unknown_ahead or (latest is not None and start < latest):
                assert row["why"], (row, latest)
            checked += 1
            latest = start if latest is None else max(latest, start)
    return checked


def test_search_finds_a_job_by_its_submitter(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    it = InstanceType.objects.get(name="ml.p5.48xlarge")
    for user, team, name in (
        (personas.member, personas.team, "bobs-run"),
        (personas.other_member, personas.other_team, "olgas-run"),
        (personas.team_admin, personas.team, "alices-run"),
    ):
        job_services.job_submit(user=user, team=team, name=name, instance_type=it, gpus=1, command="true")
    login(page, live_server, personas.cluster_admin)
    page.goto(f"{live_server.url}/console/jobs/")
    page.fill("#id_q", "olga")
    page.click("#job-filters button[type=submit]")
    page.wait_for_url("**/console/jobs/?*q=olga*")
    names = page.locator("#job-list tbody tr td:nth-child(2) a").all_inner_texts()
    assert names == ["olgas-run"]
    assert page.locator("#job-list tbody tr .submitter").all_inner_texts() == ["olga"]
    # A bad sort in the address is named with its value, not a server error.
    page.goto(f"{live_server.url}/console/jobs/?sort=secret")
    assert "sort=secret: not a column this list sorts by" in page.locator("#job-filter-errors").inner_text()
