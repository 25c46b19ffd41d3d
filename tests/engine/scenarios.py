"""Build engine snapshots from scenario-shaped dicts and replay them over time.

A tiny stand-in for the simulator, just enough to drive ``allocate`` the way SCENARIO.md says:
at every time something happens (a submit, a finish) cycles run until one changes nothing. It
understands the subset of the scenario format the engine tests use (no ``events``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocations.engine import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingReason,
    Plan,
    PreemptTeamTasks,
    PreemptWhileBorrowing,
    PriorityClass,
    Queueing,
    Quota,
    Reclaim,
    Sharing,
    Snapshot,
    TaskRanking,
    Team,
    allocate,
)

MAX_CYCLES_AT_ONE_TIME = 200


def policy_of(spec: Mapping[str, Any]) -> ClusterPolicy:
    return ClusterPolicy(
        idle_allocation=IdleAllocation(spec.get("idle_allocation", "fair-share")),
        task_ranking=TaskRanking(spec.get("task_ranking", "priority")),
        share_unallocated=bool(spec.get("share_unallocated", True)),
        queueing=Queueing(spec.get("queueing", "best-effort-fifo")),
        priority_classes=tuple(
            PriorityClass(p["name"], p["weight"], p.get("min_runtime_s"))
            for p in spec.get("priority_classes", ())
        ),
        fair_share_half_life_s=float(spec.get("fair_share_half_life_s", 0)),
        fair_share_history_percent=spec.get("fair_share_history_percent", 0),
        min_runtime_s=float(spec.get("min_runtime_s", 0)),
    )


def team_of(spec: Mapping[str, Any], types: list[str]) -> Team:
    quotas = spec.get("quota", {})
    lend = spec.get("lend_limit", {})
    borrow = spec.get("borrow_limit")
    per_type = {}
    for it in types:
        per_type[it] = Quota(
            quota=quotas.get(it, 0),
            lend_limit=lend.get(it),
            borrow_limit_percent=spec.get("borrow_limit_percent", 50),
            borrow_limit=borrow.get(it) if isinstance(borrow, dict) else None,
            borrow_unlimited=borrow == "unlimited",
        )
    pwb = spec.get("preempt_while_borrowing")
    pwb_policy = None
    pwb_max = None
    if pwb == "never":
        pwb_policy = PreemptWhileBorrowing.NEVER
    elif isinstance(pwb, dict):
        pwb_policy = PreemptWhileBorrowing(pwb["policy"])
        pwb_max = pwb.get("max_priority")
    elif pwb is not None:
        pwb_policy = PreemptWhileBorrowing(pwb)
    return Team(
        name=spec["name"],
        quotas=per_type,
        active=spec.get("active", True),
        sharing=Sharing(spec.get("sharing", "lend-and-borrow")),
        fair_share_weight=spec.get("fair_share_weight", 1),
        preempt_team_tasks=PreemptTeamTasks(spec.get("preempt_team_tasks", "lower-priority")),
        reclaim=Reclaim(spec.get("reclaim", "any")),
        preempt_while_borrowing=pwb_policy,
        preempt_while_borrowing_max_priority=pwb_max,
        max_running_gpus_per_member=spec.get("max_running_gpus_per_member"),
    )


@dataclass
class Replay:
    """A scenario being replayed: the current snapshot and what happened so far."""

    snapshot: Snapshot
    durations: dict[str, float | None]
    submits: dict[str, float]
    started: dict[str, float] = field(default_factory=dict)
    preempted: dict[str, tuple[str, str]] = field(default_factory=dict)  # last (reason, by)
    pending: Mapping[str, PendingReason] = field(default_factory=dict)
    plans: list[Plan] = field(default_factory=list)
    start_seq: int = 0
    finished: set[str] = field(default_factory=set)

    @property
    def running(self) -> set[str]:
        return {j.id for j in self.snapshot.jobs if j.running}

    def codes(self) -> dict[str, str]:
        return {k: v.code.value for k, v in self.pending.items()}


def build(spec: Mapping[str, Any]) -> Replay:
    """The snapshot at time 0 (before any cycle): jobs with ``running_since`` already placed."""
    cluster = spec["cluster"]
    types: dict[str, int] = {}
    nodes: list[Node] = []
    for pool in cluster.get("node_pools", ()):
        it = pool["instance_type"]
        types[it] = pool["gpus_per_node"]
        for k in range(pool["count"]):
            nodes.append(Node(f"{it}-{k:03d}", it, pool["gpus_per_node"], pool.get("ready", True)))
    for node in cluster.get("nodes", ()):
        types.setdefault(node["instance_type"], node["gpus"])
        nodes.append(Node(node["name"], node["instance_type"], node["gpus"], node.get("ready", True)))
    type_names = list(types)
    teams = tuple(team_of(t, type_names) for t in spec["teams"])
    free = {n.name: n.gpus for n in nodes}
    jobs: list[Job] = []
    durations: dict[str, float | None] = {}
    submits: dict[str, float] = {}
    started: dict[str, float] = {}
    for seq, j in enumerate(spec["jobs"]):
        it = j.get("instance_type", type_names[0])
        job = Job(
            id=j["id"],
            team=j["team"],
            instance_type=it,
            gpus=j["gpus"],
            submit_time=float(j.get("submit", 0)),
            seq=seq,
            priority_class=j.get("priority"),
            preemptions=j.get("preemptions", 0),
            last_preempted_at=j.get("last_preempted_at"),
            submitter=j.get("submitter"),
            checkpoint_interval_s=j.get("checkpoint_interval_s"),
        )
        durations[job.id] = j.get("duration")
        submits[job.id] = job.submit_time
        if "running_since" in j:
            placed = tuple(map(tuple, j["on"])) if "on" in j else _first_fit(job, nodes, free, types[it])
            for name, gpus in placed:
                if "on" in j:
                    free[name] -= gpus
            job = dataclasses.replace(
                job, nodes=placed, started_at=float(j["running_since"]), start_seq=j.get("start_seq", 0)
            )
            started[job.id] = float(j["running_since"])
        jobs.append(job)
    snapshot = Snapshot(
        instance_types=tuple(InstanceType(n, g) for n, g in types.items()),
        nodes=tuple(nodes),
        teams=teams,
        policy=policy_of(spec.get("policy", {})),
        jobs=tuple(jobs),
        # Per team, its decayed average of borrowed GPUs (docs/fairness.md), given as is.
        borrowed_history={k: float(v) for k, v in spec.get("borrowed_history", {}).items()},
    )
    return Replay(snapshot=snapshot, durations=durations, submits=submits, started=started)


def _first_fit(
    job: Job, nodes: list[Node], free: dict[str, int], per_node: int
) -> tuple[tuple[str, int], ...]:
    """Place an already-running job: fullest node with room, or whole free nodes."""
    mine = sorted(
        (n for n in nodes if n.instance_type == job.instance_type and n.ready), key=lambda n: n.name
    )
    if job.gpus <= per_node:
        fitting = [n for n in mine if free[n.name] >= job.gpus]
        if not fitting:
            raise ValueError(f"running job {job.id} does not fit on the nodes")
        node = min(fitting, key=lambda n: (free[n.name], n.name))
        free[node.name] -= job.gpus
        return ((node.name, job.gpus),)
    placed = []
    left = job.gpus
    for node in mine:
        if left and free[node.name] == node.gpus:
            placed.append((node.name, node.gpus))
            free[node.name] = 0
            left -= node.gpus
    if left:
        raise ValueError(f"running job {job.id} does not fit on the nodes")
    return tuple(placed)


def apply(replay: Replay, plan: Plan, now: float) -> None:
    """Apply a plan the way the simulator does: preemptions first, then starts."""
    jobs = {j.id: j for j in replay.snapshot.jobs}
    for p in plan.preemptions:
        job = jobs[p.job_id]
        jobs[p.job_id] = dataclasses.replace(
            job, nodes=(), started_at=None, preemptions=job.preemptions + 1, last_preempted_at=now
        )
        replay.preempted[p.job_id] = (p.reason.value, p.preemptor)
    for s in plan.starts:
        replay.start_seq += 1
        jobs[s.job_id] = dataclasses.replace(
            jobs[s.job_id], nodes=s.nodes, started_at=now, start_seq=replay.start_seq
        )
        replay.started[s.job_id] = now
    replay.snapshot = dataclasses.replace(replay.snapshot, jobs=tuple(jobs.values()))
    replay.pending = plan.pending


def settle(replay: Replay, now: float) -> None:
    """Run cycles at ``now`` until one changes nothing."""
    for _ in range(MAX_CYCLES_AT_ONE_TIME):
        plan = allocate(replay.snapshot, now)
        replay.plans.append(plan)
        apply(replay, plan, now)
        if not plan.starts and not plan.preemptions:
            return
    raise AssertionError(f"the cycles at t={now} did not come to rest")


def run_until(spec: Mapping[str, Any], until: float) -> Replay:
    """Replay ``spec`` from 0 to ``until``: submits and finishes, cycles at every change."""
    replay = build(spec)
    visible = {j.id for j in replay.snapshot.jobs if j.running or replay.submits[j.id] <= 0}
    all_jobs = {j.id: j for j in replay.snapshot.jobs}
    replay.snapshot = dataclasses.replace(
        replay.snapshot, jobs=tuple(j for j in all_jobs.values() if j.id in visible)
    )
    now = 0.0
    while True:
        # Finishes at or before now.
        kept = []
        for job in replay.snapshot.jobs:
            duration = replay.durations[job.id]
            if job.running and duration is not None and replay.started[job.id] + duration <= now:
                replay.finished.add(job.id)
                continue
            kept.append(job)
        for job_id, job in all_jobs.items():
            if job_id not in visible and replay.submits[job_id] <= now:
                visible.add(job_id)
                kept.append(job)
        replay.snapshot = dataclasses.replace(replay.snapshot, jobs=tuple(kept))
        settle(replay, now)
        upcoming = [t for j, t in replay.submits.items() if j not in visible and t > now]
        for job in replay.snapshot.jobs:
            duration = replay.durations[job.id]
            if job.running and duration is not None:
                upcoming.append(replay.started[job.id] + duration)
        upcoming = [t for t in upcoming if now < t <= until]
        if not upcoming:
            return replay
        now = min(upcoming)
