"""A figure shown in two places is the same figure: over a backfilled history (two days, the
personas' two teams), the weekly reports and the dashboards count the same jobs, waits,
preemptions and GPU-hours. The demo's reports once said "Jobs run 0" and "No job waited"
beside thousands of GPU-hours, while its dashboards drew thousands of waits and preemptions."""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Min
from django.test import Client
from django.utils import timezone

from allocations.charts import WAIT_BINS
from allocations.models import CapacityRollup, JobEvent
from allocations.reports import email as report_email
from allocations.reports.figures import ClusterReport, weekly_figures
from allocations.reports.weeks import Week
from allocations.selectors import history as selectors

TEAMS = ("team-a", "team-b")


@pytest.fixture
def backfilled(personas, settings):  # type: ignore[no-untyped-def]
    """Two days up to now: the older one as hour rollups, the last one as minutes."""
    settings.HISTORY_MINUTE_DAYS = 1
    call_command("backfill_demo_history", "--days", "2", "--seed", "4", stdout=StringIO())
    return personas


def _weeks() -> list[Week]:
    """The calendar weeks (the cluster's, UTC) that hold the whole history."""
    first = CapacityRollup.objects.aggregate(m=Min("start"))["m"]
    week, last = Week.containing(first, "UTC"), Week.containing(timezone.now(), "UTC")
    weeks = [week]
    while weeks[-1] != last:
        weeks.append(weeks[-1].shifted(1))
    return weeks


def _csv(client: Client, url: str) -> list[dict[str, str]]:
    response = client.get(url, {"range": "7d"})
    assert response.status_code == 200, url
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def _binned(waits: list[float]) -> dict[str, int]:
    counts = dict.fromkeys((label for label, _ in WAIT_BINS), 0)
    for wait in waits:
        counts[next(label for label, upper in WAIT_BINS if wait < upper)] += 1
    return counts


def test_reports_and_dashboards_agree_on_a_backfilled_history(backfilled: Any) -> None:
    reports: list[ClusterReport] = [weekly_figures(week) for week in _weeks()]
    admin = Client()
    admin.force_login(backfilled.cluster_admin)
    window = selectors.window_for("7d", timezone.now())
    assert window.start < CapacityRollup.objects.aggregate(m=Min("start"))["m"]  # the dashboards see it all
    totals = {t["team"]: t for t in selectors.team_totals(window)}
    lending = {row["team"]: row for row in _csv(admin, "/dashboards/cluster/lending.csv")}

    preempted_in_reports: Counter[str] = Counter()
    for team in TEAMS:
        parts = [report.team(team) for report in reports]
        # 1. Waits: one per start, the same on the team's wait chart as in its reports.
        waits = [wait for part in parts for wait in part.jobs.waits]
        chart = {
            row["wait"]: int(row["jobs"]) for row in _csv(admin, f"/dashboards/teams/{team}/wait_time.csv")
        }
        assert waits and chart == _binned(waits), team
        assert sum(part.jobs.started for part in parts) > 0
        # 2. Preemptions by reason: the team's chart, its reports, and its jobs' events.
        shown: Counter[str] = Counter()
        for row in _csv(admin, f"/dashboards/teams/{team}/preemptions.csv"):
            shown[row["reason"]] += int(row["preemptions"])
        reported: Counter[str] = Counter()
        for part in parts:
            reported.update(part.jobs.preemptions_suffered)
            assert part.jobs.unrecorded == 0 and part.jobs.preemptions_recorded == part.jobs.preempted
        assert shown == reported, team
        preempted_in_reports += reported
        events = JobEvent.objects.filter(kind="preempted", job__team__name=team).count()
        assert sum(reported.values()) == events
        # 3. GPU-hours: used (the stacked usage), borrowed and lent (the lending chart).
        used = sum(part.usage.used for part in parts)
        assert used > 0 and totals[team]["used_gpu_hours"] == pytest.approx(used)
        for key, figure in (("borrowed", "borrowed"), ("lent", "lent")):
            in_reports = sum(getattr(part.usage, figure) for part in parts)
            assert float(lending[team][f"{key}_gpu_hours"]) == pytest.approx(in_reports, abs=0.01)

    cluster: Counter[str] = Counter()
    for row in _csv(admin, "/dashboards/cluster/preemptions.csv"):
        cluster[row["reason"]] += int(row["preemptions"])
    assert sum(cluster.values()) > 0 and cluster == preempted_in_reports
    merged: Counter[str] = Counter()
    for report in reports:
        merged.update(report.jobs.preemptions_suffered)
    assert merged == cluster


def test_a_report_says_why_jobs_waited_when_the_history_says_they_did(backfilled: Any) -> None:
    by_week: dict[str, list[str]] = defaultdict(list)
    for week in _weeks():
        report = weekly_figures(week)
        content = report_email.cluster_content(report)
        notes = [table.note for table in content.tables if table.title == "Most frequent pending reasons"]
        if report.pending_job_hours > 0.05:
            assert report.pending_reasons, week.label
            assert notes == [""], week.label
        by_week[week.label] = [r.code for r in report.pending_reasons]
    assert any(by_week.values())


def test_a_history_without_job_records_is_said_to_lack_them(backfilled: Any) -> None:
    """Counts from the history with no JobEvent behind them (an imported history, say): the
    report keeps the history's preemptions, as the dashboards do, and names what it lacks."""
    JobEvent.objects.filter(kind__in=["preempted", "requeued"]).delete()
    for week in _weeks():
        report = weekly_figures(week)
        if not report.jobs.preempted:
            continue
        assert report.jobs.preemptions_recorded == 0 and report.jobs.gpu_hours_lost == 0
        text = " ".join(report_email.cluster_content(report).notes)
        assert (
            f"{report.jobs.preempted:,} of the {report.jobs.preempted:,} preemptions have no job record"
            in text
        )
        return
    pytest.fail("no week of the history counted a preemption")


def test_a_week_without_pending_reason_samples_does_not_say_no_job_waited(backfilled: Any) -> None:
    from allocations.models import PendingReasonSample

    PendingReasonSample.objects.all().delete()
    week = max(_weeks(), key=lambda w: weekly_figures(w).pending_job_hours)
    report = weekly_figures(week)
    assert report.pending_job_hours > 0
    note = next(
        t.note for t in report_email.cluster_content(report).tables if t.title.startswith("Most frequent")
    )
    assert "No job waited" not in note and "no pending reason was sampled" in note


def test_the_dashboard_window_covers_the_hours_its_rows_stand_for() -> None:
    now = timezone.now()
    window = selectors.window_for("7d", now)
    start, end = window.span
    assert (start, end) == (window.start + timedelta(hours=1), window.end + timedelta(hours=1))
    assert start <= now - timedelta(days=7) + timedelta(hours=1) and end > now


def test_reports_and_dashboards_agree_on_the_gpu_hours_lost_to_preemption(backfilled: Any) -> None:
    """The reports read each preempted event's lost work; the dashboards the history, which
    the sampler (here the backfill, by the same rule) adds up from those events."""
    reports: list[ClusterReport] = [weekly_figures(week) for week in _weeks()]
    admin = Client()
    admin.force_login(backfilled.cluster_admin)
    total = 0.0
    for team in TEAMS:
        in_reports = sum(report.team(team).jobs.gpu_hours_lost for report in reports)
        rows = _csv(admin, f"/dashboards/teams/{team}/lost_work.csv")
        shown = sum(float(row["lost_gpu_hours"]) for row in rows)
        assert in_reports > 0 and shown == pytest.approx(in_reports, rel=1e-3, abs=0.01), team
        # Every preemption is in one run-time band: the events all record their run.
        by_run: Counter[str] = Counter()
        for row in _csv(admin, f"/dashboards/teams/{team}/victim_runtime.csv"):
            by_run[row["victim_ran"]] += int(row["preemptions"])
        assert "unknown" not in by_run
        assert sum(by_run.values()) == sum(report.team(team).jobs.preempted for report in reports)
        total += in_reports
    cluster = sum(float(row["lost_gpu_hours"]) for row in _csv(admin, "/dashboards/cluster/lost_work.csv"))
    assert cluster == pytest.approx(total, rel=1e-3, abs=0.01)
    assert sum(report.jobs.gpu_hours_lost for report in reports) == pytest.approx(total)
