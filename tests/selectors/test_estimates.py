"""Estimated start times: a forward simulation with the engine from the current state."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from allocations import engine
from allocations.choices import JobState
from allocations.engine import allocate
from allocations.selectors.estimates import estimated_starts, forecast_starts
from allocations.selectors.snapshot import build_snapshot
from tests import factories as f

NODE8 = [engine.Node(name=f"n{i}", instance_type="p5", gpus=8) for i in (1, 2)]


def snapshot(*jobs: engine.Job) -> engine.Snapshot:
    return engine.Snapshot(
        instance_types=(engine.InstanceType("p5", 8),),
        nodes=tuple(NODE8),
        teams=(
            engine.Team("a", quotas={"p5": engine.Quota(quota=8)}),
            engine.Team("b", quotas={"p5": engine.Quota(quota=8)}),
        ),
        policy=engine.ClusterPolicy(),
        jobs=jobs,
    )


def running(job_id: str, team: str, node: str, started: float) -> engine.Job:
    return engine.Job(job_id, team, "p5", 8, submit_time=0, nodes=((node, 8),), started_at=started)


def pending(job_id: str, team: str, gpus: int, submitted: float) -> engine.Job:
    return engine.Job(job_id, team, "p5", gpus, submit_time=submitted)


def test_a_job_that_fits_now_starts_now():
    starts = forecast_starts(snapshot(pending("p", "a", 8, 50)), 100.0, {"p": 10.0}, allocate)
    assert starts == {"p": 100.0}


def test_a_waiting_job_starts_when_the_job_holding_its_gpus_ends():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    starts = forecast_starts(snap, 100.0, {"r1": 600.0, "r2": 900.0, "p": 60.0}, allocate)
    assert starts == {"p": 600.0}


def test_jobs_queue_behind_each_other():
    snap = snapshot(
        running("r1", "a", "n1", 0),
        running("r2", "b", "n2", 0),
        pending("p1", "a", 8, 10),
        pending("p2", "a", 8, 20),
    )
    # p1 takes n1 at 600; p2 needs team a's room: at 900 b's job ends, a may borrow up to 12
    # (8 + 50%) only, so p2 (8 more) waits until p1 ends at 600 + 100.
    starts = forecast_starts(snap, 100.0, {"r1": 600.0, "r2": 900.0, "p1": 100.0, "p2": 5.0}, allocate)
    assert starts == {"p1": 600.0, "p2": 700.0}


def test_unknown_when_a_running_job_has_no_duration():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    assert forecast_starts(snap, 100.0, {"r1": None, "r2": 900.0, "p": 60.0}, allocate) == {"p": None}


def test_unknown_beyond_the_horizon():
    snap = snapshot(running("r1", "a", "n1", 0), running("r2", "b", "n2", 0), pending("p", "a", 8, 10))
    starts = forecast_starts(
        snap, 100.0, {"r1": 10_000.0, "r2": 10_000.0, "p": 1.0}, allocate, horizon_s=1000
    )
    assert starts == {"p": None}


def test_estimated_starts_from_the_database(personas):
    now = timezone.now()
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    f.make_job(
        personas.team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n1, 8]],
        started_at=now - timedelta(seconds=600),
        requested_duration=3600,
    )
    f.make_job(
        personas.other_team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n2, 8]],
        started_at=now,
        requested_duration=7200,
    )
    waiting = f.make_job(personas.team, it, 8, requested_duration=60)
    estimates = estimated_starts(build_snapshot(now), now)
    expected = now - timedelta(seconds=600) + timedelta(seconds=3600)
    assert abs((estimates[waiting.pk] - expected).total_seconds()) < 0.01
