"""What preemptions cost, in the history (docs/preemption.md section 2, docs/dashboards.md):
the sampler adds up the GPU-seconds each preempted event lost and counts the victims by how
long they had run, from the events' own figures or, for events recorded without them, from
the job's last start."""

from __future__ import annotations

from datetime import timedelta

import pytest

from allocations.choices import JobEventKind
from allocations.models import JobEvent, TeamUsageMinute, TeamUsageRollup
from allocations.services import history
from tests import factories as f
from tests.history.test_sampling import T0


def test_victim_cost_prefers_the_events_figures_and_falls_back_to_the_run_since_the_start() -> None:
    at = T0
    recorded = history.victim_cost(at=at, gpus=4, ran_s=300.0, lost_gpu_seconds=120.0, run_start=None)
    assert recorded == (300.0, 120.0)  # a checkpoint kept most of the run
    older = history.victim_cost(
        at=at, gpus=4, ran_s=None, lost_gpu_seconds=None, run_start=at - timedelta(minutes=5)
    )
    assert older == (300.0, 1200.0)  # no checkpoints then: the whole run is lost
    assert history.victim_cost(at=at, gpus=4, ran_s=None, lost_gpu_seconds=None, run_start=None) == (
        None,
        0.0,
    )


@pytest.mark.parametrize(
    ("ran_s", "band"),
    [
        (0, "under 10 min"),
        (599.9, "under 10 min"),
        (600, "10-60 min"),
        (3599, "10-60 min"),
        (3600, "over 1 h"),
    ],
)
def test_a_run_falls_in_one_band(ran_s: float, band: str) -> None:
    assert history.ran_band(ran_s) == band


def test_a_minute_adds_up_the_lost_work_and_the_victims_run_times(personas) -> None:  # type: ignore[no-untyped-def]
    it = personas.instance_type
    # Recorded by the loop: 4 GPUs ran 5 min, a checkpoint kept 2 of them (lost 3 min x 4 GPUs).
    short = f.make_job(personas.team, it, 4, submitted_at=T0 - timedelta(hours=3))
    JobEvent.objects.create(
        job=short,
        kind=JobEventKind.PREEMPTED,
        at=T0 - timedelta(seconds=40),
        reason="reclaim",
        ran_s=300.0,
        lost_gpu_seconds=720.0,
    )
    # Recorded before run times were: started 90 min before, all of its 2 GPUs' work lost.
    old = f.make_job(personas.team, it, 2, submitted_at=T0 - timedelta(hours=3))
    JobEvent.objects.create(job=old, kind=JobEventKind.STARTED, at=T0 - timedelta(hours=2))
    JobEvent.objects.create(job=old, kind=JobEventKind.PREEMPTED, at=T0 - timedelta(hours=1, minutes=31))
    JobEvent.objects.create(job=old, kind=JobEventKind.STARTED, at=T0 - timedelta(minutes=90, seconds=20))
    JobEvent.objects.create(
        job=old, kind=JobEventKind.PREEMPTED, at=T0 - timedelta(seconds=20), reason="reclaim"
    )
    # No start recorded at all: counted as a preemption, in no run-time band, nothing lost.
    unknown = f.make_job(personas.team, it, 1, submitted_at=T0 - timedelta(hours=3))
    JobEvent.objects.create(job=unknown, kind=JobEventKind.PREEMPTED, at=T0 - timedelta(seconds=5))
    # Of the minute after: not in this sample.
    JobEvent.objects.create(job=short, kind=JobEventKind.PREEMPTED, at=T0, ran_s=30.0, lost_gpu_seconds=120.0)

    history.history_sample(now=T0)
    row = TeamUsageMinute.objects.get(minute=T0, team=personas.team)
    assert row.lost_gpu_seconds == pytest.approx(720.0 + 2 * 90 * 60)
    assert (row.preempted_ran_under_10m, row.preempted_ran_10_to_60m, row.preempted_ran_over_1h) == (1, 0, 1)

    history.history_sample(now=T0 + timedelta(minutes=1))
    history.history_rollup(now=T0 + timedelta(minutes=2))
    hour = TeamUsageRollup.objects.get(period="hour", start=T0, team=personas.team)
    assert hour.lost_gpu_seconds == pytest.approx(720.0 + 2 * 90 * 60 + 120.0)
    assert (hour.preempted_ran_under_10m, hour.preempted_ran_10_to_60m, hour.preempted_ran_over_1h) == (
        2,
        0,
        1,
    )
    day = TeamUsageRollup.objects.get(period="day", start=T0.replace(hour=0), team=personas.team)
    assert day.lost_gpu_seconds == hour.lost_gpu_seconds
    assert day.preempted_ran_under_10m + day.preempted_ran_10_to_60m + day.preempted_ran_over_1h == 3


def test_a_preemption_after_a_run_ended_has_an_unknown_run_in_the_sampler_and_the_reports(personas) -> None:  # type: ignore[no-untyped-def]
    """An older event whose job's last run boundary is not a start (a second preempted event
    with no start between, as a lost and repaired cycle might leave): no run, nothing lost, in
    the history and in the reports' walk alike."""
    from allocations.selectors.history import job_activity

    job = f.make_job(personas.team, personas.instance_type, 2, submitted_at=T0 - timedelta(hours=3))
    JobEvent.objects.create(job=job, kind=JobEventKind.STARTED, at=T0 - timedelta(hours=2))
    JobEvent.objects.create(job=job, kind=JobEventKind.PREEMPTED, at=T0 - timedelta(hours=1))
    JobEvent.objects.create(job=job, kind=JobEventKind.PREEMPTED, at=T0 - timedelta(seconds=30))
    history.history_sample(now=T0)
    row = TeamUsageMinute.objects.get(minute=T0, team=personas.team)
    assert row.preempted_in_team + row.preempted_reclaim + row.preempted_fair_share == 0  # no reason
    assert (row.lost_gpu_seconds, row.preempted_ran_under_10m, row.preempted_ran_over_1h) == (0, 0, 0)
    activity = job_activity(T0 - timedelta(minutes=1), T0)[personas.team.pk]
    assert activity.preempted == 1 and activity.gpu_hours_lost == 0
    earlier = job_activity(T0 - timedelta(hours=1, minutes=1), T0 - timedelta(minutes=59))[personas.team.pk]
    assert earlier.gpu_hours_lost == 2.0  # the first: its hour on 2 GPUs
