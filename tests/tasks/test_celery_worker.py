"""A REAL Celery worker process runs a requested allocation cycle end to end.

The broker is Redis when REDIS_URL is set (CI), else the filesystem broker inside the throw-away
installation's var/ directory. The worker listens on a queue of its own, so that a worker of
another test run on the same Redis never takes this test's task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.loop_harness import REPO, Harness, installation

pytestmark = pytest.mark.slow
CELERY = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "celery"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with installation(tmp_path_factory.mktemp("worker-var")) as ready:
        yield ready


@contextlib.contextmanager
def celery_worker(
    harness: Harness, log: Path, *pool: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """A worker on a queue of its own (``pool``: its ``-P`` and more, e.g. ``prefork -c 1``)."""
    queue = f"gpugov-test-{uuid.uuid4().hex[:8]}"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(CELERY), "-A", "gpugov_site", "worker", "-P", *pool, "-Q", queue, "--loglevel", "INFO",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=REPO, env={**harness.env, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield queue
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
    print(log.read_text()[-3000:])  # shown when the test fails


@pytest.fixture
def worker(harness: Harness, tmp_path: Path) -> Iterator[str]:
    with celery_worker(harness, tmp_path / "worker.log", "solo") as queue:
        yield queue


def test_worker_runs_a_requested_cycle_end_to_end(harness: Harness, worker: str) -> None:
    harness.run("seed", "--nodes", "2", "--jobs", "3", "--gpus", "4", "--quota", "8")

    # request_cycle() as a write service calls it; a second call in the same second is debounced.
    assert harness.run("request", "--queue", worker) == {"queued": True, "again": False}

    deadline = time.time() + 90
    report = harness.run("report")
    while not report["runs"] and time.time() < deadline:
        time.sleep(1)
        report = harness.run("report")
    assert report["runs"], "the worker ran no cycle within 90 s"
    (run,) = report["runs"]
    assert (run["trigger"], run["ok"], run["started"]) == ("request", True, 3)
    assert {job["state"] for job in report["jobs"]} == {"running"}
    assert all(job["events"] == ["started"] for job in report["jobs"])


def test_a_prefork_worker_replays_a_whatif_runs_policies_in_processes_of_its_own(
    harness: Harness, tmp_path: Path
) -> None:
    """The production pool: a task of a prefork worker runs in a daemonic process, which the
    standard library's multiprocessing forbids to have children; the lab forks its replays with
    billiard, which allows it. Two days of demo history, the live policy and a draft."""
    with celery_worker(
        harness, tmp_path / "prefork.log", "prefork", "-c", "1", env={"WHATIF_PROCESSES": "2"}
    ) as queue:
        pk = harness.run("whatif", "--queue", queue, timeout=300)["pk"]
        deadline = time.time() + 240
        report = harness.run("whatif-report", "--pk", str(pk))
        while report["state"] in ("queued", "running") and time.time() < deadline:
            time.sleep(1)
            report = harness.run("whatif-report", "--pk", str(pk))
    assert report["state"] == "done", report
    assert report["policies"] == ["live", "lend all"] and report["jobs"] > 0
