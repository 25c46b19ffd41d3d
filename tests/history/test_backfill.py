"""backfill_demo_history: plausible, consistent history for the teams in the database."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F, Max, Min, Sum
from django.utils import timezone

from allocations.models import CapacityMinute, CapacityRollup, Job, TeamUsageMinute, TeamUsageRollup


@pytest.fixture
def backfilled(personas, settings):  # type: ignore[no-untyped-def]
    settings.HISTORY_MINUTE_DAYS = 3
    out = StringIO()
    call_command("backfill_demo_history", "--days", "10", "--seed", "1", stdout=out)
    return out.getvalue()


def test_recent_days_are_minutes_and_older_ones_hours_and_days(backfilled: str) -> None:
    assert backfilled.startswith("backfilled 10 days for 2 teams x 1 instance types")
    now = timezone.now()
    first_minute = CapacityMinute.objects.aggregate(m=Min("minute"))["m"]
    assert now - timedelta(days=3, hours=1) < first_minute <= now - timedelta(days=3) + timedelta(hours=1)
    hours = CapacityRollup.objects.filter(period="hour")
    assert hours.aggregate(m=Min("start"))["m"] <= now - timedelta(days=10)
    assert CapacityRollup.objects.filter(period="day").count() in (10, 11)
    # Each hour stands for 60 sampled minutes, whether stepped every minute or every 5.
    assert set(hours.exclude(start__gte=now - timedelta(hours=1)).values_list("minutes", flat=True)) == {60}


def test_the_backfilled_cluster_never_allocates_more_than_its_capacity(backfilled: str) -> None:
    assert not CapacityMinute.objects.filter(allocated__gt=F("capacity")).exists()
    peak = CapacityMinute.objects.aggregate(m=Max("allocated"))["m"]
    assert 0 < peak <= 16
    assert TeamUsageMinute.objects.filter(borrowed__gt=0).exists()
    assert TeamUsageMinute.objects.filter(lent__gt=0).exists()
    # Everything borrowed is lent by someone (no capacity outside the quotas here).
    totals = TeamUsageMinute.objects.aggregate(b=Sum("borrowed"), lent=Sum("lent"))
    assert totals["lent"] == pytest.approx(totals["b"])


def test_days_are_the_sums_of_their_hours(backfilled: str) -> None:
    for day in TeamUsageRollup.objects.filter(period="day"):
        hours = TeamUsageRollup.objects.filter(
            period="hour", team=day.team, start__gte=day.start, start__lt=day.start + timedelta(days=1)
        ).aggregate(used=Sum("used_gpu_minutes"), lent=Sum("lent_gpu_minutes"))
        assert day.used_gpu_minutes == hours["used"]
        assert day.lent_gpu_minutes == pytest.approx(hours["lent"])


def test_running_it_again_replaces_the_history(backfilled: str, settings) -> None:  # type: ignore[no-untyped-def]
    counts = (TeamUsageRollup.objects.count(), Job.objects.count())
    call_command("backfill_demo_history", "--days", "10", "--seed", "1", stdout=StringIO())
    again = (TeamUsageRollup.objects.count(), Job.objects.count())
    assert abs(again[0] - counts[0]) <= 4 and abs(again[1] - counts[1]) < counts[1] * 0.2
    assert Job.objects.filter(started_at__isnull=False, finished_at__gt=timezone.now()).count() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "0"], "--days: must be between 1 and 3660, got 0"),
        (["--old-step", "7"], "--old-step: must divide 60"),
    ],
)
def test_bad_options_are_refused_by_name(personas, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=message):
        call_command("backfill_demo_history", *args, stdout=StringIO())


def test_an_empty_database_is_told_to_load_the_demo(db) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="load_demo"):
        call_command("backfill_demo_history", stdout=StringIO())
