"""Time a /metrics scrape and the HyperPod / Kueue exports and import on a large policy.

    .venv/bin/python benchmarks/interop_metrics.py [--teams 200] [--jobs 20000] [--repeat 5]

Builds a throw-away SQLite database (or uses DATABASE_URL, e.g. a scratch PostgreSQL database:
its tables are created and filled, so never point it at real data) with ``--teams`` teams on
three instance types and ``--jobs`` running and pending jobs, then prints the median time of
each operation beside the baseline measured in the same run: ``build_snapshot`` alone, the
allocation loop's own read of the same rows. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _setup_django(var_dir: str) -> None:
    os.environ.setdefault("GPUGOV_VAR_DIR", var_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _fill(teams: int, jobs: int) -> None:
    """A cluster of three instance types, ``teams`` teams with quotas, ``jobs`` jobs."""
    from django.utils import timezone

    from allocations.models import (
        Cluster,
        ClusterPolicy,
        InstanceType,
        Job,
        JobEvent,
        Node,
        PriorityClass,
        Team,
        TeamQuota,
    )

    now = timezone.now()
    cluster, _ = Cluster.objects.get_or_create(pk=1, defaults={"name": "bench"})
    ClusterPolicy.objects.get_or_create(cluster=cluster)
    types = [
        InstanceType.objects.get_or_create(name=name, defaults={"gpus_per_node": gpus})[0]
        for name, gpus in (("ml.p5.48xlarge", 8), ("ml.g5.12xlarge", 4), ("ml.p4d.24xlarge", 8))
    ]
    Node.objects.bulk_create(
        Node(name=f"bench-{t.name}-{i}", instance_type=t, gpus=t.gpus_per_node, state_since=now)
        for t in types
        for i in range(teams)
    )
    for i in range(10):
        PriorityClass.objects.get_or_create(name=f"class-{i}", defaults={"weight": i * 10})
    team_rows = Team.objects.bulk_create(
        Team(name=f"team-{i:04d}", fair_share_weight=1 + i % 100) for i in range(teams)
    )
    TeamQuota.objects.bulk_create(
        TeamQuota(team=team, instance_type=t, quota=t.gpus_per_node, borrow_limit_percent=50 + i % 3 * 25)
        for i, team in enumerate(team_rows)
        for t in types
    )
    job_rows = Job.objects.bulk_create(
        Job(
            team=team_rows[i % teams],
            instance_type=types[i % 3],
            gpus=1,
            name=f"job-{i}",
            submitted_at=now,
            state="running" if i % 4 == 0 else "pending",
            nodes=[[f"bench-{types[i % 3].name}-{i % teams}", 1]] if i % 4 == 0 else [],
            started_at=now if i % 4 == 0 else None,
        )
        for i in range(jobs)
    )
    JobEvent.objects.bulk_create(
        JobEvent(job=job, kind="preempted", at=now, reason=("reclaim", "in-team", "fair-share")[job.pk % 3])
        for job in job_rows[: jobs // 10]
    )


def _median_ms(operation: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        operation()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpugov-bench-") as var_dir:
        _setup_django(var_dir)
        from django.db import connection, transaction
        from django.utils import timezone

        from allocations import metrics
        from allocations.interop import hyperpod, kueue
        from allocations.interop import policy as interop_policy
        from allocations.selectors.snapshot import build_snapshot

        _fill(args.teams, args.jobs)
        text = hyperpod.export_policy().json()

        def import_preview() -> None:
            interop_policy.diff(hyperpod.parse(text))

        def import_apply_and_roll_back() -> None:
            with transaction.atomic():
                interop_policy.apply(
                    hyperpod.parse(text.replace('"Accelerators": 8', '"Accelerators": 16')), actor=None
                )
                transaction.set_rollback(True)

        baseline = _median_ms(lambda: build_snapshot(timezone.now()), args.repeat)
        rows = [
            ("/metrics scrape (exposition)", metrics.exposition),
            ("HyperPod export + model checks", hyperpod.export_policy),
            ("Kueue export + YAML", lambda: kueue.export_manifests().yaml()),
            ("HyperPod import: parse + preview", import_preview),
            ("HyperPod import: apply (rolled back)", import_apply_and_roll_back),
        ]
        print(
            f"{connection.vendor}: {args.teams} teams x 3 instance types, {args.jobs} jobs, median of {args.repeat}"
        )
        print(f"  {'baseline: build_snapshot':40s} {baseline:9.1f} ms")
        for label, operation in rows:
            ms = _median_ms(operation, args.repeat)
            print(f"  {label:40s} {ms:9.1f} ms   ({ms / baseline:5.1f} x baseline)")


if __name__ == "__main__":
    main()
