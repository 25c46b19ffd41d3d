"""Time the weekly reports: the figures of a week, one email's content, and the chart PNGs.

    .venv/bin/python benchmarks/weekly_reports.py [--teams 50] [--jobs 20000] [--repeat 3]

Builds a throw-away SQLite database (or uses DATABASE_URL, e.g. a scratch PostgreSQL database:
its tables are created and filled, so never point it at real data) with ``--teams`` teams on
three instance types, eight weeks of hour rollups, ``--jobs`` jobs with their events and a
week of pending-reason samples. Prints the median time of each step beside the baseline
measured in the same run: one aggregate over the same eight weeks of hour rollups (reading the
rows the figures read, once). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WEEK = "2026-W47"
MONDAY = datetime(2026, 11, 16, tzinfo=UTC)


def _setup_django(var_dir: str) -> None:
    os.environ.setdefault("GPUGOV_VAR_DIR", var_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _fill(teams: int, jobs: int) -> None:
    """Teams with quotas on three types, 8 weeks of hour rollups, jobs with events."""
    from allocations.models import (
        CapacityRollup,
        Cluster,
        ClusterPolicy,
        InstanceType,
        Job,
        JobEvent,
        PendingReasonSample,
        Team,
        TeamQuota,
        TeamUsageRollup,
    )

    cluster, _ = Cluster.objects.get_or_create(pk=1, defaults={"name": "bench"})
    ClusterPolicy.objects.get_or_create(cluster=cluster)
    types = [
        InstanceType.objects.get_or_create(
            name=name, defaults={"gpus_per_node": 8, "price_per_gpu_hour": price}
        )[0]
        for name, price in (("ml.p5.48xlarge", 12), ("ml.g5.12xlarge", 2), ("ml.p4d.24xlarge", 5))
    ]
    team_rows = Team.objects.bulk_create(Team(name=f"team-{i:04d}") for i in range(teams))
    TeamQuota.objects.bulk_create(
        TeamQuota(team=t, instance_type=it, quota=8) for t in team_rows for it in types
    )
    start = MONDAY - timedelta(weeks=7)
    hours = [start + timedelta(hours=h) for h in range(8 * 7 * 24)]
    TeamUsageRollup.objects.bulk_create(
        (
            TeamUsageRollup(
                period="hour", start=at, team=team, instance_type=it, quota_gpu_minutes=480,
                used_within_quota_gpu_minutes=(h * 7 + i) % 480, borrowed_gpu_minutes=(h + i) % 60,
                lent_gpu_minutes=(h * 3 + i) % 120, idle_quota_gpu_minutes=60, preempted_reclaim=h % 50 == 0,
            )
            for h, at in enumerate(hours)
            for i, team in enumerate(team_rows)
            for it in types
        ),
        batch_size=5000,
    )  # fmt: skip
    CapacityRollup.objects.bulk_create(
        (
            CapacityRollup(period="hour", start=at, instance_type=it, minutes=60,
                           capacity_gpu_minutes=teams * 480, allocated_gpu_minutes=teams * 300,
                           idle_gpu_minutes=teams * 180, idle_while_waiting_gpu_minutes=h % 200)
            for h, at in enumerate(hours)
            for it in types
        ),
        batch_size=5000,
    )  # fmt: skip
    job_rows = Job.objects.bulk_create(
        (
            Job(team=team_rows[i % teams], instance_type=types[i % 3], gpus=1 + i % 8, name=f"job-{i}",
                submitted_at=MONDAY + timedelta(minutes=i % 10000), state="finished")
            for i in range(jobs)
        ),
        batch_size=5000,
    )  # fmt: skip
    events = []
    for job in job_rows:
        events += [
            JobEvent(job=job, kind="submitted", at=job.submitted_at),
            JobEvent(job=job, kind="started", at=job.submitted_at + timedelta(minutes=job.pk % 90)),
            JobEvent(job=job, kind="finished", at=job.submitted_at + timedelta(hours=2)),
        ]
    JobEvent.objects.bulk_create(events, batch_size=5000)
    PendingReasonSample.objects.bulk_create(
        (
            PendingReasonSample(at=MONDAY + timedelta(minutes=5 * s), team=team, instance_type=types[0],
                                code=("borrow-limit", "waiting-for-quota")[s % 2], jobs=1 + s % 4, gpus=8, minutes=5)
            for s in range(0, 7 * 24 * 12, 6)
            for team in team_rows[:10]
        ),
        batch_size=5000,
    )  # fmt: skip


def _median_ms(operation: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        operation()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpugov-bench-") as var_dir:
        _setup_django(var_dir)
        from django.core.cache import cache
        from django.db import connection
        from django.db.models import Sum

        from allocations.models import TeamUsageRollup
        from allocations.reports import email as report_email
        from allocations.reports.figures import weekly_figures
        from allocations.reports.render import renderer_unavailable
        from allocations.reports.weeks import Week

        _fill(args.teams, args.jobs)
        week = Week.parse(WEEK, "UTC")
        figures = weekly_figures(week)

        def baseline() -> None:
            TeamUsageRollup.objects.filter(
                period="hour", start__gte=week.shifted(-7).start, start__lt=week.end
            ).aggregate(Sum("used_within_quota_gpu_minutes"))

        def render_fresh() -> None:
            cache.clear()  # every repetition starts the browser and draws every chart
            report_email.chart_images(report_email.cluster_content(figures))

        rows: list[tuple[str, Callable[[], Any]]] = [
            ("weekly_figures (8 queries)", lambda: weekly_figures(week)),
            ("cluster email content (tables, CSV)", lambda: report_email.cluster_content(figures)),
            ("team email content", lambda: report_email.team_content(figures.teams[0])),
        ]
        why = renderer_unavailable()
        if why is None:
            rows.append(("cluster charts as PNG (browser start + 4 charts)", render_fresh))
        base = _median_ms(baseline, args.repeat)
        print(f"{connection.vendor}: {args.teams} teams x 3 types, 8 weeks of hours, {args.jobs} jobs, "
              f"median of {args.repeat}")  # fmt: skip
        print(f"  {'baseline: one Sum over the 8 weeks of hours':52s} {base:9.1f} ms")
        for label, operation in rows:
            ms = _median_ms(operation, args.repeat)
            print(f"  {label:52s} {ms:9.1f} ms   ({ms / base:6.1f} x baseline)")
        if why is not None:
            print(f"  charts not timed: {why}")


if __name__ == "__main__":
    main()
