"""A ``Session`` gives, cycle after cycle, exactly the plan of ``allocate`` (engine/session.py).

The session keeps a cycle's starting point between calls and brings it up to date with what
changed (from the snapshot's ``JobChanges``, or by comparing job objects), so the check is made
where that could go wrong: random replays with priorities, preemptions and their back-offs,
cancellations, nodes lost and back, team and policy updates, where every cycle is computed both
ways and compared.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from allocations.engine import ClusterPolicy, IdleAllocation, Plan, Snapshot, allocate
from allocations.engine.session import Session
from allocations.simulation import parse_scenario, replay
from allocations.simulation.scenario import team_name_from_trace

from . import reference
from .test_shortcuts import CLASSES, busy_cluster

TYPES = [("big", 8), ("small", 4)]


def random_scenario(rng: random.Random, members: bool = False) -> dict[str, Any]:
    """A random replay; with ``members``, limits of running GPUs per member on some teams (one
    changed by an event), and a submitter (or none) on each job, drawn after the rest so that
    the scenarios without are those drawn before."""
    teams = []
    for i in range(rng.randint(2, 5)):
        team: dict[str, Any] = {
            "name": f"t{i}",
            "quota": {name: rng.choice([0, 4, 8, 16]) for name, _ in TYPES},
            "sharing": rng.choice(["lend-and-borrow", "lend-and-borrow", "lend", "dont-lend"]),
            "fair_share_weight": rng.choice([0, 1, 1, 2]),
            "reclaim": rng.choice(["any", "any", "lower-priority", "never"]),
            "preempt_team_tasks": rng.choice(["lower-priority", "lower-or-newer-equal-priority", "never"]),
        }
        if rng.random() < 0.4:
            team["borrow_limit"] = "unlimited"
        teams.append(team)
    jobs = []
    for j in range(rng.randint(20, 90)):
        it, per_node = rng.choice(TYPES)
        jobs.append(
            {
                "id": f"j{j}",
                "team": f"t{rng.randrange(len(teams))}",
                "instance_type": it,
                "gpus": rng.choice([1, 1, 2, 4, per_node, 2 * per_node]),
                "priority": rng.choice([None, "low", "mid", "high"]),
                "submit": rng.randrange(0, 400),
                "duration": rng.choice([None, 0, 30, 60, 200]),
            }
        )
    events: list[dict[str, Any]] = []
    lost: set[str] = set()  # one node down (and back) at most per instance type
    for _ in range(rng.randint(0, 4)):
        at = rng.randrange(0, 500)
        kind = rng.choice(["node", "cancel", "team", "policy"])
        if kind == "node":
            it = rng.choice(TYPES)[0]
            if it in lost:
                continue
            lost.add(it)
            events += [
                {"at": at, "node_down": {"instance_type": it, "count": 1}},
                {"at": at + rng.randrange(1, 100), "node_up": {"instance_type": it, "count": 1}},
            ]
        elif kind == "cancel":
            events.append({"at": at, "cancel": rng.choice(jobs)["id"]})
        elif kind == "team":
            name = rng.choice(teams)["name"]
            events.append(
                {"at": at, "update_team": {"name": name, "quota": {TYPES[0][0]: rng.choice([0, 8, 24])}}}
            )
        else:
            idle = rng.choice(["fair-share", "first-come-first-serve"])
            events.append({"at": at, "update_policy": {"idle_allocation": idle}})
    if members:
        for team in teams:
            team["max_running_gpus_per_member"] = rng.choice([None, 2, 4, 8, 16])
        for job in jobs:
            job["submitter"] = rng.choice([None, "ann", "bob", "ann"])
        limit = rng.choice([None, 1, 4])
        events.append(
            {"at": rng.randrange(0, 500), "update_team": {"name": "t0", "max_running_gpus_per_member": limit}}
        )
    return {
        "cluster": {
            "node_pools": [
                {"instance_type": name, "count": rng.randint(2, 4), "gpus_per_node": per_node}
                for name, per_node in TYPES
            ]
        },
        "policy": {
            "idle_allocation": rng.choice(["fair-share", "first-come-first-serve"]),
            "queueing": rng.choice(["best-effort-fifo", "best-effort-fifo", "strict-fifo"]),
            "priority_classes": [{"name": c.name, "weight": c.weight} for c in CLASSES],
        },
        "teams": teams,
        "jobs": jobs,
        "events": events,
        "options": {"keep_unfit": True},
        "horizon": 1200,
    }


class Both:
    """An ``allocate`` for the replay that runs the session and the engine and compares."""

    def __init__(self) -> None:
        self.session = Session()
        self.cycles = 0
        self.with_changes = 0

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = self.session(snapshot, now)
        expected = allocate(snapshot, now)
        assert plan == expected, f"cycle {self.cycles} at t={now}"
        self.cycles += 1
        self.with_changes += snapshot.changes is not None
        return plan


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_session_gives_the_engines_plan_at_every_cycle_of_a_replay(seed: int) -> None:
    data = random_scenario(random.Random(seed))
    both = Both()
    replay(parse_scenario(data, name="random"), allocate=both)
    # A draw where no job can ever start (every quota 0, nothing to borrow) runs no cycle.
    assume(both.cycles > 0)
    # Only team, node and policy changes (and the first cycle) make the session start again.
    events = sum(1 for e in data["events"] if "cancel" not in e)
    assert both.session.rebuilds <= 1 + events


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_session_gives_the_engines_plan_with_limits_per_member(seed: int) -> None:
    """A member's running GPUs follow the session's running jobs as they are added and
    removed (``CycleState.record`` and ``remove``), and teams with the limit decide their
    jobs one by one, quiet cycles included."""
    both = Both()
    replay(parse_scenario(random_scenario(random.Random(seed), members=True), name="random"), allocate=both)
    assume(both.cycles > 0)


@pytest.mark.parametrize(
    ("seed", "pitfall"),
    [
        (24, "hold"),
        (309, "hold"),
        (359, "hold"),
        (224, "lone"),
        (1660, "lone"),
        (2938, "lone"),
    ],
)
def test_quiet_cycles_on_replays_that_once_caught_them_out(seed: int, pitfall: str) -> None:
    """After a cycle that changed nothing, a session decides only the new jobs' shapes
    (``BatchedCycle.quiet``). Each of these replays differed from ``allocate`` without one
    line of it. ``hold``: a new shape's job holds capacity, so the whole cycle runs, and must
    not read that failure as one of its own. ``lone``: a team that preempts its newer jobs of
    equal priority decides each job on its own, so a job out of its back-off does not fail
    because its shape did (here it preempts a newer job of its team)."""
    both = Both()
    replay(parse_scenario(random_scenario(random.Random(seed)), name="random"), allocate=both)
    assert both.session.quiet_given_up > 0


@pytest.mark.parametrize(
    ("seed", "pitfall"),
    [
        (1039, "epochs"),
        (1138, "epochs"),
        (2096, "epochs"),
        (2273, "epochs"),
        (6, "hold"),
        (109, "hold"),
        (339, "hold"),
    ],
)
def test_cycles_that_go_on_from_the_one_before_on_replays_that_once_caught_them_out(
    seed: int, pitfall: str
) -> None:
    """After a cycle that changed something, the next cycle at the same instant goes on from
    its memory of failures (``memory.FollowOn``), and a job over its team's borrow limit
    keeps its failure from cycle to cycle while its team's usage and candidates there stand
    (``memory.TEAM_LIMIT``). Each of these replays differed from ``allocate`` in a first
    version of that. ``epochs``: the instance types' epochs started again at 0 in each cycle,
    so a memory made in a cycle that went on from another (at that cycle's epochs) matched the
    next cycle's epochs by chance. ``hold``: a failure kept from an earlier cycle skipped the
    search that would have held the team's quota in this one (POLICY.md 3.3)."""
    both = Both()
    replay(parse_scenario(random_scenario(random.Random(seed)), name="random"), allocate=both)
    assert both.session.followed > 0


def test_most_cycles_after_a_quiet_one_decide_only_the_new_jobs() -> None:
    """A full cluster and a stream of jobs that cannot start: each cycle after one that
    changed nothing decides only the jobs submitted since (with the same plans as
    ``allocate``, reasons included), until a job finishes and whole cycles run again."""
    pools = [{"instance_type": "big", "count": 2, "gpus_per_node": 8}]
    teams = [{"name": n, "quota": {"big": 8}, "sharing": "lend"} for n in ("a", "b")]
    jobs = [
        {"id": "r1", "team": "a", "instance_type": "big", "gpus": 8, "submit": 0, "duration": 500},
        {"id": "r2", "team": "b", "instance_type": "big", "gpus": 8, "submit": 0, "duration": 900},
    ]
    jobs += [
        {"id": f"w{k}", "team": "ab"[k % 2], "instance_type": "big", "gpus": 1 + k % 4, "submit": 10 + 10 * k}
        for k in range(20)
    ]
    data = {"cluster": {"node_pools": pools}, "teams": teams, "jobs": jobs, "horizon": 1000}
    both = Both()
    result = replay(parse_scenario(data, name="quiet"), allocate=both)
    assert result.jobs["w0"].admitted_at == (500.0,)  # when r1 finished
    # At 0 the two jobs start and nothing is left pending; the cycle at 10 (w0) is a whole
    # one and changes nothing; each of the 19 later submissions is decided alone, the first
    # of each team and size as a new shape's job, the others from their shape's memory.
    assert both.session.quiet_cycles == 19
    assert both.session.quiet_given_up == 0
    assert both.session.rebuilds == 1


def test_random_replays_preempt_and_back_off() -> None:
    """The replays above are busy enough to mean something: preemptions, re-queued jobs in
    their back-off and their retry cycles happen."""
    preempted = 0
    for seed in range(12):
        result = replay(parse_scenario(random_scenario(random.Random(seed)), name="random"))
        preempted += result.cluster.preemptions
    assert preempted >= 10


def test_a_session_follows_snapshots_without_changes_by_comparing_jobs() -> None:
    """Snapshots from elsewhere (no ``changes``): jobs removed, added, changed, then another
    cluster altogether; a bad snapshot raises what ``allocate`` raises."""
    session = Session()
    rng = random.Random(5)
    snapshot = busy_cluster(rng, ClusterPolicy(IdleAllocation.FAIR_SHARE, priority_classes=CLASSES))
    assert session(snapshot, 0.0) == allocate(snapshot, 0.0)
    for step in range(1, 8):
        jobs = list(snapshot.jobs)
        rng.shuffle(jobs)
        kept = jobs[: len(jobs) * 4 // 5]  # a fifth finish or are cancelled
        pending = [j for j in kept if not j.nodes][:5]
        changed = {j.id: dataclasses.replace(j, submit_time=j.submit_time - 1) for j in pending}
        new = [dataclasses.replace(pending[0], id=f"new-{step}-{k}", seq=10_000 * step + k) for k in range(3)]
        jobs = [changed.get(j.id, j) for j in kept] + new
        snapshot = dataclasses.replace(snapshot, jobs=tuple(jobs))
        assert session(snapshot, float(step)) == allocate(snapshot, float(step))
    assert session.rebuilds == 1
    other = busy_cluster(random.Random(6), ClusterPolicy(priority_classes=CLASSES))
    assert session(other, 10.0) == allocate(other, 10.0)
    assert session.rebuilds == 2
    twice = dataclasses.replace(other, jobs=(*other.jobs, other.jobs[0]))
    with pytest.raises(ValueError, match=r"jobs\[\d+\]\.id: duplicate job id"):
        allocate(twice, 11.0)
    with pytest.raises(ValueError, match=r"jobs\[\d+\]\.id: duplicate job id"):
        session(twice, 11.0)
    assert session(other, 12.0) == allocate(other, 12.0)


def test_time_going_back_starts_the_session_again() -> None:
    session = Session()
    snapshot = busy_cluster(random.Random(9), ClusterPolicy(priority_classes=CLASSES))
    assert session(snapshot, 5.0) == allocate(snapshot, 5.0)
    assert session(snapshot, -2.0) == allocate(snapshot, -2.0)
    assert session.rebuilds == 2


PHILLY = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly-mix1.csv"


@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is in ../shared/traces (CI has it)")
@pytest.mark.parametrize("idle", ["fair-share", "first-come-first-serve"])
def test_a_session_gives_the_engines_plans_on_the_start_of_the_philly_trace(
    idle: str, tmp_path: Path
) -> None:
    """Real jobs: the first 1,500 rows of the Philly trace on a small cluster of 10 teams."""
    with PHILLY.open(newline="") as handle:
        rows = list(itertools.islice(csv.DictReader(handle), 1500))
    trace = tmp_path / "philly-head.csv"
    with trace.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    teams = sorted({team_name_from_trace(row["user"]) for row in rows})
    data = {
        "name": "philly-head",
        "cluster": {"node_pools": [{"instance_type": "philly.4gpu", "count": 40, "gpus_per_node": 4}]},
        "policy": {
            "idle_allocation": idle,
            "priority_classes": [{"name": "normal", "weight": 50}, {"name": "best-effort", "weight": 0}],
        },
        "teams": [
            {"name": name, "quota": {"philly.4gpu": 160 // len(teams)}, "borrow_limit": "unlimited"}
            for name in teams
        ],
        "jobs_csv": {
            "path": str(trace),
            "columns": {
                "id": "job_id",
                "team": "user",
                "gpus": "num_gpu",
                "submit": "submit_time",
                "duration": "duration",
                "priority": "best_effort",
            },
            "priority_values": {"0": "normal", "1": "best-effort"},
        },
    }
    both = Both()
    replay(parse_scenario(data, name="philly-head"), allocate=both)
    assert both.cycles > 500
    assert both.session.rebuilds == 1


def test_a_session_starts_again_when_the_borrowed_history_changes() -> None:
    """docs/fairness.md: the history is fixed for a cycle but moves from one to the next; a
    session's kept shares would be stale, so it starts again from the snapshot."""
    policy = ClusterPolicy(
        IdleAllocation.FAIR_SHARE,
        priority_classes=CLASSES,
        fair_share_half_life_s=600.0,
        fair_share_history_percent=60,
    )
    snapshot = busy_cluster(random.Random(11), policy)
    session = Session()
    assert session(snapshot, 0.0) == allocate(snapshot, 0.0)
    for step in range(1, 4):
        history = {t.name: float(step * k) for k, t in enumerate(snapshot.teams)}
        snapshot = dataclasses.replace(snapshot, borrowed_history=history)
        assert session(snapshot, float(step)) == allocate(snapshot, float(step))
    assert session.rebuilds == 4


class WithReference(Both):
    """``Both``, also compared with the plain cycle of ``tests/engine/reference.py``."""

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = super().__call__(snapshot, now)
        assert plan == reference.allocate(snapshot, now), f"cycle {self.cycles - 1} at t={now}"
        return plan


# Long: each draw replays a random scenario through the session, the engine and the reference.
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), percent=st.sampled_from([40, 100]))
def test_replays_with_fairness_over_time_give_the_reference_plans(seed: int, percent: int) -> None:
    """docs/fairness.md: the replay's history moves at every instant; the session starts again
    for it, and the cycle's shortcuts, fed shares with history, still give the plain cycle's
    plans over whole replays."""
    data = random_scenario(random.Random(seed))
    data["policy"].update(
        idle_allocation="fair-share", fair_share_half_life_s=120, fair_share_history_percent=percent
    )
    both = WithReference()
    replay(parse_scenario(data, name="random"), allocate=both)
