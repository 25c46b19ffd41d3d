"""docs/preemption.md 5 and 6: a victim that terminates within its grace.

It stays on its nodes in the snapshot (``Job.terminating_since``): its GPUs stay counted, so
nothing else takes them (no resources are counted twice), and it is no candidate of any
search (it is never preempted a second time)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from allocations.engine import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PriorityClass,
    Quota,
    Snapshot,
    Team,
    allocate,
)
from allocations.engine.session import Session

from . import reference
from .test_shortcuts import CLASSES, busy_cluster

T = "ml.t"
POLICY = ClusterPolicy(priority_classes=(PriorityClass("low", 10), PriorityClass("high", 30)))


def cluster(*jobs: Job) -> Snapshot:
    return Snapshot(
        instance_types=(InstanceType(T, 8),),
        nodes=(Node("n0", T, 8),),
        teams=(Team("a", {T: Quota(8)}), Team("b", {T: Quota(0)})),
        policy=POLICY,
        jobs=jobs,
    )


def run(job_id: str, team: str, gpus: int, since: float, prio: str = "low", **kw: object) -> Job:
    return Job(
        job_id, team, T, gpus, since, priority_class=prio, nodes=(("n0", gpus),), started_at=since, **kw
    )  # type: ignore[arg-type]


def wait(job_id: str, team: str, gpus: int, submit: float, prio: str = "low", seq: int = 0) -> Job:
    return Job(job_id, team, T, gpus, submit, seq=seq, priority_class=prio)


def test_a_terminating_job_is_no_victim_and_its_gpus_stay_counted() -> None:
    """b1 (borrowing all 8 GPUs of a's quota) was signalled for a's preemptor, which the caller
    holds back: a's other job a2 finds no GPU free and takes nobody; without the signal it
    reclaims them from b1."""
    b1 = run("b1", "b", 8, since=-100)
    a2 = wait("a2", "a", 4, submit=0, seq=2)
    plan = allocate(cluster(dataclasses.replace(b1, terminating_since=-5.0), a2), 0.0)
    assert plan.starts == () and plan.preemptions == ()
    assert plan.pending["a2"].code.value == "waiting-for-quota", plan.pending["a2"]
    # The same cluster, b1 not signalled: a2 reclaims.
    plan = allocate(cluster(b1, a2), 0.0)
    assert [p.job_id for p in plan.preemptions] == ["b1"]


def test_a_terminating_job_is_never_preempted_twice_in_team() -> None:
    """In a's own team, a high job would preempt its low job a1; a1 terminating, it waits, and
    the other low job a0 (also running) is taken instead: GPUs are freed once per victim."""
    a0 = run("a0", "a", 4, since=-200)
    a1 = run("a1", "a", 4, since=-100, terminating_since=-1.0)
    h = wait("h", "a", 4, submit=0, prio="high", seq=3)
    plan = allocate(cluster(a0, a1, h), 0.0)
    assert [(p.job_id, p.preemptor) for p in plan.preemptions] == [("a0", "h")]
    assert plan == reference.allocate(cluster(a0, a1, h), 0.0)


def test_a_session_follows_a_victim_that_starts_terminating_then_ends() -> None:
    """The victim's signal and its end are job changes like any other: a session gives
    ``allocate``'s plan at each step."""
    b1 = run("b1", "b", 8, since=-100)
    a1 = wait("a1", "a", 8, submit=0, seq=1)
    a2 = wait("a2", "a", 4, submit=1, seq=2)
    session = Session()
    steps = [
        (cluster(b1, a1, a2), 0.0),
        # a1 preempted b1 with a grace: held back by the caller, b1 terminating.
        (cluster(dataclasses.replace(b1, terminating_since=0.0), a2), 1.0),
        (cluster(dataclasses.replace(b1, terminating_since=0.0), a2), 2.0),
        # b1 ended: a1 is back and, first in its team's queue, takes the GPUs.
        (cluster(a1, a2), 3.0),
    ]
    plans = []
    for snapshot, now in steps:
        plan = session(snapshot, now)
        assert plan == allocate(snapshot, now), now
        plans.append(plan)
    assert [p.job_id for p in plans[0].preemptions] == ["b1"]
    assert plans[1].starts == plans[1].preemptions == ()
    assert [s.job_id for s in plans[3].starts] == ["a1"]


def _signal_some(rng: random.Random, snapshot: Snapshot, now: float) -> Snapshot:
    """Mark about a fifth of the running jobs terminating, as a caller with a grace does."""
    jobs = tuple(
        dataclasses.replace(j, terminating_since=now) if j.running and rng.random() < 0.2 else j
        for j in snapshot.jobs
    )
    return dataclasses.replace(snapshot, jobs=jobs)


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters_with_terminating_jobs_keep_the_reference_plan(seed: int) -> None:
    """docs/preemption.md 6: on busy clusters where some running jobs terminate, the cycle gives
    the reference's plan, takes no terminating job, and a session kept over the signals and
    the victims' ends gives ``allocate``'s plan at each step."""
    rng = random.Random(seed)
    idle = rng.choice(list(IdleAllocation))
    snapshot = busy_cluster(rng, ClusterPolicy(idle, priority_classes=CLASSES), costs=seed % 2 == 0)
    session = Session()
    for step, now in enumerate((0.0, 0.0, 40.0, 40.0, 90.0)):
        snapshot = _signal_some(rng, snapshot, now)
        terminating = {j.id for j in snapshot.jobs if j.terminating_since is not None}
        plan = session(snapshot, now)
        assert plan == allocate(snapshot, now) == reference.allocate(snapshot, now), step
        assert not terminating & {p.job_id for p in plan.preemptions}
        # The terminating jobs end, as the caller finds them gone, and the plan is applied.
        jobs = {j.id: j for j in snapshot.jobs if j.id not in terminating}
        for p in plan.preemptions:
            jobs[p.job_id] = dataclasses.replace(jobs[p.job_id], nodes=(), started_at=None)
        for n, s in enumerate(plan.starts):
            jobs[s.job_id] = dataclasses.replace(
                jobs[s.job_id], nodes=s.nodes, started_at=now, start_seq=100 * step + n + 1
            )
        snapshot = dataclasses.replace(snapshot, jobs=tuple(jobs.values()))
