"""``benchmarks/preemption_cost.py`` runs end to end on a small what-if history: the script whose
figures docs/preemption.md section 8 gives stays runnable (its times are printed, never
asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import REPO


# Long: migrates a throw-away SQLite database, writes a history and replays it four times.
def test_the_preemption_cost_benchmark_runs_on_a_small_history() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/preemption_cost.py",
            "--jobs",
            "300",
            "--teams",
            "5",
            "--days",
            "1",
            "--skip-trace",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for setting in ("today", "min10+ckpt30", "min10", "ckpt30", "min10+ckpt10all"):
        assert f"| what-if 85% | {setting} |" in out
    assert "wait inference mean / p95" in out
    assert "what-if 85% min10+ckpt30: preemptions x" in out and "(target <= 0.25 each)" in out
    assert "what-if 85% min10+ckpt10all: preemptions x" in out


def test_checkpoints_go_to_jobs_longer_than_an_hour_only() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import preemption_cost

    data = {"policy": {}, "jobs": [{"id": "a", "duration": 3600}, {"id": "b", "duration": 3601}, {"id": "c"}]}
    marked = preemption_cost.with_costs(data, "min10+ckpt30")
    assert marked["policy"] == {"min_runtime_s": 600}
    assert [j.get("checkpoint_interval_s") for j in marked["jobs"]] == [None, 1800, 1800]
    assert data["policy"] == {}  # the history itself is left as it was
    every = preemption_cost.with_costs(data, "min10+ckpt10all")
    assert every["policy"] == {"min_runtime_s": 600}
    assert [j.get("checkpoint_interval_s") for j in every["jobs"]] == [600, 600, 600]
    assert "checkpoint_interval_s" not in preemption_cost.with_costs(data, "min10")["jobs"][2]


def test_a_marked_trace_checkpoints_long_jobs_or_every_job(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import preemption_cost

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,duration\n1,60\n2,3601\n3,\n")

    def marks(*args: object) -> list[str]:
        out = preemption_cost.marked_trace(trace, tmp_path / "out.csv", *args)  # type: ignore[arg-type]
        return [line.rsplit(",", 1)[1] for line in out.read_text().splitlines()]

    assert marks() == ["checkpoint_interval_s", "", "1800", ""]
    assert marks(600, False) == ["checkpoint_interval_s", "600", "600", "600"]


def test_victim_runs_pairs_each_preemption_with_the_start_it_ended() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import preemption_cost

    from allocations.simulation.result import JobResult, PreemptionRecord

    def job(
        id: str,
        submit: float,
        admitted: tuple[float, ...],
        preempted: tuple[tuple[float, str], ...] = (),
        evicted: tuple[float, ...] = (),
    ) -> JobResult:
        return JobResult(
            id=id,
            team="a",
            instance_type="t",
            gpus=1,
            priority=None,
            submit=submit,
            state="running",
            admitted_at=admitted,
            preempted=tuple(PreemptionRecord(at, "fair-share", by) for at, by in preempted),
            evicted_at=evicted,
        )

    jobs = {
        # Started at 10 and taken in a later cycle at 10 by p, which waited since 5.
        "v1": job("v1", 0, (10, 40), ((10, "p"),)),
        # Started at 0, taken at 30 by q (submitted at 20), started again at 30 elsewhere: its
        # preemption ends the run of 0, not the one of the same instant.
        "v2": job("v2", 0, (0, 30), ((30, "q"),)),
        # Its node went down at 50 (no preemption), then it started at 60 and was taken at 70
        # by p, which waited only since its own preemption at 65: not started while p waited.
        "v3": job("v3", 0, (0, 60), ((70, "p"),), evicted=(50,)),
        "p": job("p", 5, (10, 70), ((65, "x"),)),
        "q": job("q", 20, (30,)),
    }

    # p's own preemption at 65 by x (not in the result) counts, not its preemptor's wait.
    assert preemption_cost.victim_runs(SimpleNamespace(jobs=jobs)) == (1, 1, 4)
