"""The allocation loop (services/loop.py) on the simulated backend, in this process.

Concurrency, crash safety and the Celery worker run real subprocesses: see
``test_loop_processes.py`` and ``tests/tasks/test_celery_worker.py``.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations import engine
from allocations.backends import BackendJobState, JobSpec, get_backend
from allocations.models import Cluster, CycleRun, Job, JobEvent, Node, SimulatedJob, TeamQuota
from allocations.selectors.snapshot import build_snapshot
from allocations.services import loop
from allocations.services.loop import cycle_lock, run_allocation_cycle
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def cycle() -> CycleRun:
    run = run_allocation_cycle(trigger="test")
    assert run is not None, "the cycle lock should be free"
    return run


def kinds(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("kind", flat=True))


def submit(personas: Personas, team: str, gpus: int, priority: str = "training", **fields: object) -> Job:
    owner = personas.team if team == "team-a" else personas.other_team
    return f.make_job(
        owner,
        personas.instance_type,
        gpus,
        priority_class=personas.priority_classes[priority],
        requested_duration=3600,
        **fields,
    )


def finish_in_backend(job: Job) -> None:
    """The simulated clock is the wall clock: move the job's end into the past instead of waiting."""
    now = timezone.now()
    SimulatedJob.objects.filter(job_id=str(job.pk)).update(
        started_at=now - timedelta(seconds=60), ends_at=now - timedelta(seconds=1)
    )


def test_cycle_starts_what_fits_and_records_events_and_pending_reasons(personas: Personas) -> None:
    first = submit(personas, "team-a", 8)
    second = submit(personas, "team-a", 8)  # quota 8 + 50 % borrowing = 12: can never run beside the first

    run = cycle()

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == "running"
    assert sum(gpus for _, gpus in first.nodes) == 8
    assert first.started_at is not None and first.external_id == f"sim-{first.pk}"
    assert (first.pending_reason_code, first.pending_reason_message) == ("", "")
    started = JobEvent.objects.get(job=first, kind="started")
    assert started.nodes == first.nodes
    assert second.state == "pending"
    assert second.pending_reason_code == "borrow-limit"
    assert "12" in second.pending_reason_message  # the message carries the numbers (POLICY.md 5)
    assert (run.ok, run.started, run.preempted, run.pending, run.corrections) == (True, 1, 0, 1, 0)
    assert run.finished_at is not None and run.errors == ""
    (backend_job,) = get_backend("simulated", {}).list_jobs()
    assert (backend_job.job_id, backend_job.state) == (str(first.pk), BackendJobState.RUNNING)


def test_a_second_cycle_changes_nothing_when_nothing_changed(personas: Personas) -> None:
    submit(personas, "team-a", 8)
    submit(personas, "team-a", 8)
    cycle()
    events = JobEvent.objects.count()
    run = cycle()
    assert (run.started, run.preempted, run.ended, run.corrections) == (0, 0, 0, 0)
    assert JobEvent.objects.count() == events


def test_finished_jobs_are_recorded_and_free_their_gpus(personas: Personas) -> None:
    first = submit(personas, "team-a", 8)
    second = submit(personas, "team-a", 8)
    cycle()
    finish_in_backend(first)

    run = cycle()

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == "finished" and first.finished_at is not None and first.nodes == []
    assert kinds(first) == ["started", "finished"]
    assert JobEvent.objects.get(job=first, kind="finished").nodes  # where it ran
    assert second.state == "running"
    assert (run.ended, run.started) == (1, 1)


def test_drained_node_lowers_capacity_and_returned_node_raises_it(personas: Personas) -> None:
    a_job = submit(personas, "team-a", 8)
    cycle()
    a_job.refresh_from_db()
    busy = a_job.nodes[0][0]
    idle = Node.objects.exclude(name=busy).get()
    # Draining is done on the cluster; the simulated cluster's nodes are the Node rows.
    Node.objects.filter(pk=idle.pk).update(state="draining", reason="maintenance")
    b_job = submit(personas, "team-b", 8)

    cycle()

    b_job.refresh_from_db()
    assert b_job.state == "pending"
    assert b_job.pending_reason_code == "capacity-lost", b_job.pending_reason_message
    assert b_job.pending_reason_message

    Node.objects.filter(pk=idle.pk).update(state="ready", reason="")
    cycle()
    b_job.refresh_from_db()
    assert b_job.state == "running"
    assert b_job.nodes == [[idle.name, 8]]


def test_reclaim_preempts_the_borrower_and_starts_the_lender(personas: Personas) -> None:
    # team-a may use up to twice its quota: with team-b idle it borrows team-b's whole quota.
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_percent=100)
    own = submit(personas, "team-a", 8)
    borrowed = submit(personas, "team-a", 8)
    cycle()
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}

    lender = submit(personas, "team-b", 8)
    run = cycle()

    own.refresh_from_db()
    borrowed.refresh_from_db()
    lender.refresh_from_db()
    assert own.state == "running"
    assert lender.state == "running"
    assert borrowed.state == "pending"
    assert borrowed.preemption_count == 1 and borrowed.last_preempted_at is not None
    assert borrowed.pending_reason_code and borrowed.pending_reason_message
    assert kinds(borrowed) == ["started", "preempted", "requeued"]
    preempted = JobEvent.objects.get(job=borrowed, kind="preempted")
    assert (preempted.reason, preempted.preemptor_id) == ("reclaim", lender.pk)
    assert preempted.nodes  # the nodes it lost
    assert (run.preempted, run.started) == (1, 1)
    backend = {job.job_id: job.state for job in get_backend("simulated", {}).list_jobs()}
    assert backend[str(borrowed.pk)] == BackendJobState.PENDING
    assert backend[str(lender.pk)] == BackendJobState.RUNNING
    assert borrowed.submitted_at == Job.objects.get(pk=borrowed.pk).submitted_at  # keeps its place


def test_a_victim_that_ends_by_itself_as_it_is_preempted_is_not_preempted(personas: Personas) -> None:
    """Between a cycle's sync and its preemption the victim may end by itself (Slurm answers
    "already completing"): nothing is preempted, so no preemption is recorded, and its GPUs are
    not free until the backend says it ended, so its preemptor waits for the next cycle (docs/
    chaos.md item 7). That cycle records the victim finished and starts the preemptor."""
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_percent=100)
    own = submit(personas, "team-a", 8)
    borrowed = submit(personas, "team-a", 8)
    cycle()
    lender = submit(personas, "team-b", 8)
    now = timezone.now()
    plan = engine.allocate(build_snapshot(now), now.timestamp())
    assert [(p.job_id, p.preemptor) for p in plan.preemptions] == [(str(borrowed.pk), str(lender.pk))]
    finish_in_backend(borrowed)  # after the sync read it running, before the preemption

    changes = loop._Changes()
    applied = loop._apply(get_backend("simulated", {}), plan, now, changes, loop._start_seq(now))
    with transaction.atomic():
        changes.save()

    assert applied == (0, 0, [])  # nothing preempted, nothing started, nothing went wrong
    assert any(f"job {borrowed.pk} was not preempted" in note for note in changes.notes), changes.notes
    assert any(f"start job {lender.pk}: waits for the next cycle" in note for note in changes.notes)
    borrowed.refresh_from_db()
    lender.refresh_from_db()
    assert (borrowed.state, borrowed.preemption_count, lender.state) == ("running", 0, "pending")
    assert kinds(borrowed) == ["started"]

    run = cycle()

    borrowed.refresh_from_db()
    lender.refresh_from_db()
    assert run.ok, run.errors
    assert (borrowed.state, lender.state, Job.objects.get(pk=own.pk).state) == (
        "finished",
        "running",
        "running",
    )
    assert kinds(borrowed) == ["started", "finished"]


def test_backend_outage_degrades_the_cluster_without_failing_jobs_and_recovery_clears_it(
    personas: Personas,
) -> None:
    running = submit(personas, "team-a", 8)
    cycle()
    waiting = submit(personas, "team-b", 8)
    Cluster.objects.filter(pk=1).update(backend_settings={"available": False})

    run = cycle()

    cluster = Cluster.objects.get()
    assert run.backend_outage and not run.ok
    assert "offline" in run.errors
    assert not cluster.backend_healthy and "offline" in cluster.backend_error
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert (running.state, waiting.state) == ("running", "pending")
    assert not JobEvent.objects.filter(kind="failed").exists()

    Cluster.objects.filter(pk=1).update(backend_settings={})
    run = cycle()
    cluster.refresh_from_db()
    assert run.ok and not run.backend_outage
    assert cluster.backend_healthy and cluster.backend_error == ""
    waiting.refresh_from_db()
    assert waiting.state == "running"


def test_bad_backend_settings_are_recorded_not_raised(personas: Personas) -> None:
    Cluster.objects.filter(pk=1).update(backend_settings={"speedup": "fast"})
    run = cycle()
    assert not run.ok
    assert "backend_settings.speedup must be a number, not 'fast'" in run.errors
    assert "speedup" in Cluster.objects.get().backend_error


def test_sync_requeues_a_running_job_the_backend_does_not_know(personas: Personas) -> None:
    node = personas.nodes[0].name
    ghost = submit(personas, "team-a", 8, state="running", nodes=[[node, 8]], started_at=timezone.now())

    run = cycle()

    ghost.refresh_from_db()
    assert kinds(ghost)[0] == "requeued"
    assert JobEvent.objects.get(job=ghost, kind="requeued").reason == "lost"
    assert run.corrections == 1
    assert any(f"job {ghost.pk}" in note for note in run.notes)
    # Requeued in the sync, it is placed again in the same cycle (it fits in its quota).
    assert ghost.state == "running"
    assert kinds(ghost) == ["requeued", "started"]


def test_sync_adopts_a_job_the_backend_runs_but_the_database_has_as_pending(personas: Personas) -> None:
    job = submit(personas, "team-a", 8)
    node = personas.nodes[1].name
    # What a worker killed between backend.start and its database commit leaves behind.
    get_backend("simulated", {}).start(
        JobSpec(
            job_id=str(job.pk), team="team-a", name=job.name, instance_type=job.instance_type.name, gpus=8
        ),
        ((node, 8),),
    )

    run = cycle()

    job.refresh_from_db()
    assert job.state == "running" and job.nodes == [[node, 8]]
    assert kinds(job) == ["started"]
    assert "adopted" in JobEvent.objects.get(job=job).message
    assert run.corrections == 1 and run.started == 0
    assert SimulatedJob.objects.count() == 1


def test_sync_stops_in_the_backend_a_job_cancelled_in_the_database(personas: Personas) -> None:
    job = submit(personas, "team-a", 8)
    cycle()
    Job.objects.filter(pk=job.pk).update(state="cancelled", finished_at=timezone.now(), nodes=[])

    run = cycle()

    assert SimulatedJob.objects.get(job_id=str(job.pk)).state == "cancelled"
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert run.corrections == 0  # a cancellation is the normal path, not a repair
    assert any("cancelled" in note for note in run.notes)


def test_sync_accounts_for_a_job_that_ran_and_ended_while_pending_here(personas: Personas) -> None:
    job = submit(personas, "team-a", 8)
    backend = get_backend("simulated", {})
    backend.start(
        JobSpec(
            job_id=str(job.pk), team="team-a", name=job.name, instance_type=job.instance_type.name, gpus=8
        ),
        ((personas.nodes[0].name, 8),),
    )
    SimulatedJob.objects.update(
        started_at=timezone.now() - timedelta(seconds=10), ends_at=timezone.now() - timedelta(seconds=1)
    )

    run = cycle()

    job.refresh_from_db()
    assert job.state == "finished"
    assert kinds(job) == ["started", "finished"]
    assert run.corrections == 1


def test_a_cycle_does_nothing_while_another_worker_holds_the_lock(personas: Personas) -> None:
    submit(personas, "team-a", 8)
    held, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        try:
            with cycle_lock() as acquired:
                assert acquired
                held.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(30)
        assert run_allocation_cycle(trigger="test") is None
        assert not CycleRun.objects.exists()
        assert Job.objects.get().state == "pending"
    finally:
        release.set()
        thread.join()
    assert cycle().started == 1


def test_snapshot_query_count_does_not_grow_with_the_jobs(personas: Personas) -> None:
    for _ in range(3):
        submit(personas, "team-a", 1)
    with CaptureQueriesContext(connection) as few:
        build_snapshot(timezone.now())
    for _ in range(30):
        submit(personas, "team-b", 1)
    with CaptureQueriesContext(connection) as many:
        snapshot = build_snapshot(timezone.now())
    assert len(snapshot.jobs) == 33
    assert len(few) == len(many)


def test_cycle_query_count_does_not_grow_with_the_pending_jobs(personas: Personas) -> None:
    # Jobs that can never start beside each other: every cycle only writes pending reasons.
    def waiting_jobs(count: int) -> None:
        for _ in range(count):
            submit(personas, "team-a", 16, priority="experimentation")

    submit(personas, "team-a", 8, priority="inference")
    cycle()
    waiting_jobs(3)
    with CaptureQueriesContext(connection) as few:
        cycle()
    waiting_jobs(40)
    with CaptureQueriesContext(connection) as many:
        run = cycle()
    assert run.pending == 43
    assert len(few) == len(many)


def test_a_failed_node_fails_its_jobs_and_takes_its_capacity_away(personas: Personas) -> None:
    job = submit(personas, "team-a", 8)
    cycle()
    # 60 failures per node per hour: in the simulated cluster every node fails this minute.
    Cluster.objects.filter(pk=1).update(backend_settings={"node_failure_rate": 60, "seed": 3})
    waiting = submit(personas, "team-b", 8)

    run = cycle()

    job.refresh_from_db()
    waiting.refresh_from_db()
    assert job.state == "failed" and job.finished_at is not None
    failed = JobEvent.objects.get(job=job, kind="failed")
    assert "failed" in failed.message and failed.nodes
    assert set(Node.objects.values_list("state", flat=True)) == {"down"}
    assert (waiting.state, waiting.pending_reason_code) == ("pending", "capacity-lost")
    assert "16 GPUs on nodes not ready" in waiting.pending_reason_message
    assert run.ended == 1
