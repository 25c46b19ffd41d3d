"""Chaos: the loop on PostgreSQL, Redis, two Celery workers and the local Slurm, under faults.

While a client submits and cancels jobs through the API and reads the pages, the run kills a
worker with SIGKILL 20 times at random moments, restarts Redis, restarts PostgreSQL, stops and
starts slurmctld, and drains and returns nodes. Afterwards: every job is accounted for once
(the database and Slurm agree), no job ran twice at the same time, invariants 1, 2, 3 and 7 of
POLICY.md section 6 held after every cycle, and the web kept answering (every submission the
client saw accepted exists; every other one was refused with a message or is accounted for).

The run prints its figures. It runs after every other test (conftest.py), because the services
it restarts are the ones the whole suite uses; everything is restored in ``finally`` blocks.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos import driver
from tests.chaos.driver import Client, Installation, Tally
from tests.conftest import require_service

pytestmark = [pytest.mark.chaos, pytest.mark.slurm, pytest.mark.slow]
WINDOW_S = float(os.environ.get("GPUGOV_CHAOS_WINDOW_S", "150"))
KILLS = 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_web(client: Client, limit_s: float = 90) -> None:
    if not driver.wait_until(lambda: client.request("GET", "/api/v1/jobs/")[0] == 200, limit_s):
        raise AssertionError("the chaos web server never answered /api/v1/jobs/")


@pytest.fixture
def installation(tmp_path: Path) -> Iterator[Installation]:
    """A fresh installation on the real services, torn down (and the services restored) after."""
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    if not database_url.startswith(("postgres://", "postgresql://")) or not redis_url:
        # Not a missing service: this run is on the embedded default (SQLite, filesystem broker).
        pytest.skip("the chaos run needs DATABASE_URL (PostgreSQL) and REDIS_URL set")
    require_service(driver.postgres_up(), "PostgreSQL at 127.0.0.1:5432")
    require_service(driver.redis_up(), "Redis at 127.0.0.1:6379")
    require_service(os.geteuid() == 0, "root (the run restarts PostgreSQL, Redis and slurmctld)")
    require_service(
        shutil.which("pg_ctlcluster") is not None and Path("/etc/postgresql").is_dir(),
        "pg_ctlcluster (a local PostgreSQL cluster to restart)",
    )
    if not driver.slurm_up() and (driver.REPO / "scripts" / "slurm-up").exists():
        driver.quiet(["bash", str(driver.REPO / "scripts" / "slurm-up")], 300)
    require_service(driver.slurm_up() and driver.SLURMCTLD_PID.exists(), "the local Slurm (scripts/slurm-up)")
    prefix = f"gpugovchaos-{os.getpid()}-"
    chaos = Installation(tmp_path, database_url, redis_url, prefix)
    chaos.create()
    try:
        yield chaos
    finally:
        chaos.stop_all()
        # Restore every service, whatever happened: no node drained, no job left in Slurm.
        if not driver.postgres_up():
            driver.quiet(
                ["pg_ctlcluster", "--skip-systemctl-redirect", driver.postgres_version(), "main", "start"]
            )
            driver.wait_until(driver.postgres_up, 60)
        if not driver.redis_up():
            driver.quiet(driver.REDIS_START)
            driver.wait_until(driver.redis_up, 30)
        driver.start_slurmctld()
        for node in ("node1", "node3"):
            driver.resume(node)
        driver.cancel_slurm_jobs(prefix)
        if driver.leaked_gpu_nodes():
            driver.quiet(["scontrol", "reconfigure"])  # gives back GPUs that Slurm leaked
        chaos.drop()
        from django.db import connections

        connections.close_all()  # the test process's own connections died with the restart


def inject(
    chaos: Installation,
    what: str,
    rng: random.Random,
    faults: dict[str, int],
    log: list[tuple[float, float, str]],
    state: dict[str, int],
) -> None:
    """One fault of the schedule (driver.iter_schedule)."""
    began = time.monotonic()
    if what == "kill-worker":
        state["kills"] = state.get("kills", 0) + 1
        in_apply = chaos.worker_in_apply(6) if state["kills"] % 2 else None
        if in_apply is not None:
            # Every other kill: in the apply window, after Slurm was told and before the
            # database commit, the moment that leaves the two apart.
            chaos.kill_worker(in_apply)
            state["in_apply"] = state.get("in_apply", 0) + 1
        else:
            # At a random moment of the loop's work, not of a worker's start-up: wait (a
            # little) until a cycle has run since the last kill, then a random fraction more.
            driver.wait_until(lambda: chaos.latest_cycle() > state.get("cycle", 0), 8)
            time.sleep(rng.uniform(0, 1.5))
            chaos.kill_worker(chaos.oldest_worker())
        state["cycle"] = chaos.latest_cycle()
    elif what == "restart-redis":
        driver.restart_redis()
    elif what == "restart-postgres":
        driver.restart_postgres()
    elif what == "stop-slurmctld":
        driver.stop_slurmctld()
    elif what == "start-slurmctld":
        driver.start_slurmctld()
    elif what.startswith("drain "):
        driver.drain(what.split()[1])
    elif what.startswith("resume "):
        driver.resume(what.split()[1])
    faults[what.split()[0]] += 1
    log.append((began, time.monotonic(), what))


def test_jobs_survive_killed_workers_and_restarted_services(installation: Installation) -> None:
    chaos = installation
    seed = int(os.environ.get("GPUGOV_CHAOS_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    seeded = chaos.run("seed", "--prefix", chaos.prefix)
    assert seeded["seed_cycle_ok"], "the first cycle could not read the nodes from Slurm"
    stop_file = chaos.var_dir / "watch.stop"
    watcher = chaos.popen(
        [driver.PYTHON, "-m", "tests.chaos.driver", "watch", "--stop-file", str(stop_file)], "watch.out"
    )
    for name in ("worker-1", "worker-2"):
        chaos.start_worker(name)
    chaos.start_beat()
    chaos.start_web(free_port())
    client = Client(chaos.port, seeded["token"], seeded["session"])
    wait_for_web(client)

    tally = Tally()
    stop = threading.Event()
    threads = [
        threading.Thread(target=driver.submitter, args=(client, tally, stop, rng), daemon=True),
        threading.Thread(target=driver.reader, args=(client, tally, stop), daemon=True),
        threading.Thread(target=driver.slurm_watcher, args=(chaos.prefix, tally, stop), daemon=True),
    ]
    faults: dict[str, int] = dict.fromkeys(
        [
            "kill-worker",
            "restart-redis",
            "restart-postgres",
            "stop-slurmctld",
            "start-slurmctld",
            "drain",
            "resume",
        ],
        0,
    )
    fault_log: list[tuple[float, float, str]] = []
    kill_state: dict[str, int] = {}
    began = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        for at, what in driver.iter_schedule(rng, WINDOW_S, KILLS):
            time.sleep(max(0.0, began + at - time.monotonic()))
            inject(chaos, what, rng, faults, fault_log, kill_state)
        time.sleep(max(0.0, began + WINDOW_S - time.monotonic()))
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    # Everything is back: the workers and beat must run cycles again by themselves (the settle
    # step below runs its own, which would hide a loop that stays stuck after the faults).
    driver.start_slurmctld()
    wait_for_web(client)
    last_before = chaos.latest_cycle()
    recovered = driver.wait_until(lambda: chaos.latest_cycle() > last_before, 90)
    chaos.stop_all()
    stop_file.touch()
    watcher.wait(120)
    watched = _json_tail(chaos.var_dir / "watch.out")
    report = chaos.run("settle", "--prefix", chaos.prefix, timeout=600)
    leaked = driver.leaked_gpu_nodes()

    web_errors = len(tally.failures)
    print(
        "\nchaos figures:"
        f"\n  window {WINDOW_S:.0f} s, run {time.monotonic() - began:.0f} s, GPUGOV_CHAOS_SEED={seed}"
        f"\n  faults injected: {faults} ({sum(faults.values())} in all);"
        f" {kill_state.get('in_apply', 0)} kills in the apply window"
        f"\n  jobs: {len(tally.attempted)} submitted, {len(tally.accepted)} accepted, {len(tally.refused)} refused"
        f" with a message, {len(tally.unclear)} without an answer; {report['jobs_checked']} checked against Slurm"
        f"\n  job states: {report['jobs_by_state']}; events: {report['events_by_kind']}"
        f"\n  cycles: {report['cycles']} ({report['cycles_ok']} ok, {report['cycles_outage']} backend outage),"
        f" {report['started']} starts, {report['preempted']} preemptions, {report['corrections']} corrections;"
        f" {report['settle_cycles']} settle cycle(s); the workers ran cycles after the faults: {recovered}"
        f"\n  cycle errors: {report['cycle_errors']}"
        f"\n  nodes whose GPUs Slurm leaked (reported down by the backend): {leaked or 'none'}"
        f"\n  invariants checked after {watched['states_checked']} cycles"
        f" ({watched['database_errors']} reads lost to the outage); {tally.slurm_samples} Slurm samples"
        f"\n  web answers: {dict(sorted(tally.answers.items()))}; {web_errors} errors"
        f"\n  refused: {list(tally.refused.values())[:3]}; unanswered: {list(tally.unclear.values())[:3]}"
    )
    timeline = sorted(
        [(at, f"FAULT {what} ({done - at:.1f} s)") for at, done, what in fault_log if what != "kill-worker"]
        + [(at, f"{what} {status} {body[:160]!r}") for at, what, status, body in tally.failures]
    )
    print("\n".join(f"  {at - began:6.1f} s  {line}" for at, line in timeline))

    assert faults["kill-worker"] == KILLS and all(faults.values()), faults
    assert report["cycles_ok"] > 0 and report["started"] > 0, report
    assert recovered, "no cycle ran after the last fault: the workers or beat did not recover"
    assert watched["states_checked"] > 0, watched
    assert not watched["problems"], (
        watched["problems"][:20],
        json.dumps(watched.get("details", []), indent=1, default=str)[:20000],
    )
    assert not tally.slurm_problems, tally.slurm_problems[:20]
    assert not report["history_problems"], report["history_problems"][:20]
    assert not report["disagreements"], report["disagreements"][:20]
    # Submissions: every accepted one exists once; nothing exists that was not sent; a
    # submission without an answer (the web or the database was restarting) is at most once.
    names = report["names"]
    assert all(names.get(name) == 1 for name in tally.accepted), {n: names.get(n) for n in tally.accepted}
    assert set(names) <= set(tally.attempted), set(names) - set(tally.attempted)
    assert all(names.get(name, 0) <= 1 for name in tally.unclear)
    assert not any(name in names for name in tally.refused), "a refused submission was stored"
    # The web kept answering: reads were served, and every answer was an answer (no 5xx).
    assert tally.answers["queue page 200"] > 0 and tally.answers["api jobs 200"] > 0, tally.answers
    # While PostgreSQL itself is down nothing can be read or stored: those answers are a 503
    # saying so (or, for a request caught in the restart, no answer); outside that window
    # there is no error at all, and a 500 never.
    outage = [(at, done + 2) for at, done, what in fault_log if what == "restart-postgres"]
    unexpected = [
        (round(at - began, 1), what, status, body[:200])
        for at, what, status, body in tally.failures
        if status not in (0, 503) or not any(start <= at <= end for start, end in outage)
    ]
    assert not unexpected, unexpected


def _json_tail(path: Path) -> dict[str, object]:
    """The watcher's JSON report: the last line of its output (its logs come before it)."""
    import json

    lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith("{")]
    assert lines, f"the invariant watcher printed no report:\n{path.read_text()[-3000:]}"
    result: dict[str, object] = json.loads(lines[-1])
    return result
