"""Every scenario example, the shared contract's and the project's own, ends as its ``expect:``
block says (SCENARIO.md: running exact, pending codes, preempted exhaustive with the reason and
preemptor of the last preemption, rejected codes). New example files count at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocations.simulation import load_scenario, replay
from tests.conftest import REPO, SHARED, require_shared

SHARED_EXAMPLES = SHARED / "spec" / "examples"
OWN_EXAMPLES = REPO / "docs" / "examples"


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in {".yaml", ".yml", ".json"})


# Without ../shared one placeholder stands for the shared examples, so the test skips (or
# fails in CI) saying why instead of silently testing nothing.
EXAMPLES = [
    *(_files(SHARED_EXAMPLES) if SHARED_EXAMPLES.exists() else [SHARED_EXAMPLES]),
    *_files(OWN_EXAMPLES),
]


def _id(path: Path) -> str:
    return f"{'shared' if path.is_relative_to(SHARED) else 'docs'}/{path.name}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[_id(p) for p in EXAMPLES])
def test_example_ends_as_its_expect_block_says(path: Path) -> None:
    if path.is_relative_to(SHARED):
        require_shared("spec/examples")
    scenario = load_scenario(path)
    expect = scenario.expect
    assert expect is not None, f"{path.name} has no expect: block"
    result = replay(scenario, until=expect.until)
    states = {job_id: job.state for job_id, job in result.jobs.items()}
    seen = {
        job_id: (job.state, job.pending_reason.code.value if job.pending_reason else None)
        for job_id, job in result.jobs.items()
    }

    if expect.running is not None:
        running = sorted(j for j, s in states.items() if s == "running")
        assert running == sorted(expect.running), f"running: {seen}"
    for job_id, code in expect.pending.items():
        assert seen.get(job_id) == ("pending", code), f"{job_id} should be pending with {code}: {seen}"
    if expect.preempted is not None:
        preempted = {
            job_id: (job.preempted[-1].reason, job.preempted[-1].by)
            for job_id, job in result.jobs.items()
            if job.preempted
        }
        assert preempted == dict(expect.preempted)
    for job_id, code in expect.rejected.items():
        assert seen.get(job_id) == ("rejected", code), f"{job_id} should be rejected with {code}: {seen}"
