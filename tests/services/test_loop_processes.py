"""The loop across REAL processes: racing workers and a worker killed in the middle of a cycle.

Each test drives a throw-away installation (``loop_harness``) on the same kind of database as
the run: PostgreSQL (the advisory lock) when DATABASE_URL names it, else SQLite (the file lock).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from allocations.services.loop import PAUSE_BEFORE_APPLY_COMMIT_ENV
from tests.services.loop_harness import Harness, installation

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with installation(tmp_path_factory.mktemp("loop-var")) as ready:
        yield ready


def assert_every_job_accounted_for_once(report: dict[str, Any]) -> None:
    """The database and the backend agree on every job, no job was started twice in a row,
    and no node holds more than its 8 GPUs."""
    backend = report["backend"]
    per_node: Counter[str] = Counter()
    for job in report["jobs"]:
        seen = backend.get(str(job["pk"]))
        if job["state"] == "running":
            assert seen is not None and seen["state"] == "running", job
            assert seen["nodes"] == job["nodes"], job
            for node, gpus in job["nodes"]:
                per_node[node] += gpus
        elif job["state"] == "pending":
            assert seen is None or seen["state"] == "pending", job
        else:
            assert seen is not None and seen["state"] == job["state"], job
        previous = None
        for kind in job["events"]:
            # A job starts again only after it went back to pending.
            assert not (kind == "started" and previous == "started"), job
            previous = kind
    assert all(gpus <= 8 for gpus in per_node.values()), per_node


def test_racing_workers_never_start_a_job_twice(harness: Harness) -> None:
    # Jobs of 1 to 3 "hours" at a speed-up of 3600 run 1 to 3 s: the race goes on while jobs
    # end and others start. Each cycle holds the lock a little longer than it needs (the test
    # hook pauses it), so the other workers really find it taken.
    harness.run(
        "seed",
        "--nodes",
        "3",
        "--jobs",
        "60",
        "--gpus",
        "2",
        "--quota",
        "8",
        "--speedup",
        "3600",
        "--both-teams",
    )
    at = time.time() + 4  # after every worker has loaded Django
    workers = [
        harness.popen(
            "cycle", "--trigger", f"worker-{index}", "--at", str(at), "--until", str(at + 6),
            extra_env={PAUSE_BEFORE_APPLY_COMMIT_ENV: "0.2"},
        )
        for index in range(4)
    ]  # fmt: skip
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-3000:]
        results.append(json.loads(out)["runs"])

    ran = [run for runs in results for run in runs if run is not None]
    refused = [run for runs in results for run in runs if run is None]
    assert len(ran) >= 2, results
    assert refused, f"no worker ever found the lock taken: the race did not happen ({results})"
    report = harness.run("report")
    assert len(report["runs"]) == len(ran)
    assert all(run["corrections"] == 0 for run in report["runs"]), report["runs"]
    assert sum(run["started"] for run in report["runs"]) == sum(
        job["events"].count("started") for job in report["jobs"]
    )
    assert any(job["state"] == "finished" for job in report["jobs"])
    assert_every_job_accounted_for_once(report)


def paused_cycle(harness: Harness, trigger: str, pause_s: int) -> subprocess.Popen[str]:
    """A cycle in its own process, returned once it pauses after its backend calls."""
    cycle = harness.popen(
        "cycle", "--trigger", trigger, extra_env={PAUSE_BEFORE_APPLY_COMMIT_ENV: str(pause_s)}
    )
    assert cycle.stderr is not None
    deadline = time.time() + 120
    for line in cycle.stderr:
        if PAUSE_BEFORE_APPLY_COMMIT_ENV in line:
            return cycle
        assert time.time() < deadline, "the cycle never reached the pause"
    raise AssertionError(f"the cycle ended before the pause (exit {cycle.wait()})")


def kill_while_paused_before_commit(harness: Harness) -> None:
    """Run a cycle that pauses after its backend calls and SIGKILL it right there."""
    victim = paused_cycle(harness, "doomed", 120)
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    assert victim.returncode == -signal.SIGKILL


def test_a_worker_killed_after_starting_jobs_loses_nothing(harness: Harness) -> None:
    harness.run("seed", "--nodes", "2", "--jobs", "4", "--gpus", "4", "--quota", "8")

    kill_while_paused_before_commit(harness)

    crashed = harness.run("report")
    assert not crashed["runs"]  # the killed cycle recorded nothing...
    assert {job["state"] for job in crashed["jobs"]} == {"pending"}
    assert len(crashed["backend"]) == 4  # ...but the backend runs its jobs

    harness.run("cycle", "--trigger", "after-crash")

    report = harness.run("report")
    (run,) = report["runs"]
    assert run["corrections"] == 4 and run["started"] == 0
    assert all("adopted" in note for note in run["notes"])
    assert {job["state"] for job in report["jobs"]} == {"running"}
    assert all(job["events"] == ["started"] for job in report["jobs"])
    assert_every_job_accounted_for_once(report)


def test_a_worker_killed_after_preempting_and_starting_loses_nothing(harness: Harness) -> None:
    # team-a borrows all of team-b's quota (8 jobs of 2 GPUs on 16 GPUs, quota 8 each)...
    harness.run("seed", "--nodes", "2", "--jobs", "8", "--gpus", "2", "--quota", "8")
    harness.run("cycle", "--trigger", "before")
    # ...then team-b asks for its quota back, and the cycle that reclaims it is killed.
    harness.run("seed-more", "--team", "team-b", "--jobs", "2", "--gpus", "4")

    kill_while_paused_before_commit(harness)

    crashed = harness.run("report")
    assert len(crashed["runs"]) == 1
    preempted_in_backend = [pk for pk, job in crashed["backend"].items() if job["state"] == "pending"]
    assert preempted_in_backend, "the killed cycle should have preempted borrowed jobs"

    harness.run("cycle", "--trigger", "after-crash")

    report = harness.run("report")
    after = report["runs"][-1]
    assert after["corrections"] >= len(preempted_in_backend) + 2
    jobs = {str(job["pk"]): job for job in report["jobs"]}
    for pk in preempted_in_backend:
        assert "requeued" in jobs[pk]["events"], jobs[pk]
    assert_every_job_accounted_for_once(report)
    assert sum(gpus for job in report["jobs"] for _, gpus in job["nodes"]) == 16


def test_a_job_cancelled_while_the_cycle_starts_it_stays_cancelled(harness: Harness) -> None:
    harness.run("seed", "--nodes", "2", "--jobs", "2", "--gpus", "4", "--quota", "8")
    cycle = paused_cycle(harness, "racing-a-cancel", 20)
    # The backend already runs job-0; the user cancels it before the cycle writes that down.
    assert harness.run("cancel", "--name", "job-0")["state"] == "cancelled"
    _out, err = cycle.communicate(timeout=120)
    assert cycle.returncode == 0, err[-3000:]

    report = harness.run("report")
    cancelled = next(job for job in report["jobs"] if job["state"] == "cancelled")
    assert cancelled["events"] == ["cancelled"]  # no "started" written over the cancellation
    assert any("during the cycle" in note for note in report["runs"][-1]["notes"])

    harness.run("cycle", "--trigger", "next")  # stops it in the backend
    report = harness.run("report")
    assert report["backend"][str(cancelled["pk"])]["state"] == "cancelled"
    assert_every_job_accounted_for_once(report)
