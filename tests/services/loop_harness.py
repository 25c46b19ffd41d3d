"""A throw-away gpugov installation for tests that run the loop in REAL separate processes.

Racing workers, a worker killed with SIGKILL and a Celery worker all need a database that other
processes can open: pytest-django's SQLite test database lives in memory, so these tests make
their own (a fresh PostgreSQL database when DATABASE_URL names PostgreSQL, else a SQLite file)
with its own var/ directory (lock files, cache, filesystem broker), migrate it, and drive it
with this module run as a script:

    python -m tests.services.loop_harness seed|cycle|request|report [options]

Every command prints one JSON document on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent.parent
PYTHON = sys.executable


# --- the parent's side -----------------------------------------------------------------------


class Harness:
    """The environment of one throw-away installation and a way to run commands in it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def popen(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [PYTHON, "-m", "tests.services.loop_harness", *args],
            cwd=REPO,
            env={**self.env, **(extra_env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> Any:
        """Run one command to its end and return its JSON output (raising with its stderr)."""
        process = self.popen(*args, extra_env=extra_env)
        out, err = process.communicate(timeout=timeout)
        if process.returncode != 0:
            raise AssertionError(f"harness {' '.join(args)} exited {process.returncode}:\n{err[-4000:]}")
        return json.loads(out)


@contextlib.contextmanager
def installation(var_dir: Path) -> Iterator[Harness]:
    """A migrated, empty installation on the same kind of database as the test run."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.test",
        "GPUGOV_VAR_DIR": str(var_dir),
        "PYTHONPATH": str(REPO),
    }
    database_url = os.environ.get("DATABASE_URL", "")
    dropped: str | None = None
    if database_url.startswith(("postgres://", "postgresql://")):
        import psycopg

        name = f"gpugov_harness_{uuid.uuid4().hex[:10]}"
        parts = urlsplit(database_url)
        admin = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{name}"))
        dropped = name
    else:
        env["DATABASE_URL"] = f"sqlite:///{var_dir / 'harness.sqlite3'}"
    try:
        subprocess.run(
            [PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"],
            cwd=REPO,
            env=env,
            check=True,
            timeout=300,
        )
        yield Harness(env)
    finally:
        if dropped:
            import psycopg

            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{dropped}" WITH (FORCE)')


# --- the child's side ------------------------------------------------------------------------


def _seed(args: argparse.Namespace) -> dict[str, Any]:
    """A cluster of ``--nodes`` 8-GPU nodes, two teams of quota ``--quota`` that may borrow
    without limit, and ``--jobs`` pending jobs of ``--gpus`` GPUs alternating between them."""
    from django.utils import timezone

    from allocations import models as m

    for model in (
        m.JobEvent,
        m.Job,
        m.SimulatedJob,
        m.CycleRun,
        m.Node,
        m.TeamQuota,
        m.Team,
        m.PriorityClass,
        m.ClusterPolicy,
        m.Cluster,
        m.InstanceType,
    ):
        model.objects.all().delete()
    cluster = m.Cluster.objects.create(pk=1, name="harness", backend_settings={"speedup": args.speedup})
    m.ClusterPolicy.objects.create(cluster=cluster)
    kind = m.InstanceType.objects.create(name="ml.p5.48xlarge", gpus_per_node=8)
    now = timezone.now()
    for index in range(args.nodes):
        m.Node.objects.create(name=f"node-{index:02d}", instance_type=kind, gpus=8, state_since=now)
    training = m.PriorityClass.objects.create(name="training", weight=70)
    teams = []
    for name in ("team-a", "team-b"):
        team = m.Team.objects.create(name=name)
        m.TeamQuota.objects.create(
            team=team, instance_type=kind, quota=args.quota, borrow_limit_kind="unlimited"
        )
        teams.append(team)
    for index in range(args.jobs):
        m.Job.objects.create(
            team=teams[index % 2 if args.both_teams else 0],
            name=f"job-{index}",
            instance_type=kind,
            gpus=args.gpus,
            priority_class=training,
            requested_duration=3600 * (1 + index % 3),
            submitted_at=now + timedelta(microseconds=index),
        )
    return {"jobs": args.jobs}


def _seed_more(args: argparse.Namespace) -> dict[str, Any]:
    """Add ``--jobs`` pending jobs of ``--gpus`` GPUs for ``--team`` to a seeded installation."""
    from django.utils import timezone

    from allocations import models as m

    team = m.Team.objects.get(name=args.team)
    kind = m.InstanceType.objects.get()
    now = timezone.now()
    for index in range(args.jobs):
        m.Job.objects.create(
            team=team,
            name=f"{args.team}-more-{index}",
            instance_type=kind,
            gpus=args.gpus,
            priority_class=m.PriorityClass.objects.get(name="training"),
            requested_duration=3600,
            submitted_at=now + timedelta(microseconds=index),
        )
    return {"jobs": args.jobs}


def _cycle(args: argparse.Namespace) -> dict[str, Any]:
    """Run cycles until ``--until`` (Unix time), starting at ``--at``; one cycle without them."""
    from django.db import connection

    from allocations.services.loop import run_allocation_cycle

    if args.at:
        time.sleep(max(0.0, args.at - time.time()))
    runs: list[int | None] = []
    while True:
        run = run_allocation_cycle(trigger=args.trigger)
        runs.append(None if run is None else run.pk)
        if not args.until or time.time() >= args.until:
            break
        time.sleep(0.05)
    connection.close()
    return {"runs": runs}


def _request(args: argparse.Namespace) -> dict[str, Any]:
    """``request_cycle()`` as a write service calls it, on the queue a test worker listens to."""
    from django.core.cache import cache

    from allocations import tasks
    from allocations.services import cycle_requests
    from gpugov_site.celery import app

    if args.queue:
        app.conf.task_default_queue = args.queue
    cache.delete_many([cycle_requests.REQUEST_DEBOUNCE_KEY, tasks.BACKOFF_KEY])
    return {"queued": cycle_requests.request_cycle(), "again": cycle_requests.request_cycle()}


def _cancel(args: argparse.Namespace) -> dict[str, Any]:
    """Cancel a job through the self-service ``job_cancel``, as a user would."""
    from allocations.models import Job
    from allocations.services.jobs import job_cancel

    job = job_cancel(user=None, job=Job.objects.get(name=args.name))
    return {"pk": job.pk, "state": job.state}


def _whatif(args: argparse.Namespace) -> dict[str, Any]:
    """The demo cluster with ``--days`` of history, and a what-if run over that window (the
    live policy and a draft lending whole quotas), queued on ``--queue``."""
    from django.core.management import call_command
    from django.utils import timezone

    from allocations.models import WhatIfRun
    from allocations.whatif import drafts
    from allocations.whatif.tasks import run_whatif

    with contextlib.redirect_stdout(sys.stderr):  # stdout is for the one JSON document
        call_command("load_demo", "--history-days", str(args.days), stdout=sys.stderr)
    live = drafts.live_body()
    draft = {**live, "teams": [
        {**t, "quotas": [{**q, "lend_limit": None} for q in t["quotas"]]} for t in live["teams"]
    ]}  # fmt: skip
    end = timezone.now().replace(second=0, microsecond=0)
    run = WhatIfRun.objects.create(
        window_start=end - timedelta(days=args.days),
        window_end=end,
        policies=[
            {"key": "live", "name": "live", "body": live},
            {"key": "draft-1", "name": "lend all", "body": draft},
        ],
    )
    run_whatif.apply_async(args=[run.pk], queue=args.queue)
    return {"pk": run.pk}


def _whatif_report(args: argparse.Namespace) -> dict[str, Any]:
    from allocations.models import WhatIfRun

    run = WhatIfRun.objects.get(pk=args.pk)
    return {
        "state": run.state,
        "progress": run.progress,
        "message": run.progress_message,
        "error": run.error,
        "policies": [p["name"] for p in run.results.get("policies", [])],
        "jobs": run.results.get("jobs"),
    }


def _report(args: argparse.Namespace) -> dict[str, Any]:
    from allocations import models as m

    events: dict[int, list[str]] = {}
    for job_id, kind in m.JobEvent.objects.order_by("at", "id").values_list("job_id", "kind"):
        events.setdefault(job_id, []).append(kind)
    return {
        "jobs": [
            {"pk": pk, "state": state, "nodes": nodes, "events": events.get(pk, [])}
            for pk, state, nodes in m.Job.objects.order_by("pk").values_list("pk", "state", "nodes")
        ],
        "backend": {
            job_id: {"state": state, "nodes": nodes}
            for job_id, state, nodes in m.SimulatedJob.objects.values_list("job_id", "state", "nodes")
        },
        "runs": list(
            m.CycleRun.objects.order_by("id").values(
                "trigger", "ok", "started", "preempted", "corrections", "notes"
            )
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    seed = commands.add_parser("seed")
    seed.add_argument("--nodes", type=int, default=2)
    seed.add_argument("--jobs", type=int, default=4)
    seed.add_argument("--gpus", type=int, default=4)
    seed.add_argument("--quota", type=int, default=8)
    seed.add_argument("--speedup", type=float, default=1.0)
    seed.add_argument("--both-teams", action="store_true")
    more = commands.add_parser("seed-more")
    more.add_argument("--team", required=True)
    more.add_argument("--jobs", type=int, default=1)
    more.add_argument("--gpus", type=int, default=4)
    cycle = commands.add_parser("cycle")
    cycle.add_argument("--trigger", default="harness")
    cycle.add_argument("--at", type=float, default=0.0)
    cycle.add_argument("--until", type=float, default=0.0)
    request = commands.add_parser("request")
    request.add_argument("--queue", default="")
    cancel = commands.add_parser("cancel")
    cancel.add_argument("--name", required=True)
    commands.add_parser("report")
    whatif = commands.add_parser("whatif")
    whatif.add_argument("--queue", required=True)
    whatif.add_argument("--days", type=int, default=2)
    whatif_report = commands.add_parser("whatif-report")
    whatif_report.add_argument("--pk", type=int, required=True)
    args = parser.parse_args()

    import django

    django.setup()
    handler = {
        "seed": _seed,
        "seed-more": _seed_more,
        "cycle": _cycle,
        "cancel": _cancel,
        "request": _request,
        "report": _report,
        "whatif": _whatif,
        "whatif-report": _whatif_report,
    }[args.command]
    print(json.dumps(handler(args), default=str))


if __name__ == "__main__":
    main()
