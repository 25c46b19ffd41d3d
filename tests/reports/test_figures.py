"""The figures of a weekly report, checked against a hand-worked fixture week.

The fixture cluster lives in Europe/Berlin (UTC+1 in November), so week 2026-W47 runs from
2026-11-15T23:00Z to 2026-11-22T23:00Z: the hours just outside it belong to W46 and W48.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from allocations.models import (
    CapacityRollup,
    Cluster,
    InstanceType,
    JobEvent,
    PendingReasonSample,
    TeamUsageRollup,
)
from allocations.reports.figures import Jobs, weekly_figures
from allocations.reports.weeks import Week
from tests import factories as f


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def hour(team, instance_type, start, **sums) -> TeamUsageRollup:
    return TeamUsageRollup.objects.create(
        period="hour", start=start, team=team, instance_type=instance_type, **sums
    )


def event(job, kind, at, **fields) -> JobEvent:
    return JobEvent.objects.create(job=job, kind=kind, at=at, **fields)


@pytest.fixture
def week_of_history(personas):
    """The hand-worked week (numbers in the comments are what the assertions expect)."""
    Cluster.objects.filter(pk=1).update(time_zone="Europe/Berlin")
    p5 = personas.instance_type
    InstanceType.objects.filter(pk=p5.pk).update(price_per_gpu_hour=10)
    a, b = personas.team, personas.other_team
    # team-a: the first hour of W47 (Monday 00:00 Berlin) and its last hour (Sunday 23:00).
    hour(
        a,
        p5,
        utc(2026, 11, 15, 23),
        quota_gpu_minutes=480,
        used_within_quota_gpu_minutes=240,
        borrowed_gpu_minutes=120,
        idle_quota_gpu_minutes=240,
        preempted_reclaim=1,
    )
    hour(
        a,
        p5,
        utc(2026, 11, 22, 22),
        quota_gpu_minutes=480,
        used_within_quota_gpu_minutes=60,
        idle_quota_gpu_minutes=420,
    )
    # Just outside W47: Sunday 23:00 Berlin of W46 (fully used), and Monday 00:00 of W48.
    hour(a, p5, utc(2026, 11, 15, 22), quota_gpu_minutes=480, used_within_quota_gpu_minutes=480)
    hour(a, p5, utc(2026, 11, 22, 23), quota_gpu_minutes=480, used_within_quota_gpu_minutes=480)
    # team-b lends 2 GPUs for an hour of W47 and uses none of its quota in W44 to W47.
    hour(
        b, p5, utc(2026, 11, 16, 10), quota_gpu_minutes=480, lent_gpu_minutes=120, idle_quota_gpu_minutes=360
    )
    for monday in (utc(2026, 10, 26, 12), utc(2026, 11, 2, 12), utc(2026, 11, 9, 12)):
        hour(b, p5, monday, quota_gpu_minutes=480, idle_quota_gpu_minutes=480)
    CapacityRollup.objects.create(
        period="hour",
        start=utc(2026, 11, 15, 23),
        instance_type=p5,
        minutes=60,
        capacity_gpu_minutes=960,
        allocated_gpu_minutes=360,
        idle_gpu_minutes=600,
        idle_while_waiting_gpu_minutes=120,
    )
    # Jobs. job1 (2 GPUs): waits 30 min, runs 2 h, preempted by team-b, requeued, waits 30 min.
    job1 = f.make_job(a, p5, 2, submitted_at=utc(2026, 11, 16, 8))
    preemptor = f.make_job(b, p5, 8, submitted_at=utc(2026, 11, 16, 10))
    event(job1, "submitted", utc(2026, 11, 16, 8))
    event(job1, "started", utc(2026, 11, 16, 8, 30))
    event(job1, "preempted", utc(2026, 11, 16, 10, 30), reason="reclaim", preemptor=preemptor)
    event(job1, "requeued", utc(2026, 11, 16, 10, 30), reason="reclaim")
    event(job1, "started", utc(2026, 11, 16, 11))
    event(job1, "finished", utc(2026, 11, 16, 12))
    # job2 (1 GPU): submitted in W46, starts 6 h later in W47, ends in W48.
    job2 = f.make_job(a, p5, 1, submitted_at=utc(2026, 11, 15, 20))
    event(job2, "submitted", utc(2026, 11, 15, 20))
    event(job2, "started", utc(2026, 11, 16, 2))
    event(job2, "finished", utc(2026, 11, 23, 1))
    # job3: started in W46, finished in W47 (counts as finished, not as started).
    job3 = f.make_job(a, p5, 1, submitted_at=utc(2026, 11, 14))
    event(job3, "started", utc(2026, 11, 14, 1))
    event(job3, "finished", utc(2026, 11, 17))
    # Pending reasons: 5-minute samples in the week, and one before it (ignored).
    for at, code, jobs, gpus in [
        (utc(2026, 11, 16, 9), "borrow-limit", 2, 4),
        (utc(2026, 11, 16, 9, 5), "borrow-limit", 1, 2),
        (utc(2026, 11, 16, 9), "waiting-for-quota", 1, 1),
        (utc(2026, 11, 15, 22), "borrow-limit", 50, 50),
    ]:
        PendingReasonSample.objects.create(
            at=at, team=a, instance_type=p5, code=code, jobs=jobs, gpus=gpus, minutes=5
        )
    return personas


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
    with django_assert_num_queries(8):
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
    with django_assert_num_queries(8):
        report = weekly_figures(Week.parse("2026-W47", "Europe/Berlin"))
    assert report.team("extra-3").usage.quota == 1
