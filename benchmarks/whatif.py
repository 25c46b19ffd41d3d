"""A what-if run at scale: a 30-day window with 100,000 jobs of 50 teams, replayed under the
live policy and one draft.

    .venv/bin/python benchmarks/whatif.py [--jobs 100000] [--teams 50] [--days 30] [--load 0.75] [--db PATH]

It builds a throw-away SQLite database (in a temporary directory unless ``--db`` is given),
writes the history (nodes, teams, quotas, finished jobs with real run times), then runs the
lab's own code: ``whatif.history.build`` (the window as a scenario), and for each policy the
scenario's parsing, the replay with the pending-reason recorder and the figures. Beside each
replay, as the baseline measured in the same run, the time spent inside the engine's
``allocate`` (the rest is the simulator's and the lab's own work). Wall times and the peak
resident memory are printed, never asserted; the target is the two replays in under a minute.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GPUS_PER_NODE = 8
NODES = 128  # 1,024 GPUs of one instance type
# The GPU-hours asked, as a share of the window's capacity (--load). 75%: a busy month that the
# live policy serves, with a backlog in its last two weeks, and whose lending limits leave GPUs
# idle while jobs wait: the window an administrator replays to try a draft that lends more.
# At 80% and above the live policy's preemptions throw away so much work that both policies'
# queues grow all month (docs/whatif.md, Performance): --load 0.85 is that stress case.
LOAD = 0.75


class EngineClock:
    """The engine's ``allocate``, timed: the baseline beside the lab's own wall time."""

    def __init__(self, allocate: Any) -> None:
        self.allocate = allocate
        self.seconds = 0.0

    def __call__(self, snapshot: Any, now: float) -> Any:
        t0 = time.perf_counter()
        try:
            return self.allocate(snapshot, now)
        finally:
            self.seconds += time.perf_counter() - t0


class Ticker:
    """Prints how far a replay got, at most every 30 s: a long run says its pace as it goes."""

    def __init__(self, name: str, engine: EngineClock) -> None:
        self.name, self.engine = name, engine
        self.started = self.last = time.perf_counter()

    def __call__(self, now: float, end: float | None, done: int, total: int) -> None:
        if time.perf_counter() - self.last < 30:
            return
        self.last = time.perf_counter()
        print(
            f"  {self.name}: {100 * now / (end or 1):5.1f}% of the window, {done:,}/{total:,} jobs done after "
            f"{self.last - self.started:6.0f} s ({self.engine.seconds:6.0f} s in the engine)",
            flush=True,  # also when the output goes to a file: the pace as it goes
        )


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup_django(db: Path) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def write_history(jobs: int, teams: int, days: int, seed: int, load: float = LOAD) -> tuple[object, object]:
    """Nodes, teams with quotas that add up to the cluster, and ``jobs`` finished jobs."""
    from django.utils import timezone

    from allocations.models import (
        Cluster,
        ClusterPolicy,
        InstanceType,
        Job,
        Node,
        PriorityClass,
        Team,
        TeamQuota,
    )

    rng = random.Random(seed)
    cluster = Cluster.objects.create(pk=1, name="bench")
    ClusterPolicy.objects.create(cluster=cluster)
    it = InstanceType.objects.create(name="ml.p5.48xlarge", gpus_per_node=GPUS_PER_NODE, price_per_gpu_hour=4)
    now = timezone.now().replace(microsecond=0)
    Node.objects.bulk_create(
        Node(name=f"p5-{i:04d}", instance_type=it, gpus=GPUS_PER_NODE, state_since=now) for i in range(NODES)
    )
    classes = [
        PriorityClass.objects.create(name=name, weight=weight)
        for name, weight in (("inference", 100), ("training", 50), ("experimentation", 10))
    ]
    weights = [rng.uniform(0.2, 3) for _ in range(teams)]
    capacity = NODES * GPUS_PER_NODE
    quotas = [int(capacity * w / sum(weights)) for w in weights]
    team_rows = Team.objects.bulk_create(
        Team(name=f"team-{i:02d}", fair_share_weight=1) for i in range(teams)
    )
    TeamQuota.objects.bulk_create(
        TeamQuota(team=t, instance_type=it, quota=q, lend_limit=q // 2)
        for t, q in zip(team_rows, quotas, strict=True)
    )
    start = now - timedelta(days=days)
    sizes = (1, 2, 4, 8, 8, 16)
    mean_gpus = sum(sizes) / len(sizes)
    mean_hours = capacity * days * 24 * load / jobs / mean_gpus
    rows = []
    for i in range(jobs):
        team = rng.choices(team_rows, weights=weights)[0]
        submitted = start + timedelta(seconds=rng.uniform(0, days * 86400))
        run = timedelta(hours=min(rng.expovariate(1 / mean_hours), 72))
        rows.append(
            Job(
                team=team,
                name=f"job-{i}",
                instance_type=it,
                gpus=rng.choice(sizes),
                priority_class=rng.choice(classes),
                state="finished",
                submitted_at=submitted,
                started_at=submitted,
                finished_at=submitted + run,
            )
        )
    Job.objects.bulk_create(rows, batch_size=5000)
    return start, now


def replay_one(data: dict[str, Any], policies: list[dict[str, Any]], index: int, prices: dict[str, float],
               ticker: bool = False) -> str:  # fmt: skip
    """One policy's replay as the lab runs it (``runs.replay_policy``: the scenario, the replay
    with the reason recorder, the figures), timed, with the engine's own time beside it;
    returns the line to print."""
    from allocations.engine.session import Session
    from allocations.whatif import runs

    entry = policies[index]
    session = Session()
    engine = EngineClock(session)
    progress = Ticker(entry["name"], engine) if ticker else None
    t0 = time.perf_counter()
    shown, _jobs = runs.replay_policy(data, policies, index, prices, progress, engine=engine)
    t_lab = time.perf_counter() - t0
    c = shown["cluster"]
    return (
        f"{entry['name']:>6}: scenario+replay+reasons+figures {t_lab:6.1f} s "
        f"(baseline: the engine's allocate {engine.seconds:6.1f} s of it); {c['cycles']:,} cycles "
        f"({session.quiet_cycles:,} of them quiet: only the jobs new since a cycle at rest decided), "
        f"utilization {100 * c['utilization']:.1f}%, idle while waiting "
        f"{c['idle_while_waiting_gpu_hours']:,.0f} GPU-h, mean wait {c['wait_mean_s'] / 60:.1f} min; "
        f"peak RSS {peak_mb():.0f} MB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--load", type=float, default=LOAD, help="GPU-hours asked as a share of capacity")
    parser.add_argument("--step", type=int, default=60, help="time resolution of the scenario, s (0: exact)")
    parser.add_argument("--db", type=Path, help="SQLite file to create (default: a temporary one)")
    parser.add_argument(
        "--only", choices=("live", "draft"), help="replay only this policy (the target is for both)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        help="replays side by side, as the lab's WHATIF_PROCESSES (default: the cores; 1: one after the other)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "whatif-bench.sqlite3"
        reuse = db.exists()
        setup_django(db)
        if reuse:  # a database written by an earlier run with --db: the same history
            from allocations.models import Job

            # The window written began with the history's first submission or before it.
            first = Job.objects.order_by("submitted_at").values_list("submitted_at", flat=True)[0]
            window_start = first.replace(microsecond=0)
            window_end = window_start + timedelta(days=args.days)
            print(f"history reused from {db}: {Job.objects.count():,} jobs")
        else:
            started = time.perf_counter()
            window_start, window_end = write_history(args.jobs, args.teams, args.days, args.seed, args.load)
            print(f"history written: {args.jobs:,} jobs, {args.teams} teams, {NODES} nodes, "
                  f"{100 * args.load:.0f}% of the capacity asked, in {time.perf_counter() - started:.1f} s")  # fmt: skip

        from allocations.engine import BUILD
        from allocations.models import InstanceType
        from allocations.whatif import drafts, history

        print(f"engine build: {BUILD} (GPUGOV_ENGINE=interpreted or compiled chooses)")

        # The live policy, and a draft that lends whole quotas and borrows without limit.
        live = drafts.live_body()
        draft = {**live, "teams": [
            {**t, "quotas": [{**q, "lend_limit": None, "borrow_limit_kind": "unlimited"} for q in t["quotas"]]}
            for t in live["teams"]
        ]}  # fmt: skip
        policies = [
            {"key": "live", "name": "live", "body": live},
            {"key": "draft-1", "name": "draft", "body": draft},
        ]

        t0 = time.perf_counter()
        built = history.build(window_start, window_end, step=args.step)
        t_history = time.perf_counter() - t0
        print(
            f"history -> scenario: {len(built.data['jobs']):,} jobs in {t_history:.1f} s; peak RSS {peak_mb():.0f} MB"
        )
        prices = {n: float(p) for n, p in InstanceType.objects.values_list("name", "price_per_gpu_hour")}

        chosen = [i for i, entry in enumerate(policies) if not args.only or entry["name"] == args.only]
        t0 = time.perf_counter()
        if args.processes > 1 and len(chosen) > 1:
            # As the lab runs them (``WHATIF_PROCESSES``): side by side in forked processes.
            import billiard

            with billiard.get_context("fork").Pool(min(args.processes, len(chosen))) as pool:
                waiting = [
                    pool.apply_async(replay_one, (built.data, policies, i, prices, True)) for i in chosen
                ]
                lines = [r.get() for r in waiting]
            mode = f"side by side in {min(args.processes, len(chosen))} processes"
        else:
            lines = [replay_one(built.data, policies, i, prices, ticker=True) for i in chosen]
            mode = "one after the other"
        t_replays = time.perf_counter() - t0
        for line in lines:
            print(line)
        total = t_history + t_replays
        print(
            f"what-if run (history + {len(chosen)} policies, {mode}): {total:.1f} s wall "
            f"(replays {t_replays:.1f} s); target under 60 s; peak RSS of this process {peak_mb():.0f} MB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
