"""One allocation cycle through the database, phase by phase, beside a floor measured in the
same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpugov .venv/bin/python benchmarks/loop_cycle.py

It creates a throw-away database next to the one DATABASE_URL names (dropped at the end),
migrates it and fills it through bulk inserts: 1,000 nodes of 8 GPUs, 10 teams, 5,000 running
jobs (the simulated backend runs them too) and 10,000 pending ones, of which 100 can start.
Then it times two cycles of ``run_allocation_cycle`` on the simulated backend: the first writes
a pending reason on every pending job, the second (nothing changed) only compares them.

The floor is what any cycle must pay the database: one SELECT of the pending jobs and one bulk
UPDATE of as many rows (PostgreSQL: ``UPDATE ... FROM (VALUES ...)``). The target is every
database phase within 3x the floor; the engine's own time is ``benchmarks/engine_cycle.py``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NODES, GPUS_PER_NODE, TEAMS = 1000, 8, 10
PHASES = ("sync", "snapshot", "engine", "apply", "record")


def _create_database(url: str) -> tuple[str, str]:
    """A fresh database beside the one ``url`` names; returns its URL and the admin URL."""
    import psycopg

    parts = urlsplit(url)
    name = f"gpugov_bench_{uuid.uuid4().hex[:8]}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}")), admin


def _seed(pending: int, running: int) -> None:
    """The cluster, written with bulk inserts (the benchmark measures the loop, not the seeding)."""
    from django.db.models import CharField, Value
    from django.db.models.functions import Cast, Concat

    from allocations import models as m

    now = datetime.now(UTC)
    cluster = m.Cluster.objects.create(pk=1, name="bench", backend_settings={"speedup": 1})
    m.ClusterPolicy.objects.create(cluster=cluster)
    kind = m.InstanceType.objects.create(name="ml.p5.48xlarge", gpus_per_node=GPUS_PER_NODE)
    nodes = m.Node.objects.bulk_create(
        m.Node(name=f"n{k:04d}", instance_type=kind, gpus=GPUS_PER_NODE, state_since=now)
        for k in range(NODES)
    )
    low = m.PriorityClass.objects.create(name="experimentation", weight=10)
    high = m.PriorityClass.objects.create(name="training", weight=70)
    teams = []
    for index in range(TEAMS):
        team = m.Team.objects.create(name=f"team-{index}")
        m.TeamQuota.objects.create(team=team, instance_type=kind, quota=NODES * GPUS_PER_NODE // TEAMS)
        teams.append(team)
    # Running: 1-GPU jobs, five a node, so every node has 3 GPUs free and no 4-GPU job fits.
    jobs = [
        m.Job(
            team=teams[k % TEAMS],
            name=f"running-{k}",
            instance_type=kind,
            gpus=1,
            priority_class=high,
            requested_duration=86400,
            state="running",
            submitted_at=now - timedelta(hours=2),
            started_at=now - timedelta(hours=1),
            nodes=[[nodes[k // 5].name, 1]],
            start_seq=k,
            external_id="",  # set below, once the primary keys are known
        )
        for k in range(running)
    ]
    # Pending: 4-GPU jobs that cannot start (fragmented), and 100 1-GPU jobs that can.
    jobs += [
        m.Job(
            team=teams[k % TEAMS],
            name=f"pending-{k}",
            instance_type=kind,
            gpus=1 if k < 100 else 4,
            priority_class=low,
            requested_duration=3600,
            submitted_at=now - timedelta(seconds=pending - k),
        )
        for k in range(pending)
    ]
    created = m.Job.objects.bulk_create(jobs, batch_size=2000)
    m.Job.objects.filter(state="running").update(external_id=Concat(Value("sim-"), Cast("id", CharField())))
    m.SimulatedJob.objects.bulk_create(
        (
            m.SimulatedJob(
                job_id=str(job.pk),
                external_id=f"sim-{job.pk}",
                name=job.name,
                team=job.team.name,
                instance_type=kind.name,
                gpus=1,
                state="running",
                nodes=job.nodes,
                duration_s=86400,
                started_at=job.started_at,
                ends_at=now + timedelta(days=1),
            )
            for job in created
            if job.state == "running"
        ),
        batch_size=2000,
    )


def _floor() -> float:
    """Seconds for one SELECT of the pending jobs and one bulk UPDATE of as many rows."""
    from django.db import connection, transaction

    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM allocations_job WHERE state = 'pending'")
        rows = cursor.fetchall()
        ids = [row[0] for row in rows]
        with transaction.atomic():
            if connection.vendor == "postgresql":
                values = ",".join(["(%s, %s)"] * len(ids))
                params = [value for pk in ids for value in (pk, f"floor {pk}")]
                cursor.execute(
                    "UPDATE allocations_job AS j SET pending_reason_message = v.message "
                    f"FROM (VALUES {values}) AS v(id, message) WHERE j.id = v.id",
                    params,
                )
            else:
                cursor.executemany(
                    "UPDATE allocations_job SET pending_reason_message = %s WHERE id = %s",
                    [(f"floor {pk}", pk) for pk in ids],
                )
            transaction.set_rollback(True)  # leave the rows as the cycle will find them
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=5_000)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print(
            "DATABASE_URL must name PostgreSQL, e.g. postgres://postgres@127.0.0.1:5432/gpugov",
            file=sys.stderr,
        )
        return 2
    if args.running > NODES * 5:
        print(f"--running must be at most {NODES * 5} (five 1-GPU jobs a node)", file=sys.stderr)
        return 2
    bench_url, admin = _create_database(url)
    os.environ["DATABASE_URL"] = bench_url
    os.environ["GPUGOV_VAR_DIR"] = tempfile.mkdtemp(prefix="gpugov-bench-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, reset_queries
        from django.test.utils import CaptureQueriesContext

        from allocations.services.loop import run_allocation_cycle

        call_command("migrate", verbosity=0)
        _seed(args.pending, args.running)
        # As autovacuum would have by the time a real cluster has this many jobs: statistics for
        # the planner, and no first reader paying for the fresh rows' visibility bits.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(
            f"{args.pending} pending and {args.running} running jobs, {NODES} nodes, {TEAMS} teams (PostgreSQL)"
        )
        floor_s = min(_floor() for _ in range(3))
        print(
            f"floor: one SELECT of the pending jobs + one bulk UPDATE of as many rows: {floor_s * 1000:.0f} ms"
        )
        for label in ("cycle 1 (writes every pending reason)", "cycle 2 (nothing changed)"):
            reset_queries()
            with CaptureQueriesContext(connection) as queries:
                run = run_allocation_cycle(trigger="benchmark")
            assert run is not None and run.ok, run and run.errors
            print(f"\n{label}: {run.started} started, {run.pending} pending, {len(queries)} queries")
            print(f"  {'phase':<9} {'ms':>9} {'x floor':>8}")
            for phase in PHASES:
                ms = getattr(run, f"{phase}_ms")
                note = "  (the engine; see benchmarks/engine_cycle.py)" if phase == "engine" else ""
                print(f"  {phase:<9} {ms:>9.0f} {ms / 1000 / floor_s:>8.2f}{note}")
            database_ms = sum(getattr(run, f"{phase}_ms") for phase in PHASES if phase != "engine")
            print(
                f"  {'db total':<9} {database_ms:>9.0f} {database_ms / 1000 / floor_s:>8.2f}  (target: each phase <= 3x)"
            )
    finally:
        from django.db import connections

        connections.close_all()
        import psycopg

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(bench_url).path[1:]}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
