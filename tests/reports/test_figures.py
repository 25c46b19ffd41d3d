"""The figures of a weekly report, checked against a hand-worked fixture week.

The fixture cluster lives in Europe/Berlin (UTC+1 in November), so week 2026-W47 runs from
2026-11-15T23:00Z to 2026-11-22T23:00Z: the hours just outside it belong to W46 and W48.
"""

from __future__ import annotations

from datetime import date

import pytest

from allocations.reports.figures import Jobs, weekly_figures
from allocations.reports.weeks import Week
from tests import factories as f
from tests.reports.conftest import hour, utc


def test_week_is_monday_to_monday_in_the_cluster_time_zone():
    week = Week.parse("2026-W47", "Europe/Berlin")
    assert (week.start, week.end) == (utc(2026, 11, 15, 23), utc(2026, 11, 22, 23))
    assert week.monday == date(2026, 11, 16)
    assert Week.last_complete(utc(2026, 11, 23, 6), "Europe/Berlin").label == "2026-W47"
    assert Week.last_complete(utc(2026, 11, 22, 22, 59), "Europe/Berlin").label == "2026-W46"


@pytest.mark.parametrize("text", ["2026-47", "2026-W54", "2025-W53", "W47", ""])
def test_a_bad_week_is_refused_with_its_value(text):
    with pytest.raises(ValueError, match=f"week: {text!r}"):
        Week.parse(text, "UTC")


def test_team_figures_equal_the_hand_worked_week(week_of_history, django_assert_num_queries):
    with django_assert_num_queries(9):
        report = weekly_figures(Week.parse("2026-W47", "Europe/Berlin"))
    a = report.team("team-a")
    # GPU-hours: quota 8+8, used within quota 4+1, borrowed 2, idle quota 4+7.
    assert (a.usage.quota, a.usage.used_within_quota, a.usage.borrowed) == (16, 5, 2)
    assert (a.usage.lent, a.usage.idle_quota) == (0, 11)
    assert a.usage.quota_utilization == 5 / 16
    # Chargeback at 10 per GPU-hour.
    assert (a.usage.cost_own, a.usage.cost_borrowed) == (50, 20)
    assert a.jobs == Jobs(
        started=2,
        finished=2,
        failed=0,
        waits=(1800.0, 1800.0, 21600.0),
        preemptions_suffered={"reclaim": 1},
        preemptions_caused=0,
        gpu_hours_lost=4.0,
        preemptions_recorded=1,
    )
    assert a.jobs.mean_wait == 8400 and a.jobs.p95_wait == 21600
    assert [(r.code, r.job_hours, r.gpu_hours) for r in a.pending_reasons] == [
        ("borrow-limit", 0.25, 0.5),
        ("waiting-for-quota", 5 / 60, 5 / 60),
    ]
    # Daily rows in local days: Monday gets the 23:00Z hour, Sunday the 22:00Z one.
    assert [(r.day, r.usage.used_within_quota, r.usage.borrowed) for r in a.daily] == [
        (date(2026, 11, 16), 4, 2),
        (date(2026, 11, 22), 1, 0),
    ]
    assert [w.week for w in a.trend] == [f"2026-W{n}" for n in range(40, 48)]
    assert (a.trend[-2].usage.used_within_quota, a.trend[-2].usage.quota) == (8, 8)  # W46
    b = report.team("team-b")
    assert b.jobs.preemptions_caused == 1 and b.usage.lent == 2


def test_cluster_figures_and_recommendations(week_of_history):
    report = weekly_figures(Week.parse("2026-W47", "Europe/Berlin"))
    assert (report.capacity, report.allocated, report.idle, report.idle_while_waiting) == (16, 6, 10, 2)
    assert report.hours_sampled == 1
    assert report.usage.used_within_quota == 5 and report.usage.lent == 2
    assert report.top_borrowers == (("team-a", 2.0),) and report.top_lenders == (("team-b", 2.0),)
    assert report.jobs.preempted == 1 and report.jobs.preemptions_caused == 1
    assert report.pending_reasons[0].code == "borrow-limit"
    kinds = {(r.kind, r.team) for r in report.recommendations}
    assert kinds == {("lower-quota", "team-b"), ("raise-borrow-limit", "team-a")}
    borrow = next(r for r in report.recommendations if r.kind == "raise-borrow-limit")
    assert "0.2 job-hours (0.5 GPU-hours)" in borrow.evidence and "2.0 GPU-hours" in borrow.evidence
    underused = next(r for r in report.recommendations if r.kind == "lower-quota")
    assert "2026-W44 0%" in underused.evidence and "2026-W47 0%" in underused.evidence
    assert report.trend_capacity[-1] == ("2026-W47", 16, 2)


def test_query_count_does_not_grow_with_teams(week_of_history, django_assert_num_queries):
    for i in range(5):
        team = f.make_team(f"extra-{i}", {week_of_history.instance_type: 1})
        hour(team, week_of_history.instance_type, utc(2026, 11, 17, 5), quota_gpu_minutes=60)
    with django_assert_num_queries(9):
        report = weekly_figures(Week.parse("2026-W47", "Europe/Berlin"))
    assert report.team("extra-3").usage.quota == 1


def test_borrowing_from_unallocated_capacity_is_named_in_the_cluster_report(week_of_history):
    from dataclasses import replace

    from allocations.reports.charts import cluster_charts
    from allocations.reports.email import cluster_content

    def lending_rows(report):
        table = next(t for t in cluster_content(report).tables if t.title == "Who lent and who borrowed most")
        return table.rows

    report = weekly_figures(Week.parse("2026-W47", "Europe/Berlin"))
    # team-a borrowed the 2 GPU-hours team-b lent: nothing came from unallocated capacity.
    assert report.borrowed_from_unallocated == 0
    assert not any("unallocated" in row[1] for row in lending_rows(report))
    # Teams borrowed 802 GPU-hours and lent 2: 800 came from capacity in no team's quota.
    more = replace(report, usage=replace(report.usage, borrowed=802.0))
    assert more.borrowed_from_unallocated == 800
    assert ("borrowed from", "unallocated capacity (in no team's quota)", "800.0") in lending_rows(more)
    lending = next(c for c in cluster_charts(more) if c.key == "lending")
    assert lending.rows[-1] == ("unallocated capacity", 0.0, 800.0)
