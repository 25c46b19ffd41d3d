"""The allocation loop as history grows: the demo cluster of ``make run`` with 1k, 10k, 100k and
500k ended jobs, each phase of a cycle beside the same phase at the first size.

    .venv/bin/python benchmarks/soak.py [--max-ended 500000] [--cycles 7]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpugov .venv/bin/python benchmarks/soak.py

It builds a throw-away database: a SQLite file in a temporary directory by default, or, when
DATABASE_URL names PostgreSQL, a database created beside that one and dropped at the end. It
loads the demo (``manage.py load_demo``: 64 nodes, 6 teams, the simulated backend at speed-up
60 with the demo workload on) and runs cycles with the demo's workload until the cluster is busy.
Then, size by size, it adds ended jobs by a fast path: bulk inserts of what the loop leaves
behind a job that ended (the Job row, its events, the simulated backend's own row, the cycles
that ran meanwhile), ended between ten minutes and 23 hours ago, so within the backend's
one-day retention. At each size it times ``--cycles`` cycles of ``run_allocation_cycle`` (the
demo workload's tick before each, as beat runs it) and one ``history_sample``.

The baseline is each phase's median at the first size, measured in the same run: a cycle's
cost follows the live work (the running and pending jobs), not the history, so the target is
every phase within 1.5x of it at 500k ended jobs. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = (1_000, 10_000, 100_000, 500_000)
PHASES = ("sync", "snapshot", "engine", "apply", "record")
WARM_UP_CYCLES = 40
CHUNK = 10_000  # ended jobs written per round of bulk inserts
# Beyond this many, ended jobs are copies of the first ones made inside the database: at 500k,
# bulk_create's own Python work would take most of the run.
TEMPLATE = 10_000
ENDED_NAME = "ended-"  # the name prefix of the jobs this script writes
TARGET = 1.5


def _create_database(url: str) -> tuple[str, str]:
    """A fresh PostgreSQL database beside the one ``url`` names; returns its URL and the admin URL."""
    import psycopg

    parts = urlsplit(url)
    name = f"gpugov_soak_{uuid.uuid4().hex[:8]}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}")), admin


def _drop_database(url: str, admin: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("load_demo", stdout=io.StringIO())


def _tick_and_cycle() -> Any:
    """What beat does every few seconds: the demo workload's tick, then one cycle."""
    from django.utils import timezone

    from allocations.services.demo import demo_workload_tick
    from allocations.services.loop import run_allocation_cycle

    demo_workload_tick(timezone.now())
    return run_allocation_cycle(trigger="soak")


def _add_ended(count: int, rng: random.Random, now: datetime) -> None:
    """``count`` more ended jobs: written by bulk_create up to ``TEMPLATE``, copied beyond."""
    from allocations.models import Job

    written = Job.objects.filter(name__startswith=ENDED_NAME).count()
    direct = max(0, min(count, TEMPLATE - written))
    if direct:
        _write_ended(direct, rng, now)
    if count > direct:
        _copy_ended(count - direct)


def _write_ended(count: int, rng: random.Random, now: datetime) -> None:
    """``count`` ended jobs as the loop leaves them, in rounds of bulk inserts."""
    from django.db import transaction

    from allocations import models as m

    quotas = list(m.TeamQuota.objects.select_related("team", "instance_type").order_by("pk"))
    classes = list(m.PriorityClass.objects.order_by("pk"))
    nodes: dict[int, list[str]] = {}
    for name, type_id in m.Node.objects.values_list("name", "instance_type_id"):
        nodes.setdefault(type_id, []).append(name)
    kinds = ("finished",) * 17 + ("failed", "cancelled", "cancelled")
    written = 0
    while written < count:
        size = min(CHUNK, count - written)
        jobs, plans = [], []
        for _ in range(size):
            quota = rng.choice(quotas)
            kind = quota.instance_type
            gpus = rng.choice((1, 2, kind.gpus_per_node // 2, kind.gpus_per_node))
            finished = now - timedelta(seconds=rng.uniform(600, 23 * 3600))
            # The demo's speed-up of 60: a job of 1 to 48 hours runs 1 to 48 minutes.
            started = finished - timedelta(seconds=rng.uniform(60, 48 * 60))
            submitted = started - timedelta(seconds=rng.uniform(0, 1800))
            node = [[rng.choice(nodes[kind.pk]), gpus]]
            state = rng.choice(kinds)
            preempted = rng.random() < 0.05
            jobs.append(
                m.Job(
                    team=quota.team,
                    name=f"{ENDED_NAME}{written + len(jobs)}",
                    instance_type=kind,
                    gpus=gpus,
                    priority_class=rng.choice(classes),
                    requested_duration=int((finished - started).total_seconds() * 60),
                    state=state,
                    submitted_at=submitted,
                    started_at=started,
                    finished_at=finished,
                    start_seq=int(started.timestamp() * 1_000_000),
                    preemption_count=int(preempted),
                    last_preempted_at=started if preempted else None,
                )
            )
            plans.append((state, node, preempted))
        with transaction.atomic():
            created = m.Job.objects.bulk_create(jobs, batch_size=2000)
            events, backend_rows = [], []
            for job, (state, node, preempted) in zip(created, plans, strict=True):
                events.append(m.JobEvent(job=job, kind="submitted", at=job.submitted_at))
                if preempted:
                    events.append(m.JobEvent(job=job, kind="started", at=job.submitted_at, nodes=node))
                    events.append(
                        m.JobEvent(
                            job=job,
                            kind="preempted",
                            at=job.started_at,
                            nodes=node,
                            reason="fair-share",
                            message="preempted (fair-share)",
                        )
                    )
                    events.append(
                        m.JobEvent(job=job, kind="requeued", at=job.started_at, reason="fair-share")
                    )
                events.append(m.JobEvent(job=job, kind="started", at=job.started_at, nodes=node))
                events.append(m.JobEvent(job=job, kind=state, at=job.finished_at, nodes=node))
                backend_rows.append(
                    m.SimulatedJob(
                        job_id=str(job.pk),
                        external_id=f"sim-{job.pk}",
                        name=job.name,
                        team=job.team.name,
                        instance_type=job.instance_type.name,
                        gpus=job.gpus,
                        state=state,
                        nodes=[] if state == "cancelled" else node,
                        duration_s=(job.finished_at - job.started_at).total_seconds(),
                        started_at=job.started_at,
                        ends_at=job.finished_at,
                        finished_at=job.finished_at,
                        exit_code={"finished": 0, "failed": 137}.get(state),
                        reason={"failed": "node failed", "cancelled": "cancelled"}.get(state, ""),
                    )
                )
            m.JobEvent.objects.bulk_create(events, batch_size=5000)
            m.SimulatedJob.objects.bulk_create(backend_rows, batch_size=2000)
            # The loop's own record: a cycle every few seconds, about one per ten jobs ended.
            m.CycleRun.objects.bulk_create(
                (
                    m.CycleRun(
                        started_at=job.finished_at,
                        finished_at=job.finished_at + timedelta(milliseconds=80),
                        trigger="beat",
                        ok=True,
                        sync_ms=20,
                        snapshot_ms=10,
                        engine_ms=30,
                        apply_ms=10,
                        record_ms=10,
                        ended=1,
                    )
                    for job in created[::10]
                ),
                batch_size=2000,
            )
        written += size


def _copy_ended(count: int) -> None:
    """``count`` more ended jobs, copied in SQL from the first ``TEMPLATE`` ones with new ids:
    the Job rows, their events and the backend's rows, the same on SQLite and PostgreSQL."""
    from django.db import connection, transaction

    from allocations import models as m

    def columns(model: Any) -> list[str]:
        return [f.column for f in model._meta.concrete_fields if not f.primary_key]

    quote = connection.ops.quote_name
    job, event, backend = (quote(model._meta.db_table) for model in (m.Job, m.JobEvent, m.SimulatedJob))
    template = list(
        m.Job.objects.filter(name__startswith=ENDED_NAME)
        .order_by("pk")
        .values_list("pk", flat=True)[:TEMPLATE]
    )
    job_columns, event_columns, backend_columns = columns(m.Job), columns(m.JobEvent), columns(m.SimulatedJob)
    copied = 0
    with connection.cursor() as cursor:
        while copied < count:
            size = min(len(template), count - copied)
            first, last = template[0], template[size - 1]
            newest = m.Job.objects.order_by("-pk").values_list("pk", flat=True)[0]
            offset = newest + 1 - first
            chosen = f"SELECT id FROM {job} WHERE id BETWEEN %s AND %s AND name LIKE %s"
            where = [first, last, f"{ENDED_NAME}%"]
            with transaction.atomic():
                names = ", ".join(quote(c) for c in job_columns)
                cursor.execute(
                    f"INSERT INTO {job} (id, {names}) SELECT id + %s, {names} FROM {job} "
                    f"WHERE id IN ({chosen})",
                    [offset, *where],
                )
                values = ", ".join("job_id + %s" if c == "job_id" else quote(c) for c in event_columns)
                cursor.execute(
                    f"INSERT INTO {event} ({', '.join(quote(c) for c in event_columns)}) SELECT {values} "
                    f"FROM {event} WHERE job_id IN ({chosen})",
                    [offset, *where],
                )
                new_id = "CAST(CAST(job_id AS BIGINT) + %s AS TEXT)"
                values = ", ".join(
                    new_id if c == "job_id" else f"'sim-' || {new_id}" if c == "external_id" else quote(c)
                    for c in backend_columns
                )
                cursor.execute(
                    f"INSERT INTO {backend} ({', '.join(quote(c) for c in backend_columns)}) SELECT {values} "
                    f"FROM {backend} WHERE job_id IN (SELECT CAST(id AS TEXT) FROM {job} "
                    f"WHERE id BETWEEN %s AND %s AND name LIKE %s)",
                    [offset, offset, *where],
                )
                m.CycleRun.objects.bulk_create(
                    m.CycleRun(started_at=at, finished_at=at, trigger="beat", ok=True, ended=1)
                    for at in m.Job.objects.filter(pk__gt=newest)
                    .order_by("pk")
                    .values_list("finished_at", flat=True)[::10]
                )
            copied += size
        if connection.vendor == "postgresql":  # explicit ids: move the sequence past them
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence('{job}', 'id'), (SELECT MAX(id) FROM {job}))"
            )


def _analyze() -> None:
    """PostgreSQL: statistics and visibility bits, as autovacuum keeps them on a live database.
    SQLite is left as ``make run`` leaves it: nothing there runs ANALYZE."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def _measure(cycles: int) -> dict[str, Any]:
    """Each phase's fastest and median milliseconds over ``cycles`` cycles (and the history
    sample's over three), and what the cycles did."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from allocations.choices import JobState
    from allocations.models import Job
    from allocations.services.history import history_sample

    _tick_and_cycle()  # the first cycle after the bulk inserts, not timed (caches, statistics)
    times: dict[str, list[float]] = {phase: [] for phase in (*PHASES, "cycle", "history sample")}
    queries, errors = [], set()
    for _ in range(cycles):
        with CaptureQueriesContext(connection) as captured:
            run = _tick_and_cycle()
        if run is None:
            raise SystemExit("soak: a cycle was skipped (another worker holds the cycle lock)")
        for phase in PHASES:
            times[phase].append(getattr(run, f"{phase}_ms"))
        times["cycle"].append(sum(getattr(run, f"{phase}_ms") for phase in PHASES))
        queries.append(len(captured))
        if run.errors:
            errors.add(run.errors.splitlines()[0][:160])
    for _ in range(3):
        started = time.perf_counter()
        history_sample(now=timezone.now())
        times["history sample"].append((time.perf_counter() - started) * 1000)
    return {
        "fastest": {phase: min(ms) for phase, ms in times.items()},
        "median": {phase: statistics.median(ms) for phase, ms in times.items()},
        "queries": statistics.median(queries),
        "running": Job.objects.filter(state=JobState.RUNNING).count(),
        "pending": Job.objects.filter(state=JobState.PENDING).count(),
        "errors": sorted(errors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--max-ended",
        type=int,
        default=SIZES[-1],
        help="the largest history, in ended jobs (default 500,000)",
    )
    parser.add_argument("--cycles", type=int, default=7, help="timed cycles at each size (default 7)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.max_ended < 1 or args.cycles < 1:
        print("--max-ended and --cycles must be at least 1", file=sys.stderr)
        return 2
    # The sizes up to --max-ended; a quick run below the first size measures that one size.
    sizes = [n for n in SIZES if n < args.max_ended] + [args.max_ended]
    url = os.environ.get("DATABASE_URL", "")
    admin = ""
    with tempfile.TemporaryDirectory(prefix="gpugov-soak-") as tmp:
        if url.startswith(("postgres://", "postgresql://")):
            url, admin = _create_database(url)
            label = "PostgreSQL"
        else:
            url, label = f"sqlite:///{Path(tmp) / 'soak.sqlite3'}", "SQLite"
        os.environ["DATABASE_URL"] = url
        os.environ["GPUGOV_VAR_DIR"] = str(Path(tmp) / "var")
        try:
            _run(args, sizes, label)
        finally:
            from django.db import connections

            connections.close_all()
            if admin:
                _drop_database(url, admin)
    return 0


def _run(args: argparse.Namespace, sizes: list[int], label: str) -> None:
    from django.utils import timezone

    _setup_django()
    from allocations.models import Job

    started = time.perf_counter()
    for _ in range(WARM_UP_CYCLES):
        _tick_and_cycle()
    live = Job.objects.filter(state__in=("running", "pending")).count()
    print(
        f"demo cluster ({label}): {WARM_UP_CYCLES} warm-up cycles in {time.perf_counter() - started:.0f} s, "
        f"{live} running or pending jobs"
    )
    rng = random.Random(args.seed)
    baseline: dict[str, float] = {}
    ended = 0
    for size in sizes:
        started = time.perf_counter()
        _add_ended(size - ended, rng, timezone.now())
        ended = size
        _analyze()
        grown = time.perf_counter() - started
        result = _measure(args.cycles)
        baseline = baseline or result["fastest"]
        total = Job.objects.count()
        print(
            f"\n{size:,} ended jobs written ({total:,} jobs in all; writing took {grown:.0f} s): "
            f"{args.cycles} cycles, {result['running']} running and {result['pending']} pending after "
            f"them, {result['queries']:.0f} queries a cycle"
        )
        print(f"  {'phase':<15} {'fastest ms':>10} {'median ms':>10} {f'at {sizes[0]:,}':>10} {'ratio':>7}")
        for phase, ms in result["fastest"].items():
            floor = baseline[phase]
            ratio = ms / floor if floor > 0 else float("nan")
            median = result["median"][phase]
            print(f"  {phase:<15} {ms:>10.1f} {median:>10.1f} {floor:>10.1f} {ratio:>7.2f}")
        for error in result["errors"]:
            print(f"  a cycle's error: {error}")
    print(
        f"\ntarget: every phase within {TARGET}x of its figure at {sizes[0]:,} ended jobs "
        "(ratio: fastest of the cycles at this size over the fastest at the first size)"
    )


if __name__ == "__main__":
    sys.exit(main())
