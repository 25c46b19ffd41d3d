"""Preemption grace carried out by the allocation loop on the real simulated backend
(docs/preemption.md section 5): a victim with a grace is signalled, not stopped; it keeps its
GPUs, counted, while its preemptor waits with the reason ``preempting``; when the grace runs
out it is killed and requeued, and its preemptor starts; a victim that ends by itself within
its grace loses nothing. At no cycle does a node hold more GPUs than it has (section 6)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from allocations.models import ClusterPolicy, CycleRun, Job, JobEvent, Node, SimulatedJob, TeamQuota
from allocations.services import jobs as job_services
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db

GRACE_S = 30


def cycle() -> CycleRun:
    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.ok, run and run.errors
    assert_nothing_counted_twice()
    return run


def assert_nothing_counted_twice() -> None:
    """Section 6: the running jobs never hold more GPUs of a node than it has, in the database
    (what the engine counts) nor in the simulated cluster (what really runs)."""
    capacity = dict(Node.objects.values_list("name", "gpus"))
    for rows in (
        Job.objects.filter(state="running").values_list("nodes", flat=True),
        SimulatedJob.objects.filter(state="running").values_list("nodes", flat=True),
    ):
        used: Counter[str] = Counter()
        for nodes in rows:
            for name, gpus in nodes:
                used[name] += gpus
        assert all(used[name] <= capacity[name] for name in used), (used, capacity)


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
    """The simulated clock is the wall clock: move the job's start into the past."""
    started = timezone.now() - timedelta(seconds=seconds)
    Job.objects.filter(pk=job.pk).update(started_at=started)
    SimulatedJob.objects.filter(job_id=str(job.pk)).update(started_at=started)


def grace_runs_out(job: Job) -> None:
    """Move the end of ``job``'s grace into the past instead of waiting for it."""
    Job.objects.filter(pk=job.pk).update(grace_ends_at=timezone.now() - timedelta(seconds=1))


def signalled(personas: Personas, grace_s: int = GRACE_S, **fields: object) -> tuple[Job, Job]:
    """team-a borrows team-b's quota with a second job, which has run 100 s when team-b
    submits: the reclaim picks it, and with a grace it is signalled. Returns (the victim,
    team-b's job, its preemptor)."""
    ClusterPolicy.objects.update(preemption_grace_s=grace_s)
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_percent=100)
    own = submit(personas, "team-a")
    borrowed = submit(personas, "team-a", **fields)
    cycle()
    ran_for(own, 200)
    ran_for(borrowed, 100)
    lender = submit(personas, "team-b")
    assert cycle().preempted == 1
    borrowed.refresh_from_db()
    lender.refresh_from_db()
    return borrowed, lender


def test_a_victim_with_a_grace_is_signalled_and_keeps_its_gpus(personas: Personas) -> None:
    before = timezone.now()
    victim, preemptor = signalled(personas)

    assert victim.state == "running" and victim.nodes
    assert victim.terminating_since is not None and victim.terminating_since >= before
    assert victim.grace_ends_at == victim.terminating_since + timedelta(seconds=GRACE_S)
    assert (victim.preempted_for_id, victim.preempted_reason) == (preemptor.pk, "reclaim")
    # The preemption is counted at the signal; the lost work only when it is killed.
    assert victim.preemption_count == 1 and victim.lost_gpu_seconds == 0
    assert list(JobEvent.objects.filter(job=victim).values_list("kind", flat=True)).count("signalled") == 1
    assert not JobEvent.objects.filter(job=victim, kind="preempted").exists()
    simulated = SimulatedJob.objects.get(job_id=str(victim.pk))
    assert simulated.state == "running" and "signalled" in simulated.reason
    # Its preemptor holds its place, and says why.
    assert preemptor.state == "pending"
    assert preemptor.pending_reason_code == "preempting"
    assert f"job {victim.pk} (grace {GRACE_S} s, " in preemptor.pending_reason_message
    assert victim.grace_left_s is not None and 0 < victim.grace_left_s <= GRACE_S


def test_within_the_grace_nothing_else_changes(personas: Personas) -> None:
    victim, preemptor = signalled(personas)

    run = cycle()

    assert (run.preempted, run.started) == (0, 0)
    victim.refresh_from_db()
    preemptor.refresh_from_db()
    assert victim.state == "running" and victim.terminating_since is not None
    assert preemptor.state == "pending" and preemptor.pending_reason_code == "preempting"
    assert JobEvent.objects.filter(job=victim, kind="signalled").count() == 1


def test_when_the_grace_runs_out_the_victim_is_killed_requeued_and_its_preemptor_starts(
    personas: Personas,
) -> None:
    victim, preemptor = signalled(personas, checkpoint_interval_s=60)
    nodes = victim.nodes
    grace_runs_out(victim)

    run = cycle()

    victim.refresh_from_db()
    preemptor.refresh_from_db()
    assert victim.state == "pending" and victim.nodes == []
    assert (victim.terminating_since, victim.grace_ends_at, victim.preempted_for_id) == (None, None, None)
    assert victim.preemption_count == 1  # counted once, at the signal
    event = JobEvent.objects.get(job=victim, kind="preempted")
    assert (event.reason, event.preemptor_id, event.nodes) == ("reclaim", preemptor.pk, nodes)
    # Lost work up to the kill: the run since its last checkpoint (at 60 s of its 100+ s).
    assert 100 <= event.ran_s < 160
    assert event.lost_gpu_seconds == pytest.approx((event.ran_s - 60) * 8)
    assert victim.lost_gpu_seconds == pytest.approx(event.lost_gpu_seconds)
    assert victim.progress_kept_s == pytest.approx(60)
    assert JobEvent.objects.filter(job=victim, kind="requeued").exists()
    assert SimulatedJob.objects.get(job_id=str(victim.pk)).state == "pending"
    # The preemptor takes the GPUs the victim gave back, in the same cycle.
    assert run.started == 1
    assert preemptor.state == "running" and preemptor.nodes == nodes


def test_a_victim_that_ends_within_its_grace_loses_nothing_and_its_preemptor_starts(
    personas: Personas,
) -> None:
    victim, preemptor = signalled(personas)
    SimulatedJob.objects.filter(job_id=str(victim.pk)).update(ends_at=timezone.now() - timedelta(seconds=1))

    run = cycle()

    victim.refresh_from_db()
    preemptor.refresh_from_db()
    assert victim.state == "finished" and victim.terminating_since is None
    assert victim.lost_gpu_seconds == 0
    assert not JobEvent.objects.filter(job=victim, kind="preempted").exists()
    assert "within its preemption grace" in JobEvent.objects.get(job=victim, kind="finished").message
    assert run.started == 1 and preemptor.state == "running"


def test_a_priority_class_grace_of_0_stops_its_victims_at_once(personas: Personas) -> None:
    personas.priority_classes["training"].preemption_grace_s = 0
    personas.priority_classes["training"].save()

    victim, preemptor = signalled(personas)

    assert victim.state == "pending" and victim.terminating_since is None
    assert JobEvent.objects.filter(job=victim, kind="preempted").exists()
    assert preemptor.state == "running"


def test_a_priority_class_grace_overrides_a_policy_of_0(personas: Personas) -> None:
    personas.priority_classes["training"].preemption_grace_s = 45
    personas.priority_classes["training"].save()

    victim, preemptor = signalled(personas, grace_s=0)

    assert victim.state == "running"
    assert victim.grace_ends_at == victim.terminating_since + timedelta(seconds=45)
    assert preemptor.pending_reason_code == "preempting"


def test_a_victim_cancelled_within_its_grace_frees_its_gpus_for_its_preemptor(personas: Personas) -> None:
    victim, preemptor = signalled(personas)

    job_services.job_cancel(user=personas.cluster_admin, job=victim)
    run = cycle()

    victim.refresh_from_db()
    preemptor.refresh_from_db()
    assert victim.state == "cancelled" and victim.terminating_since is None
    assert SimulatedJob.objects.get(job_id=str(victim.pk)).state == "cancelled"
    assert run.started == 1 and preemptor.state == "running"


def test_a_victim_whose_preemptor_is_cancelled_still_stops_at_the_end_of_its_grace(
    personas: Personas,
) -> None:
    victim, preemptor = signalled(personas)
    job_services.job_cancel(user=personas.cluster_admin, job=preemptor)
    cycle()
    victim.refresh_from_db()
    assert victim.state == "running" and victim.terminating_since is not None

    grace_runs_out(victim)
    cycle()

    event = JobEvent.objects.get(job=victim, kind="preempted")
    assert event.preemptor_id == preemptor.pk
    # Requeued, it starts again at once on the GPUs nobody waits for any more.
    assert JobEvent.objects.filter(job=victim, kind="requeued").exists()
    assert Job.objects.get(pk=victim.pk).state == "running"
