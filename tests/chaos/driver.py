"""The chaos run's driver: a gpugov installation of its own, on the real services, and its checks.

The parent side (``Installation``, ``Client``, the fault functions) runs in the test's process:
it creates a PostgreSQL database of its own (``gpugov_chaos_<hex>``), starts two Celery workers,
beat and gunicorn against it and a Redis database number of its own, submits and cancels jobs
through the API, reads the pages, and injects faults. Everything that reads or writes the
chaos database runs as this module in a child process, with Django set up on that database:

    python -m tests.chaos.driver seed|watch|settle [options]

``seed`` makes the cluster (Slurm backend, 32 GPUs of ml.p5.48xlarge, two teams of quota 16);
``watch`` checks the invariants of POLICY.md section 6 after every recorded cycle until told to
stop; ``settle`` runs cycles until the database and Slurm agree, then checks every job against
Slurm and against its own history. Each prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent.parent
PYTHON = sys.executable
BIN = Path(PYTHON).parent
P5 = "ml.p5.48xlarge"
# A Redis database number of the run's own: its queue and cache keys (the loop's debounce and
# back-off) are shared with no other test or worker on the same Redis.
REDIS_DB = 11
PASSWORD = "chaos-pw-for-tests-only"
REDIS_START = ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379",
               "--save", "", "--appendonly", "no"]  # fmt: skip
SLURMCTLD_PID = Path("/run/slurm/slurmctld.pid")
PAUSE_ENV = "GPUGOV_LOOP_PAUSE_BEFORE_APPLY_COMMIT"  # services/loop.py's test hook


# --- the invariants (pure functions of plain rows; tested without services) -------------------


@dataclass(frozen=True)
class QuotaRow:
    """One team's settings on one instance type, as POLICY.md section 1 names them."""

    team: str
    instance_type: str
    quota: int
    sharing: str = "lend-and-borrow"
    lend_limit: int | None = None
    borrow_limit_kind: str = "percent"
    borrow_limit_percent: int = 50
    borrow_limit: int | None = None


def max_use(row: QuotaRow) -> int | None:
    """POLICY.md section 2: quota + borrow limit (None: unlimited); lend/dont-lend: the quota."""
    if row.sharing != "lend-and-borrow":
        return row.quota
    if row.borrow_limit_kind == "unlimited":
        return None
    if row.borrow_limit_kind == "absolute":
        return row.quota + (row.borrow_limit or 0)
    return row.quota + row.quota * row.borrow_limit_percent // 100


def kept(row: QuotaRow) -> int:
    """POLICY.md section 2: the part of the quota that is never lent."""
    if row.sharing == "dont-lend":
        return row.quota
    return row.quota - (row.quota if row.lend_limit is None else min(row.lend_limit, row.quota))


def invariant_violations(
    *,
    nodes: Mapping[str, tuple[str, int]],
    running: Iterable[tuple[int, str, str, int, Sequence[Sequence[Any]]]],
    quotas: Iterable[QuotaRow],
    ready_gpus: Mapping[str, int],
    share_unallocated: bool = True,
) -> list[str]:
    """What breaks invariants 1, 2 and 3 of POLICY.md section 6 in one state of the database.

    ``nodes``: name -> (instance type, GPUs) of every node (ready or draining: a drained node
    keeps the jobs it runs); ``running``: (job, team, instance type, GPUs, [[node, gpus]...]);
    ``ready_gpus``: the ready capacity per instance type (only for the unallocated part of the
    pool). Each violation names the job, node or team and the numbers.
    """
    problems: list[str] = []
    per_node: Counter[str] = Counter()
    usage: Counter[tuple[str, str]] = Counter()
    for pk, team, instance_type, gpus, placed in running:
        usage[(team, instance_type)] += gpus
        if sum(int(g) for _, g in placed) != gpus:
            problems.append(f"inv 1: job {pk} runs {gpus} GPUs but is placed on {placed}")
        for node, node_gpus in placed:
            per_node[str(node)] += int(node_gpus)
            known = nodes.get(str(node))
            if known is None:
                problems.append(f"inv 1: job {pk} runs on unknown node {node}")
            elif known[0] != instance_type:
                problems.append(f"inv 1: job {pk} of {instance_type} runs on {node}, a {known[0]}")
    for node, used in per_node.items():
        if node in nodes and used > nodes[node][1]:
            problems.append(f"inv 1: node {node} holds {used} GPUs of its {nodes[node][1]}")
    by_type: dict[str, list[QuotaRow]] = defaultdict(list)
    for row in quotas:
        by_type[row.instance_type].append(row)
        limit = max_use(row)
        used = usage[(row.team, row.instance_type)]
        if limit is not None and used > limit:
            problems.append(f"inv 2: {row.team} uses {used} GPUs of {row.instance_type}, max_use {limit}")
    for instance_type, rows in by_type.items():
        lendable = sum(row.quota - kept(row) for row in rows)
        unallocated = max(0, ready_gpus.get(instance_type, 0) - sum(row.quota for row in rows))
        pool = lendable + (unallocated if share_unallocated else 0)
        pool_used = sum(max(0, usage[(row.team, instance_type)] - kept(row)) for row in rows)
        if pool_used > pool:
            problems.append(f"inv 3: {instance_type}: borrowers use {pool_used} GPUs of a pool of {pool}")
    return problems


def history_violations(events: Iterable[tuple[int, int, str, int | None, str]]) -> list[str]:
    """Breaks of "no job ran twice at the same time" and of invariant 7, from JobEvents.

    ``events``: (event id, job, kind, preemptor, at as text), in insertion order (id). A job
    starts again only after it stopped (preempted/requeued/ended); and no job is preempted by
    a job that it preempts at the same time (POLICY.md section 6, 7).
    """
    problems: list[str] = []
    running: dict[int, bool] = {}
    preemptions: set[tuple[int, int, str]] = set()
    for event_id, job, kind, preemptor, at in sorted(events):
        if kind == "started":
            if running.get(job):
                problems.append(f"job {job} started again (event {event_id}) while it ran")
            running[job] = True
        elif kind in {"preempted", "requeued", "finished", "failed", "cancelled", "rejected"}:
            running[job] = False
        if kind == "preempted" and preemptor is not None:
            preemptions.add((job, preemptor, at))
    for victim, preemptor, at in sorted(preemptions):
        if (preemptor, victim, at) in preemptions and victim < preemptor:
            problems.append(f"inv 7: jobs {victim} and {preemptor} preempted each other at {at}")
    return problems


def slurm_view_violations(lines: Iterable[str], prefix: str) -> list[str]:
    """From ``squeue -h -o %i|%j|%T``: a gpugov job with two RUNNING Slurm copies at once."""
    copies: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[1].startswith(prefix) and parts[2] == "RUNNING":
            copies[parts[1][len(prefix) :]].append(parts[0])
    return [f"job {job} runs twice in Slurm: {ids}" for job, ids in sorted(copies.items()) if len(ids) > 1]


# --- the parent's side: processes ---------------------------------------------------------------


def _stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, wait_s: float = 20) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


class Installation:
    """One chaos installation: its database, environment, processes and logs."""

    def __init__(self, var_dir: Path, database_url: str, redis_url: str, prefix: str) -> None:
        parts = urlsplit(database_url)
        self.name = f"gpugov_chaos_{uuid.uuid4().hex[:10]}"
        self.admin_url = urlunsplit(parts._replace(path="/postgres"))
        self.database_url = urlunsplit(parts._replace(path=f"/{self.name}"))
        self.var_dir = var_dir
        self.prefix = prefix
        redis = urlsplit(redis_url)
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "gpugov_site.settings.test",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": urlunsplit(redis._replace(path=f"/{REDIS_DB}")),
            "GPUGOV_VAR_DIR": str(var_dir),
            "ALLOCATION_INTERVAL": "2",
            "PYTHONPATH": str(REPO),
            "LOG_LEVEL": "WARNING",
        }
        self.env.pop("CI", None)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.started: dict[str, float] = {}
        self.read_up_to: dict[str, int] = {}
        self.beat: subprocess.Popen[bytes] | None = None
        self.web: subprocess.Popen[bytes] | None = None
        self.port = 0

    # Database ---------------------------------------------------------------------------------

    def create(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        subprocess.run(
            [PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"],
            cwd=REPO,
            env=self.env,
            check=True,
            timeout=300,
        )

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def run(self, *args: str, timeout: float = 300) -> Any:
        """Run one child command to its end; its JSON output (raising with its stderr)."""
        done = subprocess.run(
            [PYTHON, "-m", "tests.chaos.driver", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"driver {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
        return json.loads(done.stdout)

    def popen(
        self, argv: list[str], log_name: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with (self.var_dir / log_name).open("ab") as log:
            return subprocess.Popen(
                argv, cwd=REPO, env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT
            )

    # Processes --------------------------------------------------------------------------------

    def start_worker(self, name: str) -> None:
        """A Celery worker; ``solo`` so that SIGKILL kills the very process running the cycle."""
        self.started[name] = time.monotonic()
        self.workers[name] = self.popen(
            [str(BIN / "celery"), "-A", "gpugov_site", "worker", "-P", "solo", "-n", f"{name}@chaos",
             "--loglevel", "WARNING", "--without-gossip", "--without-mingle"],
            f"{name}.log",
            # Half a second between the backend calls and the database commit (the loop's test
            # hook): the window where a kill leaves the two apart is hit more often.
            {PAUSE_ENV: "0.5"},
        )  # fmt: skip

    def start_beat(self) -> None:
        self.beat = self.popen(
            [str(BIN / "celery"), "-A", "gpugov_site", "beat", "--loglevel", "WARNING",
             "--schedule", str(self.var_dir / "celerybeat-schedule")],
            "beat.log",
        )  # fmt: skip

    def start_web(self, port: int) -> None:
        self.port = port
        self.web = self.popen(
            [str(BIN / "gunicorn"), "gpugov_site.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--threads", "8", "--timeout", "60"],
            "web.log",
        )  # fmt: skip

    def latest_cycle(self) -> int:
        """The newest CycleRun's id, read directly (0 when the database does not answer)."""
        import psycopg

        try:
            with psycopg.connect(self.database_url, connect_timeout=3) as conn:
                row = conn.execute("SELECT max(id) FROM allocations_cyclerun").fetchone()
        except psycopg.Error:
            return 0
        return int(row[0] or 0) if row else 0

    def worker_in_apply(self, limit_s: float) -> str | None:
        """The worker that has just logged the loop's pause between its Slurm calls and its
        database commit (the apply window), waiting up to ``limit_s``; None if none did."""
        deadline = time.monotonic() + limit_s
        # Only what is logged from now on counts.
        self.read_up_to = {name: (self.var_dir / f"{name}.log").stat().st_size for name in self.workers}
        while time.monotonic() < deadline:
            for name in self.workers:
                log = self.var_dir / f"{name}.log"
                text = log.read_bytes()[self.read_up_to[name] :]
                self.read_up_to[name] += len(text)
                if PAUSE_ENV.encode() in text:
                    return name
            time.sleep(0.05)
        return None

    def oldest_worker(self) -> str:
        """The worker started longest ago: the one most likely busy with a cycle (the other
        may still be loading Django after its own restart)."""
        return min(self.workers, key=lambda name: self.started[name])

    def kill_worker(self, name: str) -> None:
        """kill -9, wherever the worker is in its cycle; then start it again."""
        process = self.workers[name]
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        self.start_worker(name)

    def stop_all(self) -> None:
        for process in [*self.workers.values(), self.beat, self.web]:
            _stop(process)

    def logs_tail(self, limit: int = 3000) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-limit:]}"
            for path in sorted(self.var_dir.glob("*.log"))
        )


# --- the parent's side: faults ------------------------------------------------------------------


def wait_until(probe: Any, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.3)
    return False


def quiet(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def redis_up() -> bool:
    return quiet(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "ping"], 10).stdout.strip() == "PONG"


def restart_redis() -> None:
    quiet(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"])
    wait_until(lambda: not redis_up(), 10)
    quiet(REDIS_START)
    if not wait_until(redis_up, 30):
        raise AssertionError("Redis did not come back")


def postgres_up() -> bool:
    return quiet(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], 10).returncode == 0


def postgres_version() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


def restart_postgres() -> None:
    quiet(["pg_ctlcluster", "--skip-systemctl-redirect", postgres_version(), "main", "restart"], 120)
    if not wait_until(postgres_up, 60):
        raise AssertionError("PostgreSQL did not come back")


def slurm_up() -> bool:
    done = quiet(["sinfo", "-h", "-o", "%D"], 20)
    return done.returncode == 0 and bool(done.stdout.strip())


def stop_slurmctld() -> None:
    pid = int(SLURMCTLD_PID.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30)


def start_slurmctld() -> None:
    if not SLURMCTLD_PID.exists() or not Path(f"/proc/{SLURMCTLD_PID.read_text().strip()}").exists():
        quiet(["/usr/sbin/slurmctld"])
    if not wait_until(slurm_up, 60):
        raise AssertionError("slurmctld did not come back")


def drain(node: str) -> None:
    quiet(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=gpugov chaos test"])


def resume(node: str) -> None:
    quiet(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def leaked_gpu_nodes() -> list[str]:
    """Nodes whose GPUs Slurm counts as used beyond what its jobs hold (a Slurm 22.05 leak seen
    after restarting slurmctld; fault 4 in test_faults_found.py), with or without jobs on them."""
    from allocations.backends.slurm import held_gpus, leaked_gpus

    nodes, jobs = quiet(["sinfo", "--json"]), quiet(["squeue", "--json"])
    if nodes.returncode != 0 or jobs.returncode != 0:
        return []
    held = held_gpus(json.loads(jobs.stdout))
    return [
        str(node.get("name")) for node in json.loads(nodes.stdout).get("nodes", []) if leaked_gpus(node, held)
    ]


def cancel_slurm_jobs(prefix: str) -> int:
    done = quiet(["squeue", "-h", "-o", "%i|%j"])
    ids = [
        line.split("|")[0] for line in done.stdout.splitlines() if line.split("|", 1)[-1].startswith(prefix)
    ]
    if ids:
        quiet(["scancel", *ids])
    return len(ids)


# --- the parent's side: the web client -----------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw: answers by (what, status), and the submissions' fates."""

    answers: Counter[str] = field(default_factory=Counter)
    attempted: list[str] = field(default_factory=list)
    accepted: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    unclear: dict[str, str] = field(default_factory=dict)
    # (monotonic time, what, status, start of the body) of every answer that was no answer.
    failures: list[tuple[float, str, int, str]] = field(default_factory=list)
    slurm_samples: int = 0
    slurm_problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str, status: int, body: str = "") -> None:
        with self.lock:
            self.answers[f"{what} {status}"] += 1
            if not 200 <= status < 500:
                self.failures.append((time.monotonic(), what, status, body[:300]))


class Client:
    """HTTP to the chaos installation's gunicorn, with an API token and a session cookie."""

    def __init__(self, port: int, token: str, session: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = token
        self.session = session

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, str]:
        """(status, body); status 0 with the error when no HTTP answer came."""
        headers = {"Accept": "application/json"}
        data = None
        if path.startswith("/api/"):
            headers["Authorization"] = f"Token {self.token}"
        else:
            headers["Cookie"] = f"sessionid={self.session}"
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as exc:
            return 0, str(exc)


def clear_refusal(status: int, body: str) -> bool:
    """A refusal the user can act on: a 4xx or 503 whose body says what is wrong."""
    return (
        (400 <= status < 500 or status == 503)
        and len(body.strip()) > 10
        and "<html" not in body[:200].lower()
    )


def submitter(client: Client, tally: Tally, stop: threading.Event, rng: Any) -> None:
    """Submit a job about every second; now and then cancel one of the accepted ones."""
    serial = 0
    while not stop.is_set():
        if tally.accepted and rng.random() < 0.3:
            pk = rng.choice(sorted(tally.accepted.values()))
            status, text = client.request("POST", f"/api/v1/jobs/{pk}/cancel/", {})
            tally.count("cancel", status, text)
        else:
            serial += 1
            name = f"chaos-{serial}"
            seconds = rng.randint(6, 25)
            body = {
                "team": rng.choice(["team-a", "team-b"]),
                "name": name,
                "instance_type": P5,
                "gpus": rng.choice([4, 8, 8, 16]),
                "priority_class": rng.choice(["training", "experimentation", "inference"]),
                "command": f"sleep {seconds}",
                "requested_duration": seconds,
            }
            with tally.lock:
                tally.attempted.append(name)
            status, text = client.request("POST", "/api/v1/jobs/", body)
            tally.count("submit", status, text)
            with tally.lock:
                if status == 201:
                    tally.accepted[name] = int(json.loads(text)["id"])
                elif clear_refusal(status, text):
                    tally.refused[name] = f"{status} {text[:200]}"
                else:
                    tally.unclear[name] = f"{status} {text[:200]}"
        stop.wait(rng.uniform(0.5, 1.5))


def reader(client: Client, tally: Tally, stop: threading.Event) -> None:
    """Read the team's queue page and the API's job list, over and over."""
    while not stop.is_set():
        for what, path in (("queue page", "/teams/team-a/"), ("api jobs", "/api/v1/jobs/?team=team-b")):
            status, text = client.request("GET", path)
            tally.count(what, status, text)
        stop.wait(0.5)


def slurm_watcher(prefix: str, tally: Tally, stop: threading.Event) -> None:
    """Slurm's own view, every second: no gpugov job runs twice there at once."""
    while not stop.is_set():
        done = quiet(["squeue", "-h", "-o", "%i|%j|%T"], 20)
        if done.returncode == 0:
            problems = slurm_view_violations(done.stdout.splitlines(), prefix)
            with tally.lock:
                tally.slurm_samples += 1
                tally.slurm_problems.extend(problems)
        stop.wait(1.0)


# --- the child's side ------------------------------------------------------------------------------


def _seed(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster on the Slurm backend: node[1-4] (32 GPUs of p5), team-a and team-b of quota 16
    each (may borrow 50 %), team-a keeps 8 of it (lend_limit 8); a user who administers both,
    with an API token and a session for the pages."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from allocations.api.auth import token_create
    from allocations.models import (
        Cluster,
        ClusterPolicy,
        InstanceType,
        Membership,
        PriorityClass,
        Team,
        TeamQuota,
    )

    cluster = Cluster.objects.create(
        pk=1,
        name="chaos",
        backend_kind="slurm",
        backend_settings={
            "job_name_prefix": args.prefix,
            "partition": "gpu",
            "output": "/dev/null",
            # Slurm schedules every 2 s here: a released copy not started in 20 s never will be.
            "start_timeout_s": 20,
        },
    )
    ClusterPolicy.objects.create(cluster=cluster)
    kind = InstanceType.objects.create(name=P5, gpus_per_node=8)
    for name, weight in {"inference": 100, "training": 70, "experimentation": 10}.items():
        PriorityClass.objects.create(name=name, weight=weight)
    user = get_user_model().objects.create_user(username="chaos", password=PASSWORD)
    for name, lend_limit in (("team-a", 8), ("team-b", None)):
        team = Team.objects.create(name=name, display_name=name)
        TeamQuota.objects.create(team=team, instance_type=kind, quota=16, lend_limit=lend_limit)
        Membership.objects.create(user=user, team=team, role="team-admin")
    _, key = token_create(user=user)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    # One cycle learns the nodes from Slurm: until then every submission "could never fit".
    from allocations.services.loop import run_allocation_cycle

    run = run_allocation_cycle(trigger="chaos-seed")
    return {"token": key, "session": session.session_key, "seed_cycle_ok": bool(run and run.ok)}


def _state_violations() -> list[str]:
    """The invariants 1-3 on the database as it is now (one statement per table)."""
    from allocations.models import ClusterPolicy, Job, Node, TeamQuota

    nodes = {
        name: (kind, gpus)
        for name, kind, gpus in Node.objects.values_list("name", "instance_type__name", "gpus")
    }
    ready: Counter[str] = Counter()
    for kind, gpus in Node.objects.filter(state="ready").values_list("instance_type__name", "gpus"):
        ready[kind] += gpus
    running = list(
        Job.objects.filter(state="running").values_list(
            "pk", "team__name", "instance_type__name", "gpus", "nodes"
        )
    )
    quotas = [
        QuotaRow(
            team=row["team__name"],
            instance_type=row["instance_type__name"],
            quota=row["quota"],
            sharing=row["team__sharing"],
            lend_limit=row["lend_limit"],
            borrow_limit_kind=row["borrow_limit_kind"],
            borrow_limit_percent=row["borrow_limit_percent"],
            borrow_limit=row["borrow_limit"],
        )
        for row in TeamQuota.objects.filter(team__active=True).values(
            "team__name",
            "instance_type__name",
            "quota",
            "team__sharing",
            "lend_limit",
            "borrow_limit_kind",
            "borrow_limit_percent",
            "borrow_limit",
        )
    ]
    policy = ClusterPolicy.objects.first()
    return invariant_violations(
        nodes=nodes,
        running=running,
        quotas=quotas,
        ready_gpus=ready,
        share_unallocated=policy.share_unallocated if policy else True,
    )


def _watch(args: argparse.Namespace) -> dict[str, Any]:
    """After every new CycleRun, check the invariants; stop when ``--stop-file`` appears.

    The database restarts under it: a failed query closes the connection and tries again.
    """
    from django.db import connection
    from django.db.utils import Error as DatabaseError

    from allocations.models import CycleRun

    last = 0
    checked = 0
    outages = 0
    problems: list[str] = []
    details: list[dict[str, Any]] = []
    stop_file = Path(args.stop_file)
    while True:
        stopping = stop_file.exists()
        try:
            newest = CycleRun.objects.order_by("-id").values_list("id", flat=True).first() or 0
            if newest > last:
                found = _state_violations()
                problems.extend(f"after cycle {newest}: {p}" for p in found)
                if found and len(details) < 3:
                    details.append(_violation_details(newest))
                checked += 1
                last = newest
        except DatabaseError:
            outages += 1
            connection.close()
        if stopping:
            break
        time.sleep(0.2)
    connection.close()
    return {
        "states_checked": checked,
        "last_cycle": last,
        "database_errors": outages,
        "problems": problems,
        "details": details,
    }


def _violation_details(cycle: int) -> dict[str, Any]:
    """What a failed check needs to be understood afterwards: the running jobs with their
    events, the cycles' corrections and notes, and what Slurm runs at that moment."""
    from allocations.models import CycleRun, Job, JobEvent

    running = list(
        Job.objects.filter(state="running").values("pk", "gpus", "nodes", "started_at", "external_id")
    )
    events = [
        f"{e['at']:%H:%M:%S.%f} job {e['job_id']} {e['kind']} {e['nodes']} {e['message'][:120]}"
        for e in JobEvent.objects.filter(job_id__in=[r["pk"] for r in running])
        .order_by("at", "id")
        .values("at", "job_id", "kind", "nodes", "message")
    ]
    runs = [
        f"cycle {r['id']} {r['started_at']:%H:%M:%S.%f} ok={r['ok']} started={r['started']} "
        f"preempted={r['preempted']} notes={r['notes']} errors={r['errors'][:300]!r}"
        for r in CycleRun.objects.filter(id__gt=cycle - 8, id__lte=cycle)
        .order_by("id")
        .values("id", "started_at", "ok", "started", "preempted", "notes", "errors")
    ]
    try:
        slurm: Any = _squeue()
    except (AssertionError, OSError, ValueError) as exc:
        slurm = f"squeue failed: {exc}"
    return {
        "cycle": cycle,
        "running": [{**r, "started_at": str(r["started_at"])} for r in running],
        "events": events,
        "cycles": runs,
        "slurm": slurm,
    }


def _squeue() -> list[dict[str, Any]]:
    """Slurm's jobs (its own command, not the backend): id, name, state, nodes, GPUs per node."""
    from allocations.backends.slurm import expand_hostlist, gres_gpus

    done = quiet(["squeue", "-h", "-o", "%i|%j|%T|%N|%b"])
    if done.returncode != 0:
        raise AssertionError(f"squeue failed: {done.stderr}")
    jobs = []
    for line in done.stdout.splitlines():
        slurm_id, name, state, nodes, tres = line.split("|", 4)
        jobs.append(
            {
                "id": slurm_id,
                "name": name,
                "state": state,
                "nodes": expand_hostlist(nodes) if state == "RUNNING" else [],
                "gpus_per_node": gres_gpus(tres) if tres != "N/A" else 0,
            }
        )
    return jobs


def _disagreements(prefix: str) -> tuple[list[str], int]:
    """Every gpugov job against Slurm; returns the disagreements and the jobs checked."""
    from allocations.models import Job

    copies: dict[int, list[dict[str, Any]]] = defaultdict(list)
    strangers = []
    for job in _squeue():
        if job["name"].startswith(prefix):
            suffix = job["name"][len(prefix) :]
            if suffix.isdigit():
                copies[int(suffix)].append(job)
            else:
                strangers.append(job["name"])
    problems = [f"Slurm job {name} is no gpugov job" for name in strangers]
    live_states = {"RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD"}
    jobs = {pk: (state, nodes) for pk, state, nodes in Job.objects.values_list("pk", "state", "nodes")}
    for pk in copies.keys() - jobs.keys():
        problems.append(f"Slurm runs job {pk}, which the database does not have")
    for pk, (state, nodes) in jobs.items():
        seen = copies.get(pk, [])
        live = [c for c in seen if c["state"] in live_states]
        running = [c for c in seen if c["state"] == "RUNNING"]
        if len([c for c in live if c["state"] != "COMPLETING"]) > 1:
            problems.append(f"job {pk} has {len(live)} live Slurm copies: {live}")
        if state == "running":
            want = sorted((str(n), int(g)) for n, g in nodes)
            got = sorted((n, c["gpus_per_node"]) for c in running for n in c["nodes"])
            if want != got:
                problems.append(f"job {pk} runs on {want} in the database, on {got} in Slurm ({seen})")
        elif running:
            problems.append(f"job {pk} is {state} in the database but RUNNING in Slurm ({running})")
    return problems, len(jobs)


def _settle(args: argparse.Namespace) -> dict[str, Any]:
    """Run cycles until one corrects nothing and Slurm agrees; then report every check."""
    from django.db.models import Count

    from allocations.models import CycleRun, Job, JobEvent
    from allocations.services.loop import run_allocation_cycle

    disagreements: list[str] = []
    checked = 0
    settle_cycles = 0
    last: list[str] = []
    for _ in range(args.tries):
        run = run_allocation_cycle(trigger="chaos-settle")
        settle_cycles += 1
        if run is None or not run.ok or run.corrections:
            last = ["no cycle: the lock is taken"] if run is None else [*run.notes, *run.errors.splitlines()]
            time.sleep(2)
            continue
        disagreements, checked = _disagreements(args.prefix)
        if not disagreements:
            break
        time.sleep(2)
    else:
        disagreements = disagreements or [f"the loop never settled; its last cycle: {last[:10]}"]
    events = JobEvent.objects.order_by("id").values_list("id", "job_id", "kind", "preemptor_id", "at")
    history = history_violations((i, j, k, p, at.isoformat()) for i, j, k, p, at in events)
    runs = CycleRun.objects.exclude(trigger="chaos-settle")
    errors: Counter[str] = Counter()
    for text in runs.exclude(errors="").values_list("errors", flat=True):
        for line in text.splitlines():
            errors[line[:400]] += 1
    return {
        "settle_cycles": settle_cycles,
        "jobs_checked": checked,
        "disagreements": disagreements,
        "history_problems": history,
        "names": dict(Job.objects.values_list("name").annotate(n=Count("id")).values_list("name", "n")),
        "jobs_by_state": dict(Counter(Job.objects.values_list("state", flat=True))),
        "events_by_kind": dict(Counter(JobEvent.objects.values_list("kind", flat=True))),
        "cycles": runs.count(),
        "cycles_ok": runs.filter(ok=True).count(),
        "cycles_outage": runs.filter(backend_outage=True).count(),
        "started": sum(runs.values_list("started", flat=True)),
        "preempted": sum(runs.values_list("preempted", flat=True)),
        "corrections": sum(runs.values_list("corrections", flat=True)),
        "cycle_errors": dict(errors.most_common(12)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    seed = commands.add_parser("seed")
    seed.add_argument("--prefix", required=True)
    watch = commands.add_parser("watch")
    watch.add_argument("--stop-file", required=True)
    settle = commands.add_parser("settle")
    settle.add_argument("--prefix", required=True)
    settle.add_argument("--tries", type=int, default=15)
    args = parser.parse_args()

    import django

    django.setup()
    handler = {"seed": _seed, "watch": _watch, "settle": _settle}[args.command]
    print(json.dumps(handler(args), default=str))


def iter_schedule(rng: Any, window_s: float, kills: int) -> Iterator[tuple[float, str]]:
    """The fault schedule: ``kills`` worker kills at random moments over the window, and one of
    each other fault at fixed fractions of it (a node drained and returned twice)."""
    fixed = {
        0.15: "restart-redis",
        0.28: "drain node3",
        0.40: "restart-postgres",
        0.50: "resume node3",
        0.60: "stop-slurmctld",
        0.68: "start-slurmctld",
        0.78: "drain node1",
        0.90: "resume node1",
    }
    events = [(window_s * at, what) for at, what in fixed.items()]
    events += [(rng.uniform(0.03, 0.97) * window_s, "kill-worker") for _ in range(kills)]
    yield from sorted(events)


if __name__ == "__main__":
    main()
