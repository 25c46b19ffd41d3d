"""What a preemption costs, as the allocation loop records it on the real simulated backend
(docs/preemption.md section 2): each preempted event has how long the run lasted and the
GPU-seconds it lost; the job adds up its lost GPU-seconds and the progress its checkpoints
kept, and the simulated cluster resumes it with the rest of its duration."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from allocations.models import CycleRun, Job, JobEvent, SimulatedJob, TeamQuota
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def cycle() -> CycleRun:
    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.ok, run and run.errors
    return run


def submit(personas: Personas, team: str, **fields: object) -> Job:
    owner = personas.team if team == "team-a" else personas.other_team
    return f.make_job(
        owner,
        personas.instance_type,
        8,
        priority_class=personas.priority_classes["training"],
        requested_duration=3600,
        command="train",
        **fields,
    )


def ran_for(job: Job, seconds: float) -> None:
    """The simulated clock is the wall clock: move the job's start into the past instead of
    waiting, in the database and in the simulated cluster alike."""
    started = timezone.now() - timedelta(seconds=seconds)
    Job.objects.filter(pk=job.pk).update(started_at=started)
    SimulatedJob.objects.filter(job_id=str(job.pk)).update(started_at=started)


def reclaimed(personas: Personas, **fields: object) -> tuple[Job, Job]:
    """team-a borrows team-b's quota with a second job (``fields``), which has run 100 s when
    team-b submits (its first job, 200 s): the reclaim preempts the one started last. Returns
    (the borrower's job, team-b's)."""
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_percent=100)
    own = submit(personas, "team-a")
    borrowed = submit(personas, "team-a", **fields)
    cycle()
    ran_for(own, 200)
    ran_for(borrowed, 100)
    lender = submit(personas, "team-b")
    assert cycle().preempted == 1
    borrowed.refresh_from_db()
    return borrowed, lender


def test_a_preemption_without_checkpoints_loses_the_whole_run(personas: Personas) -> None:
    borrowed, _ = reclaimed(personas)

    event = JobEvent.objects.get(job=borrowed, kind="preempted")
    assert 100 <= event.ran_s < 160
    assert event.lost_gpu_seconds == pytest.approx(event.ran_s * 8)
    assert borrowed.lost_gpu_seconds == pytest.approx(event.lost_gpu_seconds)
    assert borrowed.progress_kept_s == 0
    assert borrowed.state == "pending"


def test_a_preemption_keeps_the_work_up_to_the_last_checkpoint(personas: Personas) -> None:
    borrowed, _ = reclaimed(personas, checkpoint_interval_s=60)

    event = JobEvent.objects.get(job=borrowed, kind="preempted")
    assert 100 <= event.ran_s < 120  # so its last checkpoint was at 60 s
    assert borrowed.progress_kept_s == pytest.approx(60)
    assert event.lost_gpu_seconds == pytest.approx((event.ran_s - 60) * 8)
    assert borrowed.lost_gpu_seconds == pytest.approx(event.lost_gpu_seconds)


def test_lost_work_and_kept_progress_add_up_over_preemptions(personas: Personas) -> None:
    borrowed, lender = reclaimed(personas, checkpoint_interval_s=60)
    first = JobEvent.objects.get(job=borrowed, kind="preempted")
    # The lender ends; the borrower starts again, runs 70 s more, and is reclaimed again.
    SimulatedJob.objects.filter(job_id=str(lender.pk)).update(ends_at=timezone.now() - timedelta(seconds=1))
    cycle()
    borrowed.refresh_from_db()
    assert borrowed.state == "running"
    ran_for(borrowed, 70)
    submit(personas, "team-b")
    cycle()

    borrowed.refresh_from_db()
    events = list(JobEvent.objects.filter(job=borrowed, kind="preempted").order_by("id"))
    assert len(events) == 2 and events[0].pk == first.pk
    assert borrowed.progress_kept_s == pytest.approx(60 + 60)
    assert borrowed.lost_gpu_seconds == pytest.approx(sum(e.lost_gpu_seconds for e in events))


def test_the_simulated_cluster_resumes_a_job_with_the_rest_of_its_duration(personas: Personas) -> None:
    borrowed, lender = reclaimed(personas, checkpoint_interval_s=60)
    SimulatedJob.objects.filter(job_id=str(lender.pk)).update(ends_at=timezone.now() - timedelta(seconds=1))

    cycle()

    resumed = SimulatedJob.objects.get(job_id=str(borrowed.pk))
    assert resumed.state == "running"
    assert resumed.duration_s == pytest.approx(3600 - 60)
    assert resumed.ends_at - resumed.started_at == timedelta(seconds=3600 - 60)
