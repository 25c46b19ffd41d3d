"""In a real browser: every dashboard draws its Plotly charts with data, and switching the range
redraws them from the data endpoint (static/js/dashboards.js) without a page load."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone

from allocations.choices import JobState
from allocations.models import TeamUsageMinute
from allocations.services import history
from tests import factories as f
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]

CLUSTER_CHARTS = [
    "capacity",
    "idle_while_waiting",
    "lending",
    "fair_share",
    "preemptions",
    "lost_work",
    "victim_runtime",
]
TEAM_CHARTS = ["usage", "pending", "wait_time"]  # a team with no preemption has an empty chart


@pytest.fixture
def recorded(personas: Any, settings: Any) -> Any:
    """Ten days of backfilled history plus live minutes: team-b borrows from team-a now, and the
    last minute counts a preemption (the demo's workload is lighter on some days of the week,
    so the backfill alone may leave the last day without one)."""
    settings.HISTORY_MINUTE_DAYS = 2
    call_command("backfill_demo_history", "--days", "10", "--old-step", "30", stdout=StringIO())
    now = timezone.now()
    nodes = personas.nodes
    # The backfill's last minute also counts a preemption (a victim of 20 minutes, 4 GPUs).
    last = TeamUsageMinute.objects.latest("minute")
    TeamUsageMinute.objects.filter(pk=last.pk).update(
        preempted_reclaim=F("preempted_reclaim") + 1,
        preempted_ran_10_to_60m=F("preempted_ran_10_to_60m") + 1,
        lost_gpu_seconds=F("lost_gpu_seconds") + 4 * 1200.0,
    )
    f.make_job(
        personas.other_team,
        personas.instance_type,
        12,
        state=JobState.RUNNING,
        submitted_at=now - timedelta(hours=1),
        started_at=now - timedelta(minutes=50),
        nodes=[[nodes[0].name, 8], [nodes[1].name, 4]],
    )
    history.history_sample(now=now)
    return personas


def _watch_console(page: Any) -> list[str]:
    """Errors the page logs (a script refused by the Content-Security-Policy shows up here)."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _charts_have_data(page: Any, keys: list[str]) -> None:
    for key in keys:
        chart = page.locator(f"#chart-{key}.js-plotly-plot")
        chart.wait_for()
        assert chart.locator(".trace").count() > 0, key


def _switch_range(page: Any, key: str) -> None:
    with page.expect_response(lambda r: "data.json" in r.url and f"range={key}" in r.url) as response:
        page.select_option("#filter-range", key)
    assert response.value.status == 200
    page.wait_for_url(f"**range={key}*")


def test_the_cluster_dashboard_draws_every_chart_and_switches_range(live_server, page, recorded) -> None:  # type: ignore[no-untyped-def]
    errors = _watch_console(page)
    login(page, live_server, recorded.cluster_admin)
    page.goto(f"{live_server.url}/dashboards/cluster/?range=1d")
    _charts_have_data(page, CLUSTER_CHARTS)
    assert "minute resolution" in page.inner_text("#dashboard-status")

    _switch_range(page, "30d")
    page.wait_for_function("() => document.querySelector('#dashboard-status').textContent.includes('hour')")
    _charts_have_data(page, CLUSTER_CHARTS)
    csv_href = page.get_attribute("#section-capacity .csv-link", "href")
    assert csv_href.endswith("/dashboards/cluster/capacity.csv?range=30d")
    assert page.request.get(f"{live_server.url}{csv_href}").text().startswith("time,series,gpus\n")
    assert errors == []


def test_a_member_sees_their_teams_dashboard_drawn(live_server, page, recorded) -> None:  # type: ignore[no-untyped-def]
    errors = _watch_console(page)
    login(page, live_server, recorded.member)
    page.goto(f"{live_server.url}/dashboards/")
    page.click("text=Team A")
    page.wait_for_url("**/dashboards/teams/team-a/")
    _charts_have_data(page, TEAM_CHARTS)
    _switch_range(page, "1y")
    page.wait_for_function("() => document.querySelector('#dashboard-status').textContent.includes('day')")
    _charts_have_data(page, TEAM_CHARTS)
    assert errors == []
    # The other team's dashboard does not exist for this member.
    assert page.goto(f"{live_server.url}/dashboards/teams/team-b/").status == 404
