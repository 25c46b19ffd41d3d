"""How long one allocation cycle takes, beside a floor measured in the same run.

    .venv/bin/python benchmarks/engine_cycle.py [--quick] [--repeat N] [--storm] [--stepped] [--history]
                                                [--resources]

For each case (pending jobs, running jobs, teams, nodes) and both ``idle_allocation`` modes it
builds a busy cluster (quotas summing to 90% of the capacity, the running jobs filling it, some
teams borrowing, three priority classes, a mix of reclaim settings) and times ``allocate`` once
(best of ``--repeat``, each timing of the cycle followed by one of the floor, so that both
see the machine in the same state: its speed drifts by tens of percent within seconds). The floor is the cheapest thing any cycle must do: sorting the pending
jobs by their queue order key (POLICY.md 3.1). Peak memory is what ``tracemalloc`` sees allocated
during one more, separate, cycle. ``--history`` adds, after each fair-share case, the same
cluster with fairness over time on (docs/fairness.md: every team with a borrowing lately): the
history is one figure per team, so its cost cannot grow with the length of the history.
``--resources`` adds, after each case, the same cluster with nodes of 192 vCPU, 2,048 GiB and two
partition profiles (docs/resources.md): the jobs ask their node share of vCPU and memory, and
one pending job in ten asks partitions instead of GPUs; the row above it is its GPU-only twin.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allocations.engine import BUILD as ENGINE_BUILD
from allocations.engine import (
    ClusterPolicy,
    IdleAllocation,
    InstanceType,
    Job,
    Node,
    PriorityClass,
    Quota,
    Reclaim,
    Snapshot,
    Team,
    allocate,
)

GPUS_PER_NODE = 8
CLASSES = (PriorityClass("batch", 10), PriorityClass("training", 50), PriorityClass("inference", 100))
TYPES = ("ml.p5.48xlarge", "ml.p4d.24xlarge")


def settled(
    pending: int,
    running: int,
    teams: int,
    nodes: int,
    mode: IdleAllocation,
    seed: int = 7,
    stepped: bool = False,
) -> Snapshot:
    """A busy cluster at rest, the cycle the Celery loop runs all day.

    About 1.3 x ``running`` jobs are offered to an empty cluster and cycles run (at time -1)
    until nothing changes, so the running jobs respect quotas, lending and limits and the jobs
    left over wait for a reason. The backlog is those left over plus later twins of them (same
    team and shape) up to ``pending`` jobs; then 1% of the running jobs finish, so the timed
    cycle at time 0 has a little to do."""
    base = build(0, 0, teams, nodes, mode, seed)
    rng = random.Random(seed + 1)
    team_names = [t.name for t in base.teams]
    offered = int(running * 1.3)
    jobs = tuple(
        _pending_job(rng, f"r{k:06d}", team_names, -3600.0, k, sizes=(1, 1, 2, 2, 4)) for k in range(offered)
    )
    snapshot = dataclasses.replace(base, jobs=jobs)
    # At one instant (the default), the back-offs of the jobs preempted on the way all end at
    # the timed cycle's time 0, which then has that much more to do; ``stepped``: one cycle a
    # second from -64 s, so that those back-offs end on the way. At one instant the cycles run
    # until one changes nothing, within the simulator's cap (a preemptor that would take a job
    # started in its own cycle waits for the next one, so a burst this size takes tens of them).
    times = [-64.0 + k for k in range(64)] if stepped else [-1.0] * 1000
    for now in times:
        plan = allocate(snapshot, now)
        by_id = {j.id: j for j in snapshot.jobs}
        for p in plan.preemptions:
            job = by_id[p.job_id]
            by_id[p.job_id] = dataclasses.replace(
                job, nodes=(), started_at=None, preemptions=job.preemptions + 1, last_preempted_at=now
            )
        for st in plan.starts:
            by_id[st.job_id] = dataclasses.replace(by_id[st.job_id], nodes=st.nodes, started_at=now)
        snapshot = dataclasses.replace(snapshot, jobs=tuple(by_id.values()))
        if not stepped and not plan.starts and not plan.preemptions:
            break
    on_nodes = [j for j in snapshot.jobs if j.nodes]
    waiting = [j for j in snapshot.jobs if not j.nodes]
    still = [j for j in on_nodes if rng.random() >= 0.01]
    backlog = list(waiting)
    k = 0
    while len(backlog) < pending and waiting:
        twin = waiting[k % len(waiting)]
        backlog.append(
            dataclasses.replace(
                twin,
                id=f"p{k:06d}",
                submit_time=-600.0 + k * 1e-3,
                seq=offered + k,
                preemptions=0,
                last_preempted_at=None,
            )
        )
        k += 1
    return dataclasses.replace(snapshot, jobs=tuple(still + backlog[:pending]))


def _pending_job(
    rng: random.Random,
    job_id: str,
    teams: list[str],
    since: float,
    seq: int,
    sizes: tuple[int, ...] = (1, 1, 2, 4, 8, 16),
) -> Job:
    return Job(
        id=job_id,
        team=rng.choice(teams),
        instance_type=rng.choice(TYPES),
        gpus=rng.choice(sizes),
        submit_time=since + rng.randrange(600),
        seq=seq,
        priority_class=rng.choice([None, "batch", "training", "inference"]),
    )


def build(
    pending: int, running: int, teams: int, nodes: int, mode: IdleAllocation, seed: int = 7
) -> Snapshot:
    """A reclaim storm: the running jobs belong to random teams, whatever their quotas, so half
    the teams borrow far beyond what the policy would allow and the new jobs reclaim."""
    rng = random.Random(seed)
    node_list = [
        Node(f"n{k:05d}", TYPES[k % 2], GPUS_PER_NODE, ready=rng.random() > 0.01) for k in range(nodes)
    ]
    capacity = {it: sum(n.gpus for n in node_list if n.instance_type == it) for it in TYPES}
    team_list = []
    for k in range(teams):
        quotas = {
            it: Quota(
                quota=int(capacity[it] * 0.9 / teams),
                borrow_limit_percent=rng.choice([50, 100, 200]),
                borrow_unlimited=rng.random() < 0.1,
            )
            for it in TYPES
        }
        team_list.append(
            Team(
                name=f"team-{k:04d}",
                quotas=quotas,
                fair_share_weight=rng.choice([1, 1, 2, 5]),
                reclaim=rng.choice([Reclaim.ANY, Reclaim.ANY, Reclaim.LOWER_PRIORITY]),
            )
        )
    free = {n.name: n.gpus for n in node_list if n.ready}
    by_type = {it: [n.name for n in node_list if n.instance_type == it and n.ready] for it in TYPES}
    cursor = dict.fromkeys(TYPES, 0)
    jobs: list[Job] = []
    # Running jobs, first fit in node order until the cluster is nearly full.
    for k in range(running):
        it = TYPES[k % 2]
        names = by_type[it]
        gpus = rng.choice([1, 1, 2, 2, 4])
        while cursor[it] < len(names) and free[names[cursor[it]]] < gpus:
            cursor[it] += 1
        if cursor[it] >= len(names):
            continue
        name = names[cursor[it]]
        free[name] -= gpus
        jobs.append(
            Job(
                id=f"r{k:06d}",
                team=rng.choice(team_list).name,
                instance_type=it,
                gpus=gpus,
                submit_time=-3600.0 - k,
                seq=k,
                priority_class=rng.choice([None, "batch", "training", "inference"]),
                nodes=((name, gpus),),
                started_at=-3000.0 + rng.randrange(1000),
            )
        )
    for k in range(pending):
        gpus = rng.choice([1, 1, 2, 4, 8, 16])
        jobs.append(
            Job(
                id=f"p{k:06d}",
                team=rng.choice(team_list).name,
                instance_type=rng.choice(TYPES),
                gpus=gpus,
                submit_time=float(rng.randrange(-600, 0)),
                seq=running + k,
                priority_class=rng.choice([None, "batch", "training", "inference"]),
            )
        )
    policy = ClusterPolicy(idle_allocation=mode, priority_classes=CLASSES)
    return Snapshot(tuple(TYPES_OBJ), tuple(node_list), tuple(team_list), policy, tuple(jobs))


TYPES_OBJ = tuple(InstanceType(name, GPUS_PER_NODE) for name in TYPES)


def best_of(repeat: int, *fns: Callable[[], object]) -> list[float]:
    """The best time of each function over ``repeat`` rounds, the functions taking turns."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def floor(snapshot: Snapshot) -> None:
    """Sort the pending jobs by their queue order key: the least a cycle must do."""
    weights = {pc.name: pc.weight for pc in snapshot.policy.priority_classes}
    sorted(
        (j for j in snapshot.jobs if not j.nodes),
        key=lambda j: (-weights.get(j.priority_class or "", 0), j.submit_time, j.seq, j.id),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="only the small cases")
    parser.add_argument("--repeat", type=int, default=5, help="best of N timings (default 5)")
    parser.add_argument("--storm", action="store_true", help="also the reclaim-storm cases")
    parser.add_argument(
        "--stepped",
        action="store_true",
        help="also the 100k-job case settled one cycle a second (back-offs end before the timed cycle)",
    )
    parser.add_argument(
        "--resources",
        action="store_true",
        help="also each case with vCPU, memory and two partition profiles (docs/resources.md)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="also each fair-share case with fairness over time on (a half-life of a day, 50%%)",
    )
    args = parser.parse_args()
    grid = [
        ("settled", 1_000, 1_000, 20, 200),
        ("settled", 10_000, 1_000, 20, 200),
        ("settled", 10_000, 10_000, 200, 2_000),
    ]
    if not args.quick:
        grid += [
            ("settled", 100_000, 10_000, 200, 2_000),
            ("settled", 100_000, 10_000, 1_000, 2_000),
        ]
    if args.storm:
        grid += [("storm", 1_000, 1_000, 20, 200), ("storm", 10_000, 1_000, 20, 200)]
    if args.stepped:
        grid += [("stepped", 100_000, 10_000, 200, 2_000)]
    header = f"{'cluster':<8} {'pending':>8} {'running':>8} {'teams':>6} {'nodes':>6} {'mode':<32} {'cycle s':>8} {'floor s':>8} {'ratio':>6} {'starts':>7} {'preempt':>7} {'peak MB':>8}"
    print(f"engine build: {ENGINE_BUILD} (GPUGOV_ENGINE=interpreted or compiled chooses)")
    print(header)
    print("-" * len(header))
    for kind, pending, running, teams, nodes in grid:
        for mode in IdleAllocation:
            if kind == "storm":
                snapshot = build(pending, running, teams, nodes, mode)
            else:
                snapshot = settled(pending, running, teams, nodes, mode, stepped=kind == "stepped")
            variants = [(mode.value, snapshot)]
            if args.history and mode == IdleAllocation.FAIR_SHARE:
                variants.append(("fair-share+history", with_history(snapshot)))
            if args.resources:
                variants.append((f"{mode.value}+resources", with_resources(snapshot)))
            for label, snap in variants:
                plan = allocate(snap, 0.0)
                cycle, base = best_of(args.repeat, lambda s=snap: allocate(s, 0.0), lambda s=snap: floor(s))
                tracemalloc.start()
                allocate(snap, 0.0)
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                n_running = sum(1 for j in snap.jobs if j.nodes)
                print(
                    f"{kind:<8} {pending:>8} {n_running:>8} {teams:>6} {nodes:>6} {label:<32} {cycle:>8.3f} {base:>8.3f} "
                    f"{cycle / base:>6.1f} {len(plan.starts):>7} {len(plan.preemptions):>7} {peak / 2**20:>8.1f}",
                    flush=True,
                )


PROFILES = (("mig-1g.10gb", 7), ("mig-3g.40gb", 2))


def with_resources(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with vCPU, memory and two partition profiles on every node, one pending
    job in ten asking partitions (and no GPU) instead of its GPUs."""
    rng = random.Random(13)
    types = tuple(
        dataclasses.replace(it, vcpus_per_node=192, memory_gib_per_node=2048, partitions_per_node=PROFILES)
        for it in snapshot.instance_types
    )
    jobs = tuple(
        dataclasses.replace(job, gpus=0, partitions=((rng.choice(PROFILES)[0], rng.choice((1, 1, 2))),))
        if not job.nodes and rng.random() < 0.1
        else job
        for job in snapshot.jobs
    )
    return dataclasses.replace(snapshot, instance_types=types, jobs=jobs)


def with_history(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with fairness over time on and every team some borrowing lately."""
    rng = random.Random(11)
    policy = dataclasses.replace(
        snapshot.policy, fair_share_half_life_s=86400.0, fair_share_history_percent=50
    )
    history = {team.name: rng.uniform(0, 40) for team in snapshot.teams}
    return dataclasses.replace(snapshot, policy=policy, borrowed_history=history)


if __name__ == "__main__":
    main()
