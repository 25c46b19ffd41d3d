"""Fixtures of the backend tests: the local Slurm cluster that scripts/slurm-up starts."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from allocations.backends.slurm import SlurmBackend
from tests.conftest import REPO, require_service

SLURM_UP = REPO / "scripts" / "slurm-up"
_serial = itertools.count(1)
T = TypeVar("T")


def slurm(*args: str, timeout: float = 30) -> str:
    """Run a Slurm command directly (the tests' own eyes, independent of the backend)."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"`{' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def slurm_answers() -> bool:
    """Does slurmctld answer with at least one node?"""
    if shutil.which("sinfo") is None:
        return False
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def run_slurm_up() -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """The local Slurm cluster: started with scripts/slurm-up when ``sinfo`` gets no answer."""
    if not slurm_answers() and os.geteuid() == 0 and SLURM_UP.exists():
        run_slurm_up()
    require_service(slurm_answers(), "the local Slurm cluster (scripts/slurm-up, as root)")


def wait_for(probe: Callable[[], T], accept: Callable[[T], bool], what: str, limit_s: float = 30) -> T:
    """Poll ``probe`` until ``accept`` holds; fail naming ``what`` and the last value.

    ``limit_s`` only bounds a broken run: nothing asserts how long Slurm takes.
    """
    deadline = time.monotonic() + limit_s
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}; last seen: {value!r}")
        time.sleep(0.5)


@pytest.fixture
def slurm_backend(slurm_cluster: None) -> Iterator[SlurmBackend]:
    """A SlurmBackend whose jobs carry a name prefix of their own; they are cancelled after."""
    prefix = f"gpugovtest-{os.getpid()}-{next(_serial)}-"
    backend = SlurmBackend(
        {
            "job_name_prefix": prefix,
            "output": "/dev/null",
            "partition": "gpu",
            "teams": {"team-a": {"account": "acct-a"}},
            "account": "{team}",
        }
    )
    yield backend
    if not slurm_answers():
        run_slurm_up()
    lines = slurm("squeue", "-h", "-o", "%i|%j").splitlines()
    ids = [line.split("|")[0] for line in lines if line.split("|", 1)[-1].startswith(prefix)]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)
