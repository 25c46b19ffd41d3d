"""Property tests: POLICY.md section 6 holds after every cycle of random clusters.

Random instance types (some nodes not ready), teams with random settings, random policies and
jobs; several instants, each run to rest by applying plans, with random finishes, submissions,
limit changes and drained nodes in between. After every cycle: invariants 1, 2, 3, 6 and 7, the
same snapshot (in any order) gives the same plan, its victims were running before it, and
``allocate`` never raises. At rest: invariant 5 (work conservation) and invariant 4 (the quota
guarantee) as stated below. Invariant 7 again on busy clusters, where jobs started at an instant
are often the candidates of later preemptors at that instant.

The fit test used here is a separate, naive reading of POLICY.md section 2, so the engine is not
checked against itself.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
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
    job_priority,
)
from allocations.engine.resources import job_resources, max_use_resources, quota_resources, type_resources

from .test_shortcuts import busy_cluster, resource_cluster

CLASSES = (PriorityClass("low", 10), PriorityClass("mid", 20), PriorityClass("high", 30))


# -- a naive reading of POLICY.md section 2 ------------------------------------------------
def limits(team: Team, it: str) -> tuple[int, int, int | None, bool]:
    """(quota, kept, max_use or None for unlimited, may_borrow)."""
    q = team.quotas.get(it, Quota())
    lendable = (
        0
        if team.sharing == Sharing.DONT_LEND
        else (q.quota if q.lend_limit is None else min(q.lend_limit, q.quota))
    )
    if team.sharing != Sharing.LEND_AND_BORROW:
        borrow: int | None = 0
    elif q.borrow_unlimited:
        borrow = None
    elif q.borrow_limit is not None:
        borrow = q.borrow_limit
    else:
        borrow = q.quota * q.borrow_limit_percent // 100
    may = team.sharing == Sharing.LEND_AND_BORROW and (borrow is None or borrow > 0)
    return q.quota, q.quota - lendable, None if borrow is None else q.quota + borrow, may


class Books:
    """Usage, pool and node occupancy of a snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.teams = {t.name: t for t in snap.teams}
        self.usage: dict[tuple[str, str], int] = defaultdict(int)
        self.running: dict[str, int] = defaultdict(int)
        self.node_used: dict[str, int] = defaultdict(int)
        for job in snap.jobs:
            if job.running:
                self.usage[job.team, job.instance_type] += job.gpus
                self.running[job.instance_type] += job.gpus
                for name, g in job.nodes:
                    self.node_used[name] += g

    def capacity(self, it: str) -> int:
        return sum(n.gpus for n in self.snap.nodes if n.instance_type == it and n.ready)

    def pool(self, it: str) -> tuple[int, int]:
        pool = 0
        used = 0
        quota_sum = 0
        for team in self.snap.teams:
            quota, kept, _, _ = limits(team, it)
            quota_sum += quota
            pool += quota - kept
            used += max(0, self.usage[team.name, it] - kept)
        if self.snap.policy.share_unallocated:
            pool += max(0, self.capacity(it) - quota_sum)
        return pool, used

    def fits(self, job: Job, without: Job | None = None) -> bool:
        it, g = job.instance_type, job.gpus
        usage = self.usage[job.team, it]
        pool, used = self.pool(it)
        running = self.running[it]
        node_used = dict(self.node_used)
        if without is not None and without.instance_type == it:
            running -= without.gpus
            team_w = self.teams[without.team]
            _, kept_w, _, _ = limits(team_w, it)
            u_w = self.usage[without.team, it]
            used -= max(0, u_w - kept_w) - max(0, u_w - without.gpus - kept_w)
            if without.team == job.team:
                usage -= without.gpus
            for name, gw in without.nodes:
                node_used[name] -= gw
        _, kept, max_use, _ = limits(self.teams[job.team], it)
        if max_use is not None and usage + g > max_use:
            return False
        above = max(0, usage + g - kept) - max(0, usage - kept)
        if above > pool - used:
            return False
        if running + g > self.capacity(it):
            return False
        nodes = [n for n in self.snap.nodes if n.instance_type == it and n.ready]
        per_node = next(t.gpus_per_node for t in self.snap.instance_types if t.name == it)
        if g <= per_node:
            return any(n.gpus - node_used.get(n.name, 0) >= g for n in nodes)
        return sum(n.gpus for n in nodes if node_used.get(n.name, 0) == 0) >= g


# -- random worlds -------------------------------------------------------------------------
@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, int]:
    n_types = draw(st.integers(1, 3))
    types = [InstanceType(f"it{k}", draw(st.sampled_from([1, 2, 4, 8]))) for k in range(n_types)]
    nodes = []
    for it in types:
        for k in range(draw(st.integers(1, 4))):
            nodes.append(
                Node(f"{it.name}-n{k}", it.name, it.gpus_per_node, draw(st.booleans()) or draw(st.booleans()))
            )
    teams = []
    for k in range(draw(st.integers(1, 4))):
        quotas = {}
        for it in types:
            quota = draw(st.integers(0, 2 * it.gpus_per_node))
            quotas[it.name] = Quota(
                quota=quota,
                lend_limit=draw(st.one_of(st.none(), st.integers(0, quota))),
                borrow_limit_percent=draw(st.sampled_from([0, 50, 100, 200])),
                borrow_limit=draw(st.one_of(st.none(), st.integers(0, 8))),
                borrow_unlimited=draw(st.booleans()),
            )
        reclaim = draw(st.sampled_from([Reclaim.ANY, Reclaim.ANY, Reclaim.LOWER_PRIORITY, Reclaim.NEVER]))
        pwb = None if reclaim == Reclaim.NEVER else draw(st.sampled_from([None, *PreemptWhileBorrowing]))
        teams.append(
            Team(
                name=f"team{k}",
                quotas=quotas,
                active=draw(st.integers(0, 9)) > 0,
                sharing=draw(st.sampled_from(list(Sharing))),
                fair_share_weight=draw(st.integers(0, 3)),
                preempt_team_tasks=draw(st.sampled_from(list(PreemptTeamTasks))),
                reclaim=reclaim,
                preempt_while_borrowing=pwb,
                preempt_while_borrowing_max_priority=draw(st.sampled_from([None, 10, 20])),
            )
        )
    policy = ClusterPolicy(
        idle_allocation=draw(st.sampled_from(list(IdleAllocation))),
        task_ranking=draw(st.sampled_from(list(TaskRanking))),
        share_unallocated=draw(st.booleans()),
        queueing=draw(st.sampled_from(list(Queueing))),
        priority_classes=CLASSES,
    )
    seed = draw(st.integers(0, 2**32 - 1))
    return Snapshot(tuple(types), tuple(nodes), tuple(teams), policy, ()), seed


def new_job(rng: random.Random, snap: Snapshot, seq: int, now: float) -> Job:
    it = rng.choice(snap.instance_types)
    sizes = [g for g in (1, 2, 4, 8) if g <= it.gpus_per_node] + [2 * it.gpus_per_node]
    return Job(
        id=f"j{seq}",
        team=rng.choice(snap.teams).name,
        instance_type=it.name,
        gpus=rng.choice(sizes),
        submit_time=now - rng.choice([0, 0, 1, 5]),
        seq=seq,
        priority_class=rng.choice([None, "low", "mid", "high", "gone"]),
    )


# -- the invariants ------------------------------------------------------------------------
def check_cycle(before: Snapshot, plan: Plan, after: Snapshot) -> None:
    """Invariants 1, 2, 3 and 6 on one applied cycle."""
    books = Books(after)
    started = {s.job_id for s in plan.starts}
    jobs = {j.id: j for j in after.jobs}
    node_of = {n.name: n for n in after.nodes}
    started_types = {jobs[j].instance_type for j in started}
    started_team_types = {(jobs[j].team, jobs[j].instance_type) for j in started}
    # 1. Nodes hold no more than their GPUs; a start lands on ready nodes of its type with its
    # GPUs; the running GPUs of a type that started something stay within its ready capacity.
    for name, used in books.node_used.items():
        assert used <= node_of[name].gpus, f"node {name} holds {used}"
    for s in plan.starts:
        job = jobs[s.job_id]
        assert sum(g for _, g in s.nodes) == job.gpus
        assert all(node_of[n].ready and node_of[n].instance_type == job.instance_type for n, _ in s.nodes)
    for it in started_types:
        assert books.running[it] <= books.capacity(it), f"{it}: {books.running[it]} > {books.capacity(it)}"
    # 2. A team that started something on a type is within its limits there afterwards.
    for team_name, it in started_team_types:
        quota, _, max_use, may = limits(books.teams[team_name], it)
        usage = books.usage[team_name, it]
        assert max_use is None or usage <= max_use, f"{team_name} {it}: {usage} > {max_use}"
        assert may or usage <= quota
    # 3. Nobody uses another team's kept capacity: a team that started something and now uses
    # the pool (runs more than its kept part) left the pool not overdrawn. (A pool overdrawn by
    # lowered limits does not stop a team from starting within its own kept part.)
    for team_name, it in started_team_types:
        _, kept, _, _ = limits(books.teams[team_name], it)
        if books.usage[team_name, it] > kept:
            pool, used = books.pool(it)
            assert used <= pool, f"{team_name} started on {it}: pool used {used} > pool {pool}"
    # 6. Under priority ranking, no job started ahead of a higher-priority job of its team that
    # fits (checked when the cycle preempted nobody and no team could hold capacity).
    if plan.preemptions or _may_hold(after) or after.policy.task_ranking != TaskRanking.PRIORITY:
        return
    for sid in started:
        s = jobs[sid]
        for p in after.jobs:
            if p.running or p.team != s.team or not _active(p, after):
                continue
            if job_priority(after.policy, p) > job_priority(after.policy, s):
                assert not books.fits(p, without=s), f"{s.id} started ahead of {p.id}"


def _active(job: Job, snap: Snapshot) -> bool:
    return next(t.active for t in snap.teams if t.name == job.team)


def _may_hold(snap: Snapshot) -> bool:
    """Whether a head could have held capacity (POLICY.md 3.3): a team whose reclaim is not
    ``any`` has pending jobs."""
    holders = {t.name for t in snap.teams if t.reclaim != Reclaim.ANY and t.active}
    return any(not j.running and j.team in holders for j in snap.jobs)


def check_at_rest(snap: Snapshot, plan: Plan, now: float) -> None:
    """Invariants 5 and 4 once a cycle changed nothing."""
    if _may_hold(snap):
        return
    books = Books(snap)
    exempt = {PendingCode.BLOCKED_BY_FIFO, PendingCode.TEAM_INACTIVE}
    for job in snap.jobs:
        if job.running:
            continue
        reason = plan.pending[job.id]
        # 5. Work conservation: nothing pending fits.
        if reason.code not in exempt:
            assert not books.fits(job), f"{job.id} fits but waits: {reason}"
        # 4. Guarantee: within its unused quota, with reclaim any, not in back-off, every node
        # ready and the quotas backed by capacity: only fragmentation may keep it waiting.
        team = books.teams[job.team]
        quota, _, _, _ = limits(team, job.instance_type)
        it_nodes = [n for n in snap.nodes if n.instance_type == job.instance_type]
        backed = sum(limits(t, job.instance_type)[0] for t in snap.teams) <= books.capacity(job.instance_type)
        in_back_off = job.preemptions > 0 and now < (job.last_preempted_at or 0) + 2 ** (job.preemptions - 1)
        if (
            reason.code not in exempt | {PendingCode.EXCEEDS_MAX}
            and team.reclaim == Reclaim.ANY
            and not in_back_off
            and books.usage[job.team, job.instance_type] + job.gpus <= quota
            and all(n.ready for n in it_nodes)
            and backed
        ):
            assert reason.code == PendingCode.FRAGMENTED, f"{job.id} within quota waits: {reason}"


def assert_no_ring(edges: list[tuple[str, str]]) -> None:
    """Invariant 7 over the preemptions at one instant, (preemptor, victim) each: no job is
    preempted by a job it then preempts, nor by one that a job it preempted then preempted
    (no cycle of any length). The back-off (POLICY.md 3.5) rules out every such cycle: a
    job preempted at T preempts nobody at T."""
    after: dict[str, set[str]] = defaultdict(set)
    for preemptor, victim in edges:
        after[preemptor].add(victim)
    done: set[str] = set()

    def visit(job: str, path: list[str]) -> None:
        if job in path:
            ring = [*path[path.index(job) :], job]
            raise AssertionError(f"preemption ring at one instant: {' -> '.join(ring)}")
        if job in done:
            return
        for victim in sorted(after.get(job, ())):
            visit(victim, [*path, job])
        done.add(job)

    for preemptor in sorted(after):
        visit(preemptor, [])


def assert_victims_were_running(snap: Snapshot, plan: Plan) -> None:
    """The plan's contract: its preemptions apply to jobs running before it, so no job both
    starts and is preempted in one plan (a preemptor whose victims would include a job started
    earlier in its cycle waits for the next cycle)."""
    running = {j.id for j in snap.jobs if j.running}
    for p in plan.preemptions:
        assert p.job_id in running, f"{p.job_id} is preempted by {p.preemptor} but was not running"


def apply(snap: Snapshot, plan: Plan, now: float, start_seq: list[int]) -> Snapshot:
    jobs = {j.id: j for j in snap.jobs}
    for p in plan.preemptions:
        j = jobs[p.job_id]
        jobs[p.job_id] = dataclasses.replace(
            j, nodes=(), started_at=None, preemptions=j.preemptions + 1, last_preempted_at=now
        )
    for s in plan.starts:
        start_seq[0] += 1
        jobs[s.job_id] = dataclasses.replace(
            jobs[s.job_id], nodes=s.nodes, started_at=now, start_seq=start_seq[0]
        )
    return dataclasses.replace(snap, jobs=tuple(jobs.values()))


def shuffled(snap: Snapshot, rng: random.Random) -> Snapshot:
    jobs, teams, nodes = list(snap.jobs), list(snap.teams), list(snap.nodes)
    rng.shuffle(jobs)
    rng.shuffle(teams)
    rng.shuffle(nodes)
    return dataclasses.replace(snap, jobs=tuple(jobs), teams=tuple(teams), nodes=tuple(nodes))


def between_instants(snap: Snapshot, rng: random.Random, seq: list[int], now: float) -> Snapshot:
    """Random finishes, submissions, lowered limits and drained nodes."""
    jobs = [j for j in snap.jobs if not (j.running and rng.random() < 0.3)]
    for _ in range(rng.randint(0, 6)):
        seq[0] += 1
        jobs.append(new_job(rng, snap, seq[0], now))
    teams = list(snap.teams)
    if teams and rng.random() < 0.3:
        k = rng.randrange(len(teams))
        quotas = {
            it: dataclasses.replace(q, quota=q.quota // 2, borrow_limit_percent=0)
            for it, q in teams[k].quotas.items()
        }
        teams[k] = dataclasses.replace(teams[k], quotas=quotas)
    nodes = list(snap.nodes)
    if rng.random() < 0.3:
        k = rng.randrange(len(nodes))
        nodes[k] = dataclasses.replace(nodes[k], ready=not nodes[k].ready)
    return dataclasses.replace(snap, jobs=tuple(jobs), teams=tuple(teams), nodes=tuple(nodes))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_section_6_invariants_hold_after_every_cycle(world: tuple[Snapshot, int]) -> None:
    snap, seed = world
    rng = random.Random(seed)
    seq = [0]
    start_seq = [0]
    snap = dataclasses.replace(
        snap, jobs=tuple(new_job(rng, snap, k, 0.0) for k in range(rng.randint(0, 14)))
    )
    seq[0] = len(snap.jobs)
    now = 0.0
    for _instant in range(4):
        edges: list[tuple[str, str]] = []
        for _cycle in range(60):
            plan = allocate(snap, now)
            assert allocate(snap, now) == plan, "the same snapshot must give the same plan"
            assert allocate(shuffled(snap, rng), now) == plan, (
                "the order of the snapshot's tuples must not matter"
            )
            pending_ids = {j.id for j in snap.jobs if not j.running}
            preempted = {p.job_id for p in plan.preemptions}
            assert set(plan.pending) == (pending_ids | preempted) - {s.job_id for s in plan.starts}
            assert_victims_were_running(snap, plan)
            # 7. No preemption cycle at one instant.
            edges += [(p.preemptor, p.job_id) for p in plan.preemptions]
            assert_no_ring(edges)
            after = apply(snap, plan, now, start_seq)
            check_cycle(snap, plan, after)
            snap = after
            if not plan.starts and not plan.preemptions:
                check_at_rest(snap, plan, now)
                break
        else:
            raise AssertionError(f"no rest at t={now}")
        now += rng.choice([1.0, 1.0, 0.5, 4.0])
        snap = between_instants(snap, rng, seq, now)


def settle_at(snap: Snapshot, now: float) -> tuple[list[tuple[str, str]], int]:
    """Cycles at ``now`` until one changes nothing, each plan checked as above; returns the
    preemptions (preemptor, victim) and how many of their victims started at ``now`` in an
    earlier cycle, the preemptions of jobs that were candidates of the cycle that started them."""
    start_seq = [0]
    edges: list[tuple[str, str]] = []
    started_now: set[str] = set()
    of_started = 0
    for _cycle in range(60):
        plan = allocate(snap, now)
        assert_victims_were_running(snap, plan)
        edges += [(p.preemptor, p.job_id) for p in plan.preemptions]
        assert_no_ring(edges)
        of_started += sum(1 for p in plan.preemptions if p.job_id in started_now)
        started_now.update(s.job_id for s in plan.starts)
        snap = apply(snap, plan, now, start_seq)
        if not plan.starts and not plan.preemptions:
            return edges, of_started
    raise AssertionError(f"no rest at t={now}")


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    idle=st.sampled_from(list(IdleAllocation)),
    ranking=st.sampled_from(list(TaskRanking)),
    queueing=st.sampled_from(list(Queueing)),
    share_unallocated=st.booleans(),
    history_percent=st.sampled_from([0, 0, 50, 100]),
)
def test_no_preemption_ring_where_jobs_started_at_the_instant_are_candidates(
    seed: int,
    idle: IdleAllocation,
    ranking: TaskRanking,
    queueing: Queueing,
    share_unallocated: bool,
    history_percent: int,
) -> None:
    """Invariant 7 on busy clusters run to rest at one instant: jobs started in a cycle are
    candidates of that cycle's later searches, and a preemptor that would take one waits for
    the next cycle, where it does (``preemption.find_victims``). No plan preempts a job it
    starts, and no ring forms however many cycles the instant takes, with fairness over time
    too (docs/fairness.md: the history is fixed for the instant)."""
    policy = ClusterPolicy(
        idle,
        ranking,
        share_unallocated,
        queueing,
        CLASSES,
        fair_share_half_life_s=3600.0 if history_percent else 0.0,
        fair_share_history_percent=history_percent,
    )
    settle_at(busy_cluster(random.Random(seed), policy), 0.0)


def test_busy_clusters_preempt_jobs_started_at_the_same_instant() -> None:
    """The clusters above exercise what they check: jobs started at t=0 preempted at t=0 by a
    preemptor that waited a cycle for them, under both idle allocations."""
    for idle in IdleAllocation:
        taken = 0
        for seed in range(30):
            policy = ClusterPolicy(idle, priority_classes=CLASSES)
            _, of_started = settle_at(busy_cluster(random.Random(seed), policy), 0.0)
            taken += of_started
        assert taken >= 10, (idle, taken)


# -- POLICY.md 6's invariants 1 to 3 per resource (docs/resources.md 4) -----------------------
def _res_books(snap: Snapshot) -> tuple[dict[tuple[str, str], dict[str, int]], dict[str, dict[str, int]]]:
    """Per (team, instance type) and per node, what running jobs use of each resource, read
    plainly from the jobs (docs/resources.md 3: whole-node jobs spread evenly)."""
    types = {it.name: it for it in snap.instance_types}
    usage: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    nodes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in snap.jobs:
        if not job.running:
            continue
        asked = job_resources(types[job.instance_type], job)
        for name, amount in asked.items():
            usage[job.team, job.instance_type][name] += amount
        n = len(job.nodes)
        for i, (node, gpus) in enumerate(job.nodes):
            for name, amount in asked.items():
                nodes[node][name] += gpus if name == "gpus" else amount // n + (1 if i < amount % n else 0)
    return usage, nodes


def check_resources(plan: Plan, after: Snapshot) -> None:
    """Invariants 1 to 3 of POLICY.md 6 for every resource: no node holds more of one than it
    has; a team that started a job asking a resource on a type is within its ``max_use`` of it
    there (its quota when it may not borrow); and where it uses more than its kept part of it,
    the pool of that resource is not overdrawn. (GPUs: POLICY.md's own tests above.)"""
    types = {it.name: it for it in after.instance_types}
    teams = {t.name: t for t in after.teams}
    usage, nodes = _res_books(after)
    for node in after.nodes:
        have = type_resources(types[node.instance_type])
        for name, used in nodes[node.name].items():
            assert used <= have[name], f"node {node.name}: {used} {name} of {have[name]}"
    jobs = {j.id: j for j in after.jobs}
    asked: dict[tuple[str, str], set[str]] = defaultdict(set)
    for start in plan.starts:
        job = jobs[start.job_id]
        wanted = job_resources(types[job.instance_type], job)
        asked[job.team, job.instance_type].update(n for n, a in wanted.items() if a and n != "gpus")
    for (team_name, it_name), names in asked.items():
        it, team = types[it_name], teams[team_name]
        q = team.quotas.get(it_name, Quota())
        quotas = quota_resources(it, q)
        maxes = max_use_resources(it, q)
        for name in names:
            used = usage[team_name, it_name][name]
            cap = maxes[name] if team.sharing == Sharing.LEND_AND_BORROW else quotas[name]
            assert cap is None or used <= cap, f"{team_name} {it_name}: {used} {name} > {cap}"
            # Every resource but GPUs lends its whole quota, none under dont-lend (section 2).
            kept = quotas[name] if team.sharing == Sharing.DONT_LEND else 0
            if used > kept:
                pool = 0
                pool_used = 0
                quota_sum = 0
                for other in after.teams:
                    oq = quota_resources(it, other.quotas.get(it_name, Quota()))[name]
                    quota_sum += oq
                    o_kept = oq if other.sharing == Sharing.DONT_LEND else 0
                    pool += oq - o_kept
                    pool_used += max(0, usage[other.name, it_name][name] - o_kept)
                if after.policy.share_unallocated:
                    ready = sum(1 for n in after.nodes if n.instance_type == it_name and n.ready)
                    pool += max(0, ready * type_resources(it)[name] - quota_sum)
                assert pool_used <= pool, (
                    f"{team_name} started on {it_name}: {name} pool {pool_used} > {pool}"
                )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), idle=st.sampled_from(list(IdleAllocation)))
def test_section_6_invariants_hold_per_resource(seed: int, idle: IdleAllocation) -> None:
    """docs/resources.md 4: POLICY.md 6's invariants 1 to 3 for vCPU, memory and partitions,
    after every cycle of random clusters run to rest, with random finishes in between."""
    rng = random.Random(seed)
    snap = resource_cluster(rng, ClusterPolicy(idle, priority_classes=CLASSES))
    for now in (0.0, 0.0, 0.0, 5.0, 5.0, 9.0):
        plan = allocate(snap, now)
        jobs = {j.id: j for j in snap.jobs}
        for p in plan.preemptions:
            jobs[p.job_id] = dataclasses.replace(jobs[p.job_id], nodes=(), started_at=None)
        for s in plan.starts:
            jobs[s.job_id] = dataclasses.replace(jobs[s.job_id], nodes=s.nodes, started_at=now)
        after = dataclasses.replace(snap, jobs=tuple(jobs.values()))
        check_resources(plan, after)
        # Some running jobs finish before the next cycle.
        snap = dataclasses.replace(
            after, jobs=tuple(j for j in after.jobs if not (j.running and rng.random() < 0.1))
        )
