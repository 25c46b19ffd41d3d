"""The cycle's shortcuts change its speed, never its plan.

``allocate`` (``engine/cycle.py``) decides runs of waiting twins at once, rolled back when a
later change shows they were decided too early, and skips what cannot change (a twin of a job
that could not start, a preemption search that failed with nothing relevant changed since,
searches that bounds show hopeless). ``reference.allocate`` decides every pending job with its
own heap pop and no shortcut. On busy random clusters, where twins, failed searches and
preemptions abound, both must give the same plan, reasons included.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.engine import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PendingCode,
    Plan,
    PreemptTeamTasks,
    PriorityClass,
    Queueing,
    Quota,
    Reclaim,
    Sharing,
    Snapshot,
    TaskRanking,
    Team,
    allocate,
    min_runtime_of,
)
from allocations.engine.session import Session

from . import reference

CLASSES = (PriorityClass("low", 10), PriorityClass("mid", 20), PriorityClass("high", 30))


MEMBERS = ("ann", "bob", "cy")


def busy_cluster(
    rng: random.Random, policy: ClusterPolicy, costs: bool = False, members: bool = False
) -> Snapshot:
    """Two instance types, quotas near capacity, nodes nearly full of jobs of random teams (so
    some teams borrow a lot), and many pending jobs of few shapes.

    ``members``: also limits of running GPUs per member on some teams and a submitter (or
    none) on each job, drawn after the rest so that the clusters without are those drawn before.

    ``costs``: also a minimum runtime on the policy and on some classes and checkpoints on
    some jobs (docs/preemption.md), drawn from a generator of their own after everything else,
    so that the clusters drawn without them stay what they were."""
    types = (InstanceType("big", 8), InstanceType("small", 4))
    nodes = [
        Node(f"{it.name}-{k:02d}", it.name, it.gpus_per_node, rng.random() > 0.05)
        for it in types
        for k in range(rng.randint(3, 12))
    ]
    capacity = {it.name: sum(n.gpus for n in nodes if n.instance_type == it.name) for it in types}
    n_teams = rng.randint(2, 7)
    teams = []
    for k in range(n_teams):
        quotas = {
            it.name: Quota(
                quota=int(capacity[it.name] * rng.uniform(0.5, 1.1) / n_teams),
                lend_limit=rng.choice([None, None, 0, 2]),
                borrow_limit_percent=rng.choice([0, 50, 100, 300]),
                borrow_unlimited=rng.random() < 0.3,
            )
            for it in types
        }
        teams.append(
            Team(
                name=f"t{k}",
                quotas=quotas,
                fair_share_weight=rng.choice([0, 1, 1, 2, 3]),
                reclaim=rng.choice([Reclaim.ANY, Reclaim.ANY, Reclaim.LOWER_PRIORITY, Reclaim.NEVER]),
                preempt_team_tasks=rng.choice(list(PreemptTeamTasks)),
            )
        )
    free = {n.name: n.gpus for n in nodes if n.ready}
    jobs: list[Job] = []
    for k in range(rng.randint(10, 120)):
        it = rng.choice(types)
        gpus = rng.choice([1, 1, 2, 4])
        fitting = [n for n in nodes if n.instance_type == it.name and free.get(n.name, 0) >= gpus]
        if not fitting:
            continue
        node = min(fitting, key=lambda n: (free[n.name], n.name))
        free[node.name] -= gpus
        jobs.append(
            Job(
                id=f"r{k}",
                team=rng.choice(teams).name,
                instance_type=it.name,
                gpus=gpus,
                submit_time=-1000.0,
                seq=k,
                priority_class=rng.choice([None, "low", "mid", "high"]),
                nodes=((node.name, gpus),),
                started_at=float(-rng.randrange(500)),
                preemptions=rng.choice([0, 0, 1]),
                last_preempted_at=-0.5,
            )
        )
    for k in range(rng.randint(20, 250)):
        it = rng.choice(types)
        jobs.append(
            Job(
                id=f"p{k}",
                team=rng.choice(teams).name,
                instance_type=it.name,
                gpus=rng.choice([1, 2, 4, it.gpus_per_node, 2 * it.gpus_per_node]),
                submit_time=float(rng.randrange(-50, 0)),
                seq=1000 + k,
                priority_class=rng.choice([None, "low", "mid", "high"]),
                preemptions=rng.choice([0, 0, 0, 2]),
                last_preempted_at=-1.0,
            )
        )
    if members:
        teams = [replace(t, max_running_gpus_per_member=rng.choice([None, 1, 2, 4, 6, 8, 16])) for t in teams]
        jobs = [replace(j, submitter=rng.choice((None, *MEMBERS, "ann"))) for j in jobs]
    if costs:
        policy, jobs = _with_costs(random.Random(rng.random()), policy, jobs)
    history: dict[str, float] = {}
    if policy.fair_share_half_life_s > 0:
        # Drawn last, so that a cluster without history is the one it always was.
        history = {t.name: rng.choice([0.0, 0.0, 1.0, 2.5, rng.uniform(0, 30)]) for t in teams}
    return Snapshot(types, tuple(nodes), tuple(teams), policy, tuple(jobs), borrowed_history=history)


def _with_costs(
    rng: random.Random, policy: ClusterPolicy, jobs: list[Job]
) -> tuple[ClusterPolicy, list[Job]]:
    """Minimum runtimes that protect some of the running jobs (started 0 to 500 s ago), some
    classes with their own, and checkpoints on some jobs (docs/preemption.md 1 to 3)."""
    classes = tuple(
        dataclasses.replace(pc, min_runtime_s=rng.choice([None, None, 0.0, 100.0, 400.0]))
        for pc in policy.priority_classes
    )
    policy = dataclasses.replace(
        policy, min_runtime_s=rng.choice([0.0, 60.0, 200.0, 450.0]), priority_classes=classes
    )
    jobs = [
        dataclasses.replace(job, checkpoint_interval_s=rng.choice([None, None, 0.0, 30.0, 120.0]))
        for job in jobs
    ]
    return policy, jobs


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
    share_unallocated=st.booleans(),
    history_percent=st.sampled_from([0, 0, 30, 70, 100]),
)
def test_shortcuts_and_batches_never_change_the_plan(
    seed: int,
    idle: IdleAllocation,
    ranking: TaskRanking,
    queueing: Queueing,
    share_unallocated: bool,
    history_percent: int,
) -> None:
    policy = ClusterPolicy(
        idle,
        ranking,
        share_unallocated,
        queueing,
        CLASSES,
        fair_share_half_life_s=3600.0 if history_percent else 0.0,
        fair_share_history_percent=history_percent,
    )
    snapshot = busy_cluster(random.Random(seed), policy)
    assert allocate(snapshot, 0.0) == reference.allocate(snapshot, 0.0)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
    share_unallocated=st.booleans(),
)
def test_limits_per_member_never_change_the_plan_of_the_reference(
    seed: int, idle: IdleAllocation, ranking: TaskRanking, queueing: Queueing, share_unallocated: bool
) -> None:
    """Teams limiting the GPUs each member runs decide their jobs one by one (twins of two
    members do not share a decision, memory.py's checklist): the plan is still the
    reference's, reasons included."""
    policy = ClusterPolicy(idle, ranking, share_unallocated, queueing, CLASSES)
    snapshot = busy_cluster(random.Random(seed), policy, members=True)
    assert allocate(snapshot, 0.0) == reference.allocate(snapshot, 0.0)


def test_busy_clusters_with_members_exercise_the_limit() -> None:
    """The generator with members makes jobs wait at the limit per member, and others of the
    same teams start beside them."""
    capped = started = 0
    for seed in range(20):
        snapshot = busy_cluster(random.Random(seed), ClusterPolicy(priority_classes=CLASSES), members=True)
        plan = allocate(snapshot, 0.0)
        limited = {t.name for t in snapshot.teams if t.max_running_gpus_per_member is not None}
        capped += sum(r.code == "member-limit" for r in plan.pending.values())
        started += sum(
            1 for s in plan.starts if s.job_id.startswith("p") and _team_of(snapshot, s.job_id) in limited
        )
    assert capped > 20
    assert started > 20


def _team_of(snapshot: Snapshot, job_id: str) -> str:
    return next(j.team for j in snapshot.jobs if j.id == job_id)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
)
def test_shortcuts_never_change_the_plan_under_minimum_runtimes_and_checkpoints(
    seed: int, idle: IdleAllocation, ranking: TaskRanking, queueing: Queueing
) -> None:
    """docs/preemption.md 1 to 4: protected jobs are no candidates, checkpoints order the
    victims, and a failure's reason may be ``min-runtime``; the memory of failures must give
    the reference's plan all the same."""
    policy = ClusterPolicy(idle, ranking, True, queueing, CLASSES)
    snapshot = busy_cluster(random.Random(seed), policy, costs=True)
    assert allocate(snapshot, 0.0) == reference.allocate(snapshot, 0.0)


def _applied(snapshot: Snapshot, plan: Plan, now: float, serial: int) -> Snapshot:
    """The snapshot after ``plan`` is applied at ``now`` (preemptions, then starts)."""
    jobs = {j.id: j for j in snapshot.jobs}
    for p in plan.preemptions:
        job = jobs[p.job_id]
        jobs[p.job_id] = dataclasses.replace(
            job, nodes=(), started_at=None, preemptions=job.preemptions + 1, last_preempted_at=now
        )
    for n, s in enumerate(plan.starts):
        jobs[s.job_id] = dataclasses.replace(
            jobs[s.job_id], nodes=s.nodes, started_at=now, start_seq=serial * 1000 + n
        )
    return dataclasses.replace(snapshot, jobs=tuple(jobs.values()))


@pytest.mark.parametrize("seed", range(30))
def test_a_session_follows_minimum_runtimes_ending_over_time(seed: int) -> None:
    """A ``Session`` kept over instants gives ``allocate``'s plan when protections end and
    checkpoints move the victim order between its cycles (it builds again at a new instant)."""
    rng = random.Random(seed)
    idle = rng.choice(list(IdleAllocation))
    snapshot = busy_cluster(rng, ClusterPolicy(idle, priority_classes=CLASSES), costs=True)
    session = Session()
    for serial, now in enumerate((0.0, 0.0, 50.0, 50.0, 130.0, 300.0, 300.0, 460.0), start=1):
        plan = session(snapshot, now)
        assert plan == allocate(snapshot, now) == reference.allocate(snapshot, now)
        # docs/preemption.md 6: no job is preempted before its minimum runtime.
        jobs = {j.id: j for j in snapshot.jobs}
        for p in plan.preemptions:
            victim = jobs[p.job_id]
            assert victim.started_at is not None
            assert now - victim.started_at >= min_runtime_of(snapshot.policy, victim), p
        snapshot = _applied(snapshot, plan, now, serial)


def test_busy_clusters_meet_minimum_runtimes() -> None:
    """The generator with costs protects jobs that searches would take: some pending reasons
    are ``min-runtime``."""
    codes = 0
    for seed in range(30):
        for idle in IdleAllocation:
            snapshot = busy_cluster(random.Random(seed), ClusterPolicy(idle, priority_classes=CLASSES), True)
            plan = allocate(snapshot, 0.0)
            codes += sum(1 for r in plan.pending.values() if r.code == PendingCode.MIN_RUNTIME)
    assert codes > 10


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
)
def test_limits_per_member_with_minimum_runtimes_and_checkpoints_keep_the_reference_plan(
    seed: int, idle: IdleAllocation, ranking: TaskRanking, queueing: Queueing
) -> None:
    """Both at once: jobs decided one by one at the limit per member, while protected jobs are
    no candidates and checkpoints order the victims; the plan is still the reference's."""
    policy = ClusterPolicy(idle, ranking, True, queueing, CLASSES)
    snapshot = busy_cluster(random.Random(seed), policy, costs=True, members=True)
    assert allocate(snapshot, 0.0) == reference.allocate(snapshot, 0.0)


def test_busy_clusters_exercise_preemption() -> None:
    """The generator is busy enough for the comparison above to mean something."""
    preempted = 0
    for seed in range(20):
        for idle in IdleAllocation:
            plan = allocate(
                busy_cluster(random.Random(seed), ClusterPolicy(idle, priority_classes=CLASSES)), 0.0
            )
            preempted += len(plan.preemptions)
    assert preempted > 20


def fair_share_plan(seed: int, share_unallocated: bool) -> Plan:
    """The plan of a busy fair-share cluster (first-come-first-serve ranking), after checking
    that the reference cycle gives the same."""
    policy = ClusterPolicy(
        IdleAllocation.FAIR_SHARE,
        TaskRanking.FIRST_COME_FIRST_SERVE,
        share_unallocated,
        Queueing.BEST_EFFORT_FIFO,
        CLASSES,
    )
    snapshot = busy_cluster(random.Random(seed), policy)
    plan = allocate(snapshot, 0.0)
    assert plan == reference.allocate(snapshot, 0.0)
    return plan


def victims_of(plan: Plan, preemptor: str) -> set[str]:
    return {p.job_id for p in plan.preemptions if p.preemptor == preemptor}


@pytest.mark.parametrize(
    ("seed", "share_unallocated", "preemptor", "victims"),
    [
        (109254, True, "p35", {"r2", "r23", "r24"}),
        (543, True, "p45", {"r12"}),
        (234475, False, "p140", {"r18"}),
    ],
)
def test_a_failed_fair_share_search_is_tried_again_once_its_teams_share_moves(
    seed: int, share_unallocated: bool, preemptor: str, victims: set[str]
) -> None:
    """Found by long runs of the comparison above: a fair-share search of a team failed; the
    team then started a job, borrowing more (on that instance type or the other) or using
    more of its quota on that type, which raised its share once the job runs; the next search
    of the same shape finds victims (a higher share makes rule A reject a victim the greedy
    search took before, and the search goes another way). The memory of failed searches once
    kept the first answer and left the job waiting (so it does on these clusters when the
    memory leaves out the team's borrowed GPUs and usage)."""
    assert victims_of(fair_share_plan(seed, share_unallocated), preemptor) == victims


@pytest.mark.parametrize(
    ("seed", "share_unallocated", "preemptor", "victims"),
    [(1033, True, "p26", {"r3"}), (264, True, "p15", {"r3"})],
)
def test_a_search_that_found_no_share_as_high_is_tried_again_once_another_share_rises(
    seed: int, share_unallocated: bool, preemptor: str, victims: set[str]
) -> None:
    """A fair-share search that ended for want of another team with a share as high as the
    preemptor's is remembered across preemptions (they only lower shares), but not across a
    share rising where its team borrows (``CycleState.rise_epoch``): here another team starts a
    job that borrows, its share rises above the preemptor's, and the next job of the failed
    shape takes that team's job. Found by keeping that memory across every change (these
    clusters then leave the job waiting)."""
    plan = fair_share_plan(seed, share_unallocated)
    assert victims_of(plan, preemptor) == victims
    assert preemptor in {s.job_id for s in plan.starts}


def test_a_failed_search_is_tried_again_once_a_team_borrowing_there_loses_a_job_elsewhere() -> None:
    """Under fair share a preemption on one instance type lowers the victim's team's share,
    which other teams' searches on another type read where that team borrows: their failures
    there are forgotten (and only there). Found by forgetting them on the victim's type only:
    this cluster then leaves p194 waiting, where the cycle without shortcuts takes r0, r6, r10,
    r16 and r18."""
    assert victims_of(fair_share_plan(1718, False), "p194") == {"r0", "r6", "r10", "r16", "r18"}


def test_a_capped_teams_waiting_twins_are_decided_as_runs_each_held_to_the_limit() -> None:
    """A limit per member is tested before anything else, so a capped team's twins still share
    their shape's failure (memory.py's checklist): the cycle consumes them as runs, not one by
    one, giving each member's jobs at the limit ``member-limit`` instead; the reference agrees."""
    teams = (Team("a", {"big": Quota(quota=8, borrow_limit_percent=0)}, max_running_gpus_per_member=4),)
    jobs = [
        Job("r0", "a", "big", 4, -10.0, seq=0, nodes=(("n0", 4),), started_at=-10.0, submitter="ann"),
        Job("r1", "a", "big", 4, -10.0, seq=1, nodes=(("n0", 4),), started_at=-10.0, submitter="bob"),
    ]
    jobs += [
        Job(f"p{k}", "a", "big", 1, float(k), seq=10 + k, submitter=("ann", "cy")[k % 2]) for k in range(60)
    ]
    snapshot = Snapshot(
        (InstanceType("big", 8),), (Node("n0", "big", 8),), teams, ClusterPolicy(), tuple(jobs)
    )
    plan = allocate(snapshot, 0.0)
    assert plan == reference.allocate(snapshot, 0.0)
    runs, singles, _ = plan.pending.parts()
    assert len(singles) <= 2 and sum(len(ids) for ids, _ in runs) >= 58
    codes = {plan.pending[f"p{k}"].code.value for k in range(60)}
    assert codes == {"member-limit", "waiting-for-quota"}


# docs/resources.md: instance types with vCPU, memory and partitions beside a GPU-only one.
RES_TYPES = (
    InstanceType("fat", 8, vcpus_per_node=96, memory_gib_per_node=1024, partitions_per_node=(("mig-1g", 7),)),
    InstanceType("thin", 4, vcpus_per_node=32, memory_gib_per_node=256),
    InstanceType("plain", 4),
)


def _res_quota(rng: random.Random, it: InstanceType, share: int) -> Quota:
    """A quota in one of docs/resources.md 2's three forms, with its borrow limits."""
    form = rng.choice(["gpus", "gpus", "resources", "instances"]) if it.vcpus_per_node else "gpus"
    common = {
        "lend_limit": rng.choice([None, None, 0, 2]),
        "borrow_limit_percent": rng.choice([0, 50, 100, 300]),
        "borrow_unlimited": rng.random() < 0.2,
    }
    if form == "instances":
        n = rng.randint(0, 2)
        return Quota(quota=n * it.gpus_per_node, instances=n, **common)  # type: ignore[arg-type]
    if form == "resources":
        given = {"memory_gib": rng.randrange(0, it.memory_gib_per_node * 2, 32)}
        if rng.random() < 0.5:
            given["vcpus"] = rng.randrange(0, it.vcpus_per_node * 2, 4)
        if it.partitions_per_node:
            given["mig-1g"] = rng.randint(0, 8)
        limits = (("memory_gib", rng.choice([0, 128, 512])),) if rng.random() < 0.3 else ()
        return Quota(quota=share, resources=tuple(sorted(given.items())), borrow_limits=limits, **common)  # type: ignore[arg-type]
    return Quota(quota=share, **common)  # type: ignore[arg-type]


def _res_ask(rng: random.Random, it: InstanceType, gpus: int) -> dict[str, object]:
    """What a job asks beside its GPUs: often nothing (its node share), else its own amounts."""
    ask: dict[str, object] = {}
    if not it.vcpus_per_node:
        return ask
    if rng.random() < 0.4:
        ask["memory_gib"] = rng.randrange(0, it.memory_gib_per_node + 1, 64) * max(
            1, gpus // it.gpus_per_node
        )
    if rng.random() < 0.3:
        ask["vcpus"] = rng.randrange(0, it.vcpus_per_node + 1, 8)
    return ask


def resource_cluster(rng: random.Random, policy: ClusterPolicy) -> Snapshot:
    """``busy_cluster`` with the instance types of ``RES_TYPES``: quotas of the three forms,
    jobs asking their node share or their own vCPU and memory, partition jobs of 0 GPUs, and
    running jobs placed so that no node's resource is over-used."""
    types = RES_TYPES
    nodes = [
        Node(f"{it.name}-{k:02d}", it.name, it.gpus_per_node, rng.random() > 0.05)
        for it in types
        for k in range(rng.randint(2, 6))
    ]
    n_teams = rng.randint(2, 5)
    teams = []
    for k in range(n_teams):
        quotas = {}
        for it in types:
            capacity = it.gpus_per_node * sum(1 for n in nodes if n.instance_type == it.name)
            quotas[it.name] = _res_quota(rng, it, int(capacity * rng.uniform(0.4, 1.1) / n_teams))
        teams.append(
            Team(
                name=f"t{k}",
                quotas=quotas,
                fair_share_weight=rng.choice([0, 1, 1, 2]),
                reclaim=rng.choice([Reclaim.ANY, Reclaim.ANY, Reclaim.LOWER_PRIORITY, Reclaim.NEVER]),
                preempt_team_tasks=rng.choice(list(PreemptTeamTasks)),
                sharing=rng.choice(
                    [Sharing.LEND_AND_BORROW, Sharing.LEND_AND_BORROW, Sharing.LEND, Sharing.DONT_LEND]
                ),
            )
        )
    by_name = {it.name: it for it in types}
    free = {n.name: list(_node_res(by_name[n.instance_type])) for n in nodes if n.ready}
    jobs: list[Job] = []
    for k in range(rng.randint(5, 60)):
        it = rng.choice(types)
        job = _res_job(rng, it, f"r{k}", k)
        need = _asked(it, job)
        fitting = [
            n.name
            for n in nodes
            if n.name in free
            and n.instance_type == it.name
            and all(f >= a for f, a in zip(free[n.name], need, strict=True))
        ]
        if not fitting or job.gpus > it.gpus_per_node:
            continue
        name = min(fitting, key=lambda m: (free[m], m))
        free[name] = [f - a for f, a in zip(free[name], need, strict=True)]
        jobs.append(
            replace(
                job,
                submit_time=-1000.0,
                nodes=((name, job.gpus),),
                started_at=float(-rng.randrange(500)),
                preemptions=rng.choice([0, 0, 1]),
                last_preempted_at=-0.5,
            )
        )
    for k in range(rng.randint(10, 120)):
        it = rng.choice(types)
        job = _res_job(rng, it, f"p{k}", 1000 + k, big=True)
        jobs.append(
            replace(
                job, team=rng.choice(teams).name, preemptions=rng.choice([0, 0, 0, 2]), last_preempted_at=-1.0
            )
        )
    jobs = [replace(j, team=rng.choice(teams).name) if j.team == "" else j for j in jobs]
    return Snapshot(types, tuple(nodes), tuple(teams), policy, tuple(jobs))


def _node_res(it: InstanceType) -> tuple[int, ...]:
    return (
        it.gpus_per_node,
        it.vcpus_per_node,
        it.memory_gib_per_node,
        *(c for _, c in it.partitions_per_node),
    )


def _asked(it: InstanceType, job: Job) -> tuple[int, ...]:
    from allocations.engine.resources import job_resources

    asked = job_resources(it, job)
    return (
        job.gpus,
        asked.get("vcpus", 0),
        asked.get("memory_gib", 0),
        *(asked[p] for p, _ in it.partitions_per_node),
    )


def _res_job(rng: random.Random, it: InstanceType, job_id: str, seq: int, big: bool = False) -> Job:
    sizes = [1, 1, 2, 4, it.gpus_per_node] + ([2 * it.gpus_per_node] if big else [])
    gpus = rng.choice(sizes)
    partitions: tuple[tuple[str, int], ...] = ()
    if it.partitions_per_node and rng.random() < 0.3:
        partitions = (("mig-1g", rng.randint(1, 4)),)
        gpus = rng.choice([0, 0, 1])
    return Job(
        id=job_id,
        team="",
        instance_type=it.name,
        gpus=gpus,
        submit_time=float(rng.randrange(-50, 0)),
        seq=seq,
        priority_class=rng.choice([None, "low", "mid", "high"]),
        partitions=partitions,
        **_res_ask(rng, it, gpus),  # type: ignore[arg-type]
    )


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
    share_unallocated=st.booleans(),
)
def test_resources_never_change_the_plan_of_the_reference(
    seed: int, idle: IdleAllocation, ranking: TaskRanking, queueing: Queueing, share_unallocated: bool
) -> None:
    """docs/resources.md 4: on instance types that count vCPU, memory and partitions, the
    batched cycle (twins split by what they ask) gives the reference's plan, reasons included."""
    policy = ClusterPolicy(idle, ranking, share_unallocated, queueing, CLASSES)
    snapshot = resource_cluster(random.Random(seed), policy)
    assert allocate(snapshot, 0.0) == reference.allocate(snapshot, 0.0)


def _node_use_within(snapshot: Snapshot) -> None:
    """docs/resources.md 4, checked plainly: no node's GPUs, vCPU, memory or partitions are
    used beyond what it has, each job of whole nodes counting its even share on each."""
    by_name = {it.name: it for it in snapshot.instance_types}
    use: dict[str, list[int]] = {}
    for job in snapshot.jobs:
        if not job.nodes:
            continue
        it = by_name[job.instance_type]
        asked = _asked(it, job)
        n = len(job.nodes)
        for i, (name, gpus) in enumerate(job.nodes):
            share = [gpus] + [a // n + (1 if i < a % n else 0) for a in asked[1:]]
            row = use.setdefault(name, [0] * len(asked))
            use[name] = [u + s for u, s in zip(row, share, strict=True)]
    for node in snapshot.nodes:
        if node.name in use:
            assert all(
                u <= c for u, c in zip(use[node.name], _node_res(by_name[node.instance_type]), strict=True)
            )


@pytest.mark.parametrize("seed", range(40))
def test_a_session_on_resources_gives_the_plans_of_allocate(seed: int) -> None:
    """A ``Session`` kept over cycles on instance types that count other resources gives
    ``allocate``'s and the reference's plans, and no plan over-uses a node's resource."""
    rng = random.Random(seed)
    snapshot = resource_cluster(
        rng, ClusterPolicy(rng.choice(list(IdleAllocation)), priority_classes=CLASSES)
    )
    _node_use_within(snapshot)
    session = Session()
    for serial, now in enumerate((0.0, 0.0, 0.0, 10.0, 10.0, 30.0), start=1):
        plan = session(snapshot, now)
        assert plan == allocate(snapshot, now) == reference.allocate(snapshot, now)
        snapshot = _applied(snapshot, plan, now, serial)
        _node_use_within(snapshot)
