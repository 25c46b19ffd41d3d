"""The history's arithmetic: samples from snapshots, rollups as sums of minutes, retention."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum

from allocations import engine
from allocations.choices import JobEventKind, JobState
from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    JobEvent,
    TeamUsageMinute,
    TeamUsageRollup,
)
from allocations.services import history
from allocations.services.history import CapacitySample, TeamSample
from tests import factories as f

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


def _snapshot(*, b_running: int, a_pending: int = 0, share_unallocated: bool = True) -> engine.Snapshot:
    """Two teams with quota 8 each on two 8-GPU nodes; team-b runs ``b_running`` GPUs."""
    p5 = "ml.p5.48xlarge"
    jobs = [
        engine.Job(id="1", team="team-b", instance_type=p5, gpus=b_running, submit_time=0, nodes=(("n1", 8),))
    ]
    if a_pending:
        jobs.append(engine.Job(id="2", team="team-a", instance_type=p5, gpus=a_pending, submit_time=1))
    return engine.Snapshot(
        instance_types=(engine.InstanceType(p5, 8),),
        nodes=(engine.Node("n1", p5, 8), engine.Node("n2", p5, 8)),
        teams=(
            engine.Team("team-a", quotas={p5: engine.Quota(quota=8)}),
            engine.Team("team-b", quotas={p5: engine.Quota(quota=8)}),
        ),
        policy=engine.ClusterPolicy(share_unallocated=share_unallocated),
        jobs=tuple(jobs),
    )


def test_a_borrower_above_its_quota_is_lent_to_by_the_team_with_unused_quota() -> None:
    teams, capacity = history.measure(_snapshot(b_running=12, a_pending=2))
    a = next(s for s in teams if s.team == "team-a")
    b = next(s for s in teams if s.team == "team-b")
    assert (b.used, b.used_within_quota, b.borrowed, b.lent, b.running_jobs) == (12, 8, 4, 0, 1)
    assert (a.used, a.borrowed, a.lent, a.idle_quota) == (0, 0, 4, 4)
    assert (a.pending_gpus, a.pending_jobs) == (2, 1)
    (p5,) = capacity
    assert (p5.capacity, p5.allocated, p5.idle, p5.unallocated) == (16, 12, 4, 0)
    # 4 GPUs idle, 2 wanted: 2 GPUs sat idle while a job waited.
    assert p5.idle_while_waiting == 2


def test_a_team_with_nothing_to_record_is_not_written() -> None:
    empty = TeamSample("t", "x", 0, 0, 0, 0, 0.0, 0.0, 0, 0, 0, {})
    assert empty.is_empty
    assert not TeamSample("t", "x", 0, 0, 0, 0, 0.0, 0.0, 0, 0, 0, {"reclaim": 1}).is_empty


@pytest.fixture
def lending(personas):  # type: ignore[no-untyped-def]
    """team-b runs 12 GPUs on the personas' 16: it borrows 4 of team-a's quota."""
    nodes = personas.nodes
    f.make_job(
        personas.other_team,
        personas.instance_type,
        12,
        state=JobState.RUNNING,
        started_at=T0 - timedelta(hours=1),
        submitted_at=T0 - timedelta(hours=2),
        nodes=[[nodes[0].name, 8], [nodes[1].name, 4]],
    )
    return personas


def test_a_team_lending_4_gpus_for_30_minutes_has_lent_2_gpu_hours(lending) -> None:  # type: ignore[no-untyped-def]
    for i in range(30):
        history.history_sample(now=T0 + timedelta(minutes=i, seconds=17))
    history.history_rollup(now=T0 + timedelta(minutes=30))

    team_a = TeamUsageRollup.objects.get(period="hour", start=T0, team=lending.team)
    assert team_a.lent_gpu_minutes / 60 == pytest.approx(2.0)
    assert team_a.idle_quota_gpu_minutes / 60 == pytest.approx(2.0)
    team_b = TeamUsageRollup.objects.get(period="hour", start=T0, team=lending.other_team)
    assert team_b.borrowed_gpu_minutes / 60 == 2
    assert team_b.used_gpu_minutes / 60 == 6
    day = TeamUsageRollup.objects.get(period="day", start=T0.replace(hour=0), team=lending.team)
    assert day.lent_gpu_minutes == pytest.approx(120)
    hour = CapacityRollup.objects.get(period="hour", start=T0)
    assert (hour.minutes, hour.capacity_gpu_minutes, hour.allocated_gpu_minutes) == (30, 480, 360)


def test_sampling_the_same_minute_twice_writes_it_once(lending) -> None:  # type: ignore[no-untyped-def]
    first = history.history_sample(now=T0 + timedelta(seconds=5))
    second = history.history_sample(now=T0 + timedelta(seconds=55))
    assert first == second == T0
    assert TeamUsageMinute.objects.filter(minute=T0).count() == 2
    assert CapacityMinute.objects.filter(minute=T0).count() == 1


def test_a_minute_counts_the_preemptions_of_the_minute_before_it_by_reason(lending) -> None:  # type: ignore[no-untyped-def]
    victim = f.make_job(lending.team, lending.instance_type, 2, submitted_at=T0 - timedelta(hours=1))
    for at, reason in [(T0 - timedelta(seconds=30), "reclaim"), (T0 - timedelta(seconds=10), "reclaim")]:
        JobEvent.objects.create(job=victim, kind=JobEventKind.PREEMPTED, at=at, reason=reason)
    JobEvent.objects.create(job=victim, kind=JobEventKind.PREEMPTED, at=T0, reason="in-team")
    history.history_sample(now=T0)
    row = TeamUsageMinute.objects.get(minute=T0, team=lending.team)
    assert (row.preempted_reclaim, row.preempted_in_team) == (2, 0)
    history.history_sample(now=T0 + timedelta(minutes=1))
    later = TeamUsageMinute.objects.get(minute=T0 + timedelta(minutes=1), team=lending.team)
    assert (later.preempted_reclaim, later.preempted_in_team) == (0, 1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rollups_equal_the_sums_of_their_minutes(personas, seed: int) -> None:  # type: ignore[no-untyped-def]
    """Random minutes over two days (with gaps): every hour and every day sums its minutes."""
    rng = random.Random(seed)
    p5 = personas.instance_type.name
    start = T0 - timedelta(hours=13)
    minutes = sorted(rng.sample(range(36 * 60), 900))
    for m in minutes:
        teams = []
        for name in ("team-a", "team-b"):
            used = rng.randint(0, 12)
            teams.append(
                TeamSample(
                    name, p5, 8, used, min(used, 8), max(0, used - 8), rng.random() * 4, rng.random() * 4,
                    rng.randint(0, 9), rng.randint(0, 3), rng.randint(0, 3), {"reclaim": rng.randint(0, 1)},
                )
            )  # fmt: skip
        capacity = [
            CapacitySample(p5, 16, rng.randint(0, 16), rng.randint(0, 16), 0, rng.randint(0, 9), 1, 2)
        ]
        history.write_samples(start + timedelta(minutes=m), teams, capacity)
    # Roll up in two passes, as beat would: the second recomputes the newest hour and day.
    history.history_rollup(now=start + timedelta(hours=20))
    history.history_rollup(now=start + timedelta(hours=40))

    for period in ("hour", "day"):
        for rollup in TeamUsageRollup.objects.filter(period=period):
            end = rollup.start + (history.HOUR if period == "hour" else history.DAY)
            sums = TeamUsageMinute.objects.filter(
                team=rollup.team, minute__gte=rollup.start, minute__lt=end
            ).aggregate(used=Sum("used"), lent=Sum("lent"), reclaim=Sum("preempted_reclaim"))
            assert rollup.used_gpu_minutes == sums["used"]
            assert rollup.lent_gpu_minutes == pytest.approx(sums["lent"])
            assert rollup.preempted_reclaim == sums["reclaim"]
        for cap in CapacityRollup.objects.filter(period=period):
            end = cap.start + (history.HOUR if period == "hour" else history.DAY)
            in_period = CapacityMinute.objects.filter(minute__gte=cap.start, minute__lt=end)
            assert cap.minutes == in_period.count()
            assert cap.allocated_gpu_minutes == in_period.aggregate(s=Sum("allocated"))["s"]
    assert (
        TeamUsageRollup.objects.filter(period="day").aggregate(s=Sum("used_gpu_minutes"))["s"]
        == TeamUsageMinute.objects.aggregate(s=Sum("used"))["s"]
    )
    assert CapacityRollup.objects.filter(period="hour").count() == len({m // 60 for m in minutes})


def test_prune_keeps_minutes_for_their_retention_and_rollups_longer(lending, settings) -> None:  # type: ignore[no-untyped-def]
    settings.HISTORY_MINUTE_DAYS = 14
    settings.HISTORY_HOUR_DAYS = 400
    old, recent = T0 - timedelta(days=15), T0 - timedelta(days=13)
    history.history_sample(now=old)
    history.history_sample(now=recent)
    history.history_rollup(now=T0)
    history.history_prune(now=T0)
    assert list(CapacityMinute.objects.values_list("minute", flat=True)) == [recent]
    assert CapacityRollup.objects.filter(period="hour", start=old).exists()
    history.history_prune(now=T0 + timedelta(days=400))
    assert not CapacityRollup.objects.filter(period="hour", start=old).exists()
    assert CapacityRollup.objects.filter(period="day").count() == 2
