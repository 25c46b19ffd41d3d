"""Server time and query count of every dashboard page and data endpoint, beside a floor.

    .venv/bin/python benchmarks/dashboards.py [--rebuild] [--iterations N] [--db-url URL]

It runs against its own PostgreSQL database (default ``gpugov_bench`` on 127.0.0.1, created if
missing, migrated) holding a year of history for 50 teams x 3 instance types: minute samples for
the last ``HISTORY_MINUTE_DAYS`` days, hour rollups for a year, day rollups for a year, and 1M
jobs. The data is generated inside PostgreSQL (``INSERT ... SELECT generate_series``) in about a
minute and kept between runs; ``--rebuild`` regenerates it (it is also regenerated when its
newest minute is more than an hour old, since every range ends now).

Each endpoint (cluster and team page, JSON data, one CSV) is requested in-process with Django's
test Client at 1 day, 30 days and 1 year; the table shows p50 and p95 server time and the query
count (``CaptureQueriesContext``). The floor, measured in the same run, is one indexed SELECT of
one team's minute rows of the last day. Targets: p95 under 300 ms, the query count the same at
every range. The last row is the beat task ``history_tick`` (sample, roll up, prune) at this
size; it writes the current minute into the benchmark database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RANGES = ("1d", "30d", "1y")
TEAMS = 50
TYPES = (
    ("ml.p5.48xlarge", 8, 40),
    ("ml.p4d.24xlarge", 8, 30),
    ("ml.g5.12xlarge", 4, 50),
)  # name, GPUs/node, nodes


def ensure_database(url: str) -> None:
    """Create the benchmark database when it does not exist yet."""
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin_url = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    os.environ["DJANGO_HTTPS"] = "false"  # the test client speaks plain HTTP
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def needs_data() -> bool:
    from django.db.models import Max
    from django.utils import timezone

    from allocations.models import CapacityMinute, Job

    newest = CapacityMinute.objects.aggregate(m=Max("minute"))["m"]
    if newest is None or timezone.now() - newest > timedelta(hours=1):
        return True
    return Job.objects.count() < 1_000_000


def generate(jobs: int) -> None:
    """The cluster, its teams and a year of history, generated inside PostgreSQL."""
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    from allocations.services.history import floor_day, floor_hour, floor_minute
    from tests import factories as f

    began = time.perf_counter()
    now = timezone.now()
    end_minute, end_hour, end_day = floor_minute(now), floor_hour(now), floor_day(now)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE allocations_teamusageminute, allocations_capacityminute, allocations_teamusagerollup,"
            " allocations_capacityrollup, allocations_jobevent, allocations_job, allocations_membership,"
            " allocations_teamquota, allocations_team, allocations_node, allocations_instancetype,"
            " auth_user CASCADE"
        )
    with transaction.atomic():
        f.make_cluster()
        types = [f.make_instance_type(name, gpus) for name, gpus, _ in TYPES]
        for it, (_, _, nodes) in zip(types, TYPES, strict=True):
            f.make_nodes(it, nodes)
        for k in range(TEAMS):
            # Quotas at 90% of each type's capacity, split evenly.
            f.make_team(
                f"team-{k:02d}",
                {
                    it: int(it.gpus_per_node * n * 0.9 / TEAMS)
                    for it, (_, _, n) in zip(types, TYPES, strict=True)
                },
                fair_share_weight=1 + k % 4,
            )
        f.make_user("bench-admin", staff=True)
    minute_start = end_minute - timedelta(days=settings.HISTORY_MINUTE_DAYS)
    year_start = end_day - timedelta(days=365)
    # A busy cluster: each team uses about its quota, swinging by the hour; the used GPUs,
    # borrowing and lending follow from the quota (q); the formulas only need to be plausible.
    team_sql = """
        INSERT INTO allocations_teamusage{table} ({time_col}, {extra_cols} team_id, instance_type_id, {cols})
        SELECT s.t, {extra_vals} tq.team_id, tq.instance_type_id, {vals}
        FROM generate_series(%s::timestamptz, %s::timestamptz, %s::interval) AS s(t)
        CROSS JOIN allocations_teamquota tq
        CROSS JOIN LATERAL (SELECT tq.quota AS q,
            greatest(0, round(tq.quota * (0.9 + 0.5 * sin(extract(epoch FROM s.t) / 5400 + tq.team_id))
                              + random() * 2))::int AS u) x
    """
    minute_cols = (
        "quota, used, used_within_quota, borrowed, lent, idle_quota, pending_gpus, running_jobs, pending_jobs,"
        " preempted_in_team, preempted_reclaim, preempted_reclaim_while_borrowing, preempted_fair_share"
    )
    minute_vals = (
        "x.q, x.u, least(x.u, x.q), greatest(0, x.u - x.q), greatest(0, x.q - x.u) * 0.6,"
        " greatest(0, x.q - x.u) * 0.4, (random() * 6)::int, x.u / 2, (random() * 3)::int,"
        " (random() < 0.01)::int, (random() < 0.02)::int, 0, (random() < 0.005)::int"
    )
    rollup_cols = (
        "quota_gpu_minutes, used_gpu_minutes, used_within_quota_gpu_minutes, borrowed_gpu_minutes,"
        " lent_gpu_minutes, idle_quota_gpu_minutes, pending_gpu_minutes, running_job_minutes,"
        " pending_job_minutes, peak_used, peak_pending_gpus, preempted_in_team, preempted_reclaim,"
        " preempted_reclaim_while_borrowing, preempted_fair_share"
    )

    def rollup_vals(minutes: int) -> str:
        m = minutes
        return (
            f"x.q * {m}, x.u * {m}, least(x.u, x.q) * {m}, greatest(0, x.u - x.q) * {m},"
            f" greatest(0, x.q - x.u) * 0.6 * {m}, greatest(0, x.q - x.u) * 0.4 * {m}, (random() * 6 * {m})::int,"
            f" x.u / 2 * {m}, (random() * 3 * {m})::int, x.u + 2, 6, (random() * {m} / 100)::int,"
            f" (random() * {m} / 50)::int, 0, (random() * {m} / 200)::int"
        )

    capacity_sql = """
        INSERT INTO allocations_capacity{table} ({time_col}, {extra_cols} instance_type_id, {cols})
        SELECT s.t, {extra_vals} it.id, {vals}
        FROM generate_series(%s::timestamptz, %s::timestamptz, %s::interval) AS s(t)
        CROSS JOIN allocations_instancetype it
        CROSS JOIN LATERAL (SELECT (SELECT sum(gpus) FROM allocations_node n WHERE n.instance_type_id = it.id) AS c,
            (SELECT sum(quota) FROM allocations_teamquota q WHERE q.instance_type_id = it.id) AS a) x
    """
    cap_minute_cols = "capacity, allocated, idle, unallocated, pending_gpus, pending_jobs, idle_while_waiting"
    cap_minute_vals = (
        "x.c, least(x.c, x.a), x.c - least(x.c, x.a), x.c - x.a, 40, 12, least(x.c - least(x.c, x.a), 40)"
    )
    cap_rollup_cols = (
        "minutes, capacity_gpu_minutes, allocated_gpu_minutes, idle_gpu_minutes, unallocated_gpu_minutes,"
        " pending_gpu_minutes, pending_job_minutes, idle_while_waiting_gpu_minutes, peak_allocated, peak_pending_gpus"
    )

    def cap_rollup_vals(m: int) -> str:
        return (
            f"{m}, x.c * {m}, least(x.c, x.a) * {m}, (x.c - least(x.c, x.a)) * {m}, (x.c - x.a) * {m},"
            f" 40 * {m}, 12 * {m}, least(x.c - least(x.c, x.a), 40) * {m}, least(x.c, x.a), 60"
        )

    steps = [
        ("minutes", team_sql.format(table="minute", time_col="minute", extra_cols="", extra_vals="", cols=minute_cols, vals=minute_vals), minute_start, end_minute, "1 minute"),
        ("hours", team_sql.format(table="rollup", time_col="start", extra_cols="period,", extra_vals="'hour',", cols=rollup_cols, vals=rollup_vals(60)), year_start, end_hour, "1 hour"),
        ("days", team_sql.format(table="rollup", time_col="start", extra_cols="period,", extra_vals="'day',", cols=rollup_cols, vals=rollup_vals(1440)), year_start, end_day, "1 day"),
        ("capacity minutes", capacity_sql.format(table="minute", time_col="minute", extra_cols="", extra_vals="", cols=cap_minute_cols, vals=cap_minute_vals), minute_start, end_minute, "1 minute"),
        ("capacity hours", capacity_sql.format(table="rollup", time_col="start", extra_cols="period,", extra_vals="'hour',", cols=cap_rollup_cols, vals=cap_rollup_vals(60)), year_start, end_hour, "1 hour"),
        ("capacity days", capacity_sql.format(table="rollup", time_col="start", extra_cols="period,", extra_vals="'day',", cols=cap_rollup_cols, vals=cap_rollup_vals(1440)), year_start, end_day, "1 day"),
    ]  # fmt: skip
    with connection.cursor() as cursor:
        for label, sql, start, end, step in steps:
            t0 = time.perf_counter()
            cursor.execute(sql, [start, end, step])
            print(f"  {label}: {cursor.rowcount:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
        # 1M finished jobs over the year, spread over teams and types; waits of seconds to hours.
        t0 = time.perf_counter()
        cursor.execute(
            """
            WITH q AS (SELECT array_agg(team_id ORDER BY id) AS teams,
                              array_agg(instance_type_id ORDER BY id) AS types, count(*)::int AS n
                       FROM allocations_teamquota)
            INSERT INTO allocations_job (team_id, instance_type_id, name, gpus, command, image, state,
                submitted_at, started_at, finished_at, pending_reason_code, pending_reason_message,
                nodes, start_seq, preemption_count, external_id, updated_at)
            SELECT q.teams[1 + g %% q.n], q.types[1 + g %% q.n], 'bench-' || g, 1 + (g %% 8), '', '',
                'finished', t.at - (interval '1 second' * (random() ^ 3 * 20000)), t.at,
                t.at + interval '1 hour', '', '', '[]', g, 0, '', t.at
            FROM generate_series(1, %s) AS g
            CROSS JOIN q
            CROSS JOIN LATERAL (SELECT %s::timestamptz - interval '1 second' * (random() * 365 * 86400 + g * 0)
                                AS at) t
            """,
            [jobs, now],
        )
        print(f"  jobs: {cursor.rowcount:,} rows in {time.perf_counter() - t0:.1f} s", flush=True)
        cursor.execute("ANALYZE")
    print(f"generated in {time.perf_counter() - began:.1f} s")


def measure(iterations: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse
    from django.utils import timezone

    from allocations.models import Team, TeamUsageMinute

    admin = get_user_model().objects.get(username="bench-admin")
    team = Team.objects.get(name="team-07")
    client = Client()
    client.force_login(admin)
    endpoints = [
        ("cluster page", reverse("allocations:dashboard_cluster")),
        ("cluster data", reverse("allocations:dashboard_cluster_data")),
        ("cluster capacity.csv", reverse("allocations:dashboard_cluster_csv", kwargs={"chart": "capacity"})),
        ("team page", reverse("allocations:dashboard_team", kwargs={"team": team.name})),
        ("team data", reverse("allocations:dashboard_team_data", kwargs={"team": team.name})),
        (
            "team usage.csv",
            reverse("allocations:dashboard_team_csv", kwargs={"team": team.name, "chart": "usage"}),
        ),
    ]

    def floor() -> None:
        since = timezone.now() - timedelta(days=1)
        list(TeamUsageMinute.objects.filter(team=team, minute__gte=since).values_list("minute", "used"))

    def timed(call: Any) -> tuple[float, float, int]:
        times, queries = [], 0
        call()  # warm-up: connection, caches, compiled templates
        for _ in range(iterations):
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                call()
                times.append((time.perf_counter() - t0) * 1000)
            queries = len(captured)
        times.sort()
        p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
        return statistics.median(times), p95, queries

    f50, f95, fq = timed(floor)
    print(f"\n{'endpoint':<24}{'range':>6}{'p50 ms':>9}{'p95 ms':>9}{'queries':>9}{'p50/floor':>11}")
    print(f"{'floor: 1 team, 1 day':<24}{'1d':>6}{f50:>9.1f}{f95:>9.1f}{fq:>9}{1:>11.1f}")
    worst = 0.0
    for label, url in endpoints:
        counts = set()
        for key in RANGES:

            def get(url: str = url, key: str = key) -> None:
                response = client.get(url, {"range": key})
                assert response.status_code == 200, (url, key, response.status_code)
                _ = response.content

            p50, p95, queries = timed(get)
            counts.add(queries)
            worst = max(worst, p95)
            print(f"{label:<24}{key:>6}{p50:>9.1f}{p95:>9.1f}{queries:>9}{p50 / f50:>11.1f}")
        if len(counts) > 1:
            print(f"  !! {label}: the query count depends on the range: {sorted(counts)}")
    # The beat task's own cost at this size: sample 150 team rows, roll up the hour and day.
    from allocations.services.history import history_tick

    tick50, tick95, tickq = timed(lambda: history_tick(now=timezone.now()))
    print(f"{'history_tick (beat)':<24}{'-':>6}{tick50:>9.1f}{tick95:>9.1f}{tickq:>9}{tick50 / f50:>11.1f}")
    verdict = "meets" if worst < 300 else "MISSES"
    print(f"\nworst p95 {worst:.0f} ms: {verdict} the 300 ms target ({iterations} requests per row)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db-url", default="postgres://postgres@127.0.0.1:5432/gpugov_bench")
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    if not args.db_url.startswith("postgres"):
        parser.error(f"--db-url: must be a PostgreSQL URL, got {args.db_url!r}")
    ensure_database(args.db_url)
    setup_django(args.db_url)
    if args.rebuild or needs_data():
        print("generating a year of history for 50 teams x 3 instance types and the jobs ...")
        generate(args.jobs)
    measure(args.iterations)


if __name__ == "__main__":
    main()
