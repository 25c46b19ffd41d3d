"""What the replay makes a batch at a time: the jobs submitted at one time (their engine
``Job``s and queue entries), the result's ``JobResult``s (``build_many``), and the record of
every job built with the cyclic collector paused."""

from __future__ import annotations

import gc
import pickle
import random
import textwrap
from dataclasses import dataclass, fields

import pytest
import yaml

from allocations.engine.session import Session
from allocations.engine.snapshot import Job, PendingCode, PendingReason, Plan, Snapshot
from allocations.simulation import parse_scenario, replay
from allocations.simulation.replay import Replay, build_many
from allocations.simulation.result import JobResult, PreemptionRecord


def load(text: str, **kwargs: object):
    return parse_scenario(yaml.safe_load(textwrap.dedent(text)), **kwargs)  # type: ignore[arg-type]


def random_jobs(rng: random.Random, count: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"j{i}",
            "team": rng.choice(["a", "b"]),
            "instance_type": rng.choice(["x", "y"]),
            "gpus": rng.randint(1, 8),
            "submit_time": rng.choice([0.0, -3.5, 12.0]),
            "seq": i,
            "priority_class": rng.choice([None, "high"]),
            "preemptions": rng.choice([0, 2]),
            "last_preempted_at": rng.choice([None, 4.0]),
        }
        for i in range(count)
    ]


def test_build_many_makes_the_objects_the_class_makes() -> None:
    """Field by field through the slots: equal to the class's own, hashed, shown and pickled
    alike, with the defaults of the fields it is given no column for."""
    rows = random_jobs(random.Random(3), 50)
    given = ("id", "team", "instance_type", "gpus", "submit_time", "seq", "priority_class")
    built = build_many(Job, len(rows), **{name: [row[name] for row in rows] for name in given})
    made = [Job(**{name: row[name] for name in given}) for row in rows]  # type: ignore[arg-type]
    assert built == made
    assert [hash(j) for j in built] == [hash(j) for j in made]
    assert [repr(j) for j in built] == [repr(j) for j in made]
    assert pickle.loads(pickle.dumps(built)) == made
    assert all(j.nodes == () and j.preemptions == 0 and j.last_preempted_at is None for j in built)

    every = [f.name for f in fields(Job) if f.name in rows[0]]
    assert build_many(Job, len(rows), **{n: iter([r[n] for r in rows]) for n in every}) == [
        Job(**row)  # type: ignore[arg-type]
        for row in rows
    ]

    reason = PendingReason(PendingCode.NO_IDLE_CAPACITY, "waits")
    records = (PreemptionRecord(5.0, "reclaim", "j9"),)
    results = build_many(
        JobResult,
        2,
        id=["r1", "r2"],
        team=["a", "b"],
        instance_type=["x", "x"],
        gpus=[1, 4],
        priority=[None, "high"],
        submit=[0.0, -2.0],
        state=["pending", "running"],
        pending_reason=[reason, None],
        preempted=[(), records],
    )
    assert results == [
        JobResult("r1", "a", "x", 1, None, 0.0, "pending", pending_reason=reason),
        JobResult("r2", "b", "x", 4, "high", -2.0, "running", preempted=records),
    ]
    assert build_many(Job, 0, id=[], team=[], instance_type=[], gpus=[], submit_time=[]) == []


@dataclass(frozen=True, slots=True)
class Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(frozen=True)
class Unslotted:
    value: int


def test_build_many_refuses_what_it_could_not_make_alike() -> None:
    with pytest.raises(TypeError, match="__post_init__"):
        build_many(Checked, 1, value=[-1])
    with pytest.raises(TypeError, match="not a slot"):
        build_many(Unslotted, 1, value=[1])
    with pytest.raises(TypeError, match=r"Job\.id: no column and no default"):
        build_many(Job, 1, team=["a"], instance_type=["x"], gpus=[1], submit_time=[0.0])
    with pytest.raises(TypeError, match="no field colour"):
        build_many(
            Job, 1, id=["j"], team=["a"], instance_type=["x"], gpus=[1], submit_time=[0.0], colour=["red"]
        )
    with pytest.raises(ValueError):
        build_many(
            Job, 2, id=["j"], team=["a", "b"], instance_type=["x", "x"], gpus=[1, 1], submit_time=[0, 0]
        )


BATCH = """
cluster:
  node_pools: [{instance_type: gpu, count: 1, gpus_per_node: 4}]
teams:
  - {name: a, quota: {gpu: 4}}
  - {name: b, quota: {gpu: 0}, borrow_limit: unlimited}
policy:
  priority_classes: [{name: low, weight: 1}, {name: high, weight: 10}]
jobs:
  - {id: old, team: a, gpus: 4, submit: -60, running_since: -60, duration: 70}
  - {id: late, team: b, gpus: 2, submit: 10, duration: 5}
  - {id: before, team: b, gpus: 1, submit: -20}
  - {id: huge, team: a, gpus: 16, submit: 10}
  - {id: gone, team: a, gpus: 1, submit: 10}
  - {id: first, team: a, gpus: 2, submit: 10, priority: high}
  - {id: zero, team: b, gpus: 1, submit: 0, priority: low}
events:
  - {at: 5, cancel: gone}
"""


def test_the_jobs_submitted_at_one_time_are_queued_rejected_or_skipped_as_one_by_one() -> None:
    """A batch of submits: in queue order (submit time, before time 0 counting as 0, then file
    order), the one that can never fit rejected, the one cancelled before its time skipped;
    each waiting job gets the engine's ``Job`` it would get alone, and waits from its submit."""
    seen: list[tuple[float, list[Job]]] = []
    session = Session()

    def allocate(snapshot: Snapshot, now: float) -> Plan:
        seen.append((now, [job for job in snapshot.jobs if not job.running]))
        return session(snapshot, now)

    scenario = load(BATCH, keep_unfit=True)
    result = replay(scenario, until=40, allocate=allocate)
    specs = {job.id: job for job in scenario.jobs}

    def alone(job_id: str) -> Job:
        s = specs[job_id]
        return Job(
            id=s.id,
            team=s.team,
            instance_type=s.instance_type,
            gpus=s.gpus,
            submit_time=s.submit,
            seq=s.seq,
            priority_class=s.priority,
            preemptions=0,
            last_preempted_at=None,
        )

    at_zero = next(jobs for now, jobs in seen if now == 0)
    assert at_zero == [alone("before"), alone("zero")]
    at_ten = next(jobs for now, jobs in seen if now == 10)
    assert [job.id for job in at_ten] == ["before", "zero", "late", "first"]
    assert at_ten[2:] == [alone("late"), alone("first")]

    jobs = result.jobs
    assert jobs["huge"].state == "rejected" and jobs["huge"].pending_reason is not None
    assert jobs["gone"].state == "cancelled" and jobs["gone"].cancelled_at == 5
    assert jobs["gone"].admitted_at == () and jobs["gone"].pending_reason is None
    assert jobs["old"].state == "finished" and jobs["old"].finished_at == 10
    assert [job_id for job_id, job in jobs.items() if job.admitted_at == (10,)] == ["before", "first", "zero"]
    assert jobs["late"].state == "pending" and jobs["late"].pending_reason is not None
    assert result.counts == {"running": 3, "pending": 1, "finished": 1, "cancelled": 1, "rejected": 1}
    # Waits from the submit time, before 0 too: "before" waited 30 s, "zero" 10 s.
    assert (result.teams["b"].wait_p50_s, result.teams["b"].wait_p95_s) == (10, 30)
    assert isinstance(jobs["first"].admitted_at, tuple) and isinstance(jobs["first"].preempted, tuple)
    assert list(jobs) == [job.id for job in scenario.jobs]


def test_a_replay_leaves_the_collector_as_it_found_it() -> None:
    """The replay pauses the cyclic collector while it builds and runs (``Replay.run``), and
    the what-if lab's ``Replay(...).run()`` too; either way it is as it was afterwards."""
    scenario = load(BATCH, keep_unfit=True)
    was_enabled = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            replay(scenario, until=40)
            assert gc.isenabled() is enabled
            Replay(scenario, until=40).run()
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was_enabled else gc.disable)()
