"""backfill_demo_history: plausible, consistent history for the teams in the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
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
    said, done = backfilled.splitlines()
    assert said.startswith("writing 10 days of synthetic history")  # before the wait, not after
    assert done.startswith("backfilled 10 days for 2 teams x 1 instance types")
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


# A fixed end: the demand follows the hour of the day and the day of the week, so a history
# ending now changes with the time the tests run (the share of the load its jobs hold moves by
# tens of percent from hour to hour, across the test's 80% bound); the test checks one history,
# every time the same.
END = "2026-11-30T12:00:00+00:00"


@pytest.fixture
def backfilled_until(personas, settings):  # type: ignore[no-untyped-def]
    settings.HISTORY_MINUTE_DAYS = 3
    out = StringIO()
    call_command("backfill_demo_history", "--days", "10", "--seed", "1", "--end", END, stdout=out)
    return out.getvalue()


def test_the_same_seed_and_end_give_the_same_history(backfilled_until: str) -> None:
    def rows() -> list[tuple[object, ...]]:
        return list(
            TeamUsageMinute.objects.order_by("minute", "team_id", "instance_type_id").values_list(
                "minute", "team_id", "instance_type_id", "used", "borrowed", "lent"
            )
        ) + list(
            Job.objects.filter(name__startswith="backfill-")
            .order_by("submitted_at", "name")
            .values_list("team_id", "gpus", "submitted_at", "started_at", "finished_at")
        )

    first = rows()
    assert first
    call_command("backfill_demo_history", "--days", "10", "--seed", "1", "--end", END, stdout=StringIO())
    assert rows() == first
    last = TeamUsageMinute.objects.aggregate(m=Max("minute"))["m"]
    assert last is not None and last <= datetime.fromisoformat(END)


def test_the_minute_windows_jobs_are_the_load_the_history_shows(backfilled_until: str) -> None:
    """In the minute window the jobs are the demand: over a sample of minutes, each team's
    backfilled jobs running on a type hold what the history says it used, give or take 20%
    (a running job runs on through the allocation's minute-to-minute dips; a waiting one starts
    only once it fits); each waited from its submission to its start and ran a while after."""
    window = CapacityMinute.objects.aggregate(m=Min("minute"))["m"]
    jobs = list(
        Job.objects.filter(name__startswith="backfill-").values_list(
            "team_id",
            "instance_type_id",
            "gpus",
            "submitted_at",
            "started_at",
            "finished_at",
            "priority_class_id",
        )
    )
    assert len(jobs) > 20
    assert all(sub <= start < end for _, _, _, sub, start, end, _ in jobs)
    assert len({p for *_, p in jobs}) > 1  # the priority classes are used
    rows = TeamUsageMinute.objects.filter(minute__gte=window + timedelta(hours=8)).values_list(
        "minute", "team_id", "instance_type_id", "used"
    )
    # A sample of the minutes, 8 hours into the window: the jobs sampled before it (6 hours at
    # most) have ended by then.
    minutes = set(sorted({m for m, *_ in rows})[::37])
    held = used_in_all = 0
    for minute, team, kind, used in rows:
        if minute not in minutes:
            continue
        running = sum(
            g for t, i, g, _, start, end, _ in jobs if (t, i) == (team, kind) and start <= minute < end
        )
        held, used_in_all = held + running, used_in_all + used
    assert used_in_all > 0 and 0.8 * used_in_all <= held <= 1.2 * used_in_all, (held, used_in_all)
    # Never more than the capacity: the what-if lab replays these jobs (a window that starts
    # with more running than the nodes hold is refused).
    capacity = dict(CapacityMinute.objects.values_list("instance_type_id", "capacity").distinct())
    for minute in minutes:
        per_type: dict[int, int] = {}
        for _, kind, gpus, _, start, end, _ in jobs:
            if start <= minute < end:
                per_type[kind] = per_type.get(kind, 0) + gpus
        assert all(gpus <= capacity[kind] for kind, gpus in per_type.items()), (minute, per_type, capacity)


def test_a_what_if_replays_the_backfilled_window(backfilled: str) -> None:
    from allocations.simulation import parse_scenario
    from allocations.simulation.replay import Replay
    from allocations.whatif import drafts, history, runs

    end = timezone.now().replace(second=0, microsecond=0)
    built = history.build(end - timedelta(days=2), end, step=60)
    policies = [{"key": "live", "name": "live", "body": drafts.live_body()}]
    scenario = parse_scenario(runs.scenario_data(built.data, policies, "live"), keep_unfit=True)
    result = Replay(scenario).run()
    assert len(scenario.jobs) > 10
    assert sum(1 for job in result.jobs.values() if job.admitted_at) > 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--days", "0"], "--days: must be between 1 and 3660, got 0"),
        (["--old-step", "7"], "--old-step: must divide 60"),
        (["--end", "yesterday"], "--end: not an ISO 8601 date and time, got 'yesterday'"),
        (["--end", "2999-01-01T00:00:00"], "--end: must not be in the future, got '2999-01-01T00:00:00'"),
    ],
)
def test_bad_options_are_refused_by_name(personas, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match=message):
        call_command("backfill_demo_history", *args, stdout=StringIO())


def test_an_empty_database_is_told_to_load_the_demo(db) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="load_demo"):
        call_command("backfill_demo_history", stdout=StringIO())


# Ends of the history; at the first, jobs preempted in its last hours are still open then.
ENDS = ["2026-12-07T13:45:00", "2026-11-02T10:00:00", "2026-11-04T16:30:00"]


@pytest.mark.parametrize("end", ENDS)
def test_every_preemption_the_history_counts_has_its_jobs_event(personas, settings, end: str) -> None:
    """The rollups count each preemption; the reports and dashboards read who lost what from
    the jobs' events. A job preempted and still open at the history's end is written too,
    cancelled at the end, so the two agree whatever the moment the history ends."""
    from allocations.models import JobEvent
    from allocations.services import history

    settings.HISTORY_MINUTE_DAYS = 1
    call_command("backfill_demo_history", "--days", "2", "--seed", "4", "--end", end, stdout=StringIO())
    columns = list(history.PREEMPTION_FIELDS.values())
    sums = TeamUsageRollup.objects.filter(period="hour").aggregate(*(Sum(c) for c in columns))
    counted = sum(value or 0 for value in sums.values())
    recorded = JobEvent.objects.filter(kind="preempted").count()
    assert counted > 0 and recorded == counted
    for job in Job.objects.filter(state="cancelled"):
        assert job.preemption_count > 0
        assert job.started_at <= job.finished_at <= datetime.fromisoformat(end).replace(tzinfo=UTC)
        [last] = JobEvent.objects.filter(job=job).order_by("-at", "-id")[:1]
        assert last.kind == "cancelled" and "history ends" in last.message


def test_the_backfilled_preemptions_record_their_lost_work(personas, settings) -> None:  # type: ignore[no-untyped-def]
    """Each preempted event says how long its run lasted and what it lost (the whole run: the
    demo's jobs have no checkpoints), and the history adds them up as the live sampler does."""
    from allocations.models import JobEvent
    from allocations.services import history

    settings.HISTORY_MINUTE_DAYS = 1
    call_command("backfill_demo_history", "--days", "2", "--seed", "4", stdout=StringIO())
    events = JobEvent.objects.filter(kind="preempted").select_related("job")
    assert events and all(e.ran_s is not None and e.ran_s >= 0 for e in events)
    assert all(e.lost_gpu_seconds == pytest.approx(e.job.gpus * e.ran_s) for e in events)
    lost = sum(e.lost_gpu_seconds or 0 for e in events)
    assert lost > 0
    hours = TeamUsageRollup.objects.filter(period="hour")
    sums = hours.aggregate(*(Sum(c) for c in [*history.COST_FIELDS, *history.PREEMPTION_FIELDS.values()]))
    assert sums["lost_gpu_seconds__sum"] == pytest.approx(lost)
    bands = [sums[f"{column}__sum"] for _, column in history.RAN_FIELDS.values()]
    assert sum(bands) == sum(sums[f"{c}__sum"] for c in history.PREEMPTION_FIELDS.values())
    by_band = {history.ran_band(e.ran_s or 0) for e in events}
    assert len(by_band) > 1  # the demo's victims ran for various times
    for job in Job.objects.filter(preemption_count__gt=0)[:20]:
        assert job.lost_gpu_seconds == pytest.approx(sum(e.lost_gpu_seconds or 0 for e in job.events.all()))
