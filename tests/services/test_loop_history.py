"""A cycle's cost follows the live work, not the history: ended jobs stay out of every query
an allocation cycle (and the minute's history sample) runs.

The simulated backend keeps an ended job for a day (``retention_s``), the Job and JobEvent
tables keep them for good. The test adds thousands of ended jobs as the loop leaves them and
checks that the same queries run and that none of them reads the ended rows: on any database
by the rows they return, on PostgreSQL also by the rows each plan really visits (EXPLAIN
ANALYZE), on SQLite by the absence of a scan of a whole table that keeps history. Timings are
``benchmarks/soak.py``'s.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.models import CycleRun, Job, JobEvent, SimulatedJob
from allocations.services.history import history_sample
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db

HISTORY_TABLES = ("allocations_job", "allocations_simulatedjob", "allocations_jobevent")
LIVE_INDEXES = ("job_live",)  # partial indexes: only running and pending rows


def submit(personas: Personas, team: str, gpus: int, priority: str = "training") -> Job:
    owner = personas.team if team == "team-a" else personas.other_team
    return f.make_job(
        owner,
        personas.instance_type,
        gpus,
        priority_class=personas.priority_classes[priority],
        requested_duration=3600,
    )


def cycle() -> CycleRun:
    run = run_allocation_cycle(trigger="test")
    assert run is not None and run.ok, run and run.errors
    return run


def add_ended_jobs(personas: Personas, count: int) -> None:
    """``count`` jobs that ended an hour ago, as the loop leaves them: the Job row, its events and
    the backend's own row (within the backend's retention, so still kept there)."""
    ended_at = timezone.now() - timedelta(hours=1)
    jobs = Job.objects.bulk_create(
        Job(
            team=personas.team,
            instance_type=personas.instance_type,
            gpus=1,
            name=f"ended-{k}",
            state="finished",
            submitted_at=ended_at - timedelta(minutes=30),
            started_at=ended_at - timedelta(minutes=20),
            finished_at=ended_at,
            external_id="sim-ended",
        )
        for k in range(count)
    )
    nodes = [[personas.nodes[0].name, 1]]
    JobEvent.objects.bulk_create(
        JobEvent(job=job, kind=kind, at=at, nodes=nodes)
        for job in jobs
        for kind, at in (("submitted", job.submitted_at), ("started", job.started_at), ("finished", ended_at))
    )
    SimulatedJob.objects.bulk_create(
        SimulatedJob(
            job_id=str(job.pk),
            external_id=f"sim-{job.pk}",
            instance_type=personas.instance_type.name,
            gpus=1,
            state="finished",
            nodes=nodes,
            duration_s=1200,
            started_at=job.started_at,
            ends_at=ended_at,
            finished_at=ended_at,
            exit_code=0,
        )
        for job in jobs
    )


def reads_of_history(queries: CaptureQueriesContext) -> list[str]:
    """The captured statements that read a table keeping history (INSERTs read nothing)."""
    return [
        query["sql"]
        for query in queries.captured_queries
        if query["sql"].lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE"))
        and any(f'"{table}"' in query["sql"] for table in HISTORY_TABLES)
    ]


def _visited(node: dict[str, Any]) -> int:
    """Rows of the history tables that a PostgreSQL plan node and its children visited."""
    own = 0
    if node.get("Relation Name") in HISTORY_TABLES:
        seen = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        own = (seen + node.get("Rows Removed by Index Recheck", 0)) * node["Actual Loops"]
    return own + sum(_visited(child) for child in node.get("Plans", ()))


def rows_returned(sql: str) -> int:
    """Rows a captured SELECT gives when run again (rolled back): what the cycle loaded from a
    table keeping history, on any database."""
    if not sql.lstrip().upper().startswith("SELECT"):
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
        count = len(cursor.fetchall())
        transaction.set_rollback(True)
    return count


def rows_visited(sql: str) -> int:
    """PostgreSQL: run the statement under EXPLAIN ANALYZE, rolled back, and count its rows."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        plan = cursor.fetchone()[0]
        transaction.set_rollback(True)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _visited(plan[0]["Plan"])


def whole_table_scans(sql: str) -> list[str]:
    """SQLite: the steps of the statement's plan that walk a whole table keeping history."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        steps = [str(row[-1]) for row in cursor.fetchall()]
    return [
        step
        for step in steps
        if any(step.startswith(f"SCAN {table}") for table in HISTORY_TABLES)
        and not any(f"INDEX {index}" in step for index in LIVE_INDEXES)
    ]


def analyze() -> None:
    """PostgreSQL plans from statistics, which autovacuum keeps on a live database."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {', '.join(HISTORY_TABLES)}")


def test_a_cycle_reads_no_ended_job_however_many_there_are(personas: Personas) -> None:
    # Live work: four running jobs and one that waits for good (beyond team-a's borrow limit).
    for team, gpus in (("team-a", 4), ("team-a", 4), ("team-b", 4), ("team-b", 2)):
        submit(personas, team, gpus)
    submit(personas, "team-a", 16, priority="experimentation")
    # Two jobs that end now: the backend lists them for a while, in both cycles measured below.
    short = [submit(personas, "team-b", 1), submit(personas, "team-b", 1)]
    assert cycle().started == 6
    now = timezone.now()
    SimulatedJob.objects.filter(job_id__in=[str(job.pk) for job in short]).update(
        started_at=now - timedelta(seconds=60), ends_at=now - timedelta(seconds=1)
    )
    assert cycle().ended == 2
    cycle()
    analyze()
    with CaptureQueriesContext(connection) as few:
        cycle()
        history_sample(now=timezone.now())
    few_visited = (
        [rows_visited(sql) for sql in reads_of_history(few)] if connection.vendor == "postgresql" else []
    )
    few_returned = sum(rows_returned(sql) for sql in reads_of_history(few))

    add_ended_jobs(personas, 3000)
    analyze()
    with CaptureQueriesContext(connection) as many:
        run = cycle()
        history_sample(now=timezone.now())

    assert (run.started, run.ended, run.pending) == (0, 0, 1)
    assert Job.objects.filter(state="running").count() == 4
    assert len(many) == len(few)
    # On any database: the cycle loads no more rows of history than with two ended jobs.
    assert sum(rows_returned(sql) for sql in reads_of_history(many)) <= few_returned
    if connection.vendor == "postgresql":
        many_visited = [rows_visited(sql) for sql in reads_of_history(many)]
        # Statement by statement, no more rows than with two ended jobs (a plan may read fewer
        # once its statistics say that the live rows are few).
        assert sum(many_visited) <= sum(few_visited), list(
            zip(reads_of_history(many), few_visited, many_visited, strict=True)
        )
        assert max(many_visited) < 100
    else:
        scans = {sql: whole_table_scans(sql) for sql in reads_of_history(many)}
        assert not {sql: steps for sql, steps in scans.items() if steps}
