"""``benchmarks/preemption_cost.py`` runs end to end on a small what-if history: the script whose
figures docs/preemption.md section 8 gives stays runnable (its times are printed, never
asserted)."""

from __future__ import annotations

import subprocess
import sys

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
    for setting in ("today", "min10+ckpt30", "min10", "ckpt30"):
        assert f"| what-if 85% | {setting} |" in out
    assert "wait inference mean / p95" in out
    assert "what-if 85%: preemptions x" in out and "(target <= 0.25 each)" in out


def test_checkpoints_go_to_jobs_longer_than_an_hour_only() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import preemption_cost

    data = {"policy": {}, "jobs": [{"id": "a", "duration": 3600}, {"id": "b", "duration": 3601}, {"id": "c"}]}
    marked = preemption_cost.with_costs(data, "min10+ckpt30")
    assert marked["policy"] == {"min_runtime_s": 600}
    assert [j.get("checkpoint_interval_s") for j in marked["jobs"]] == [None, 1800, 1800]
    assert data["policy"] == {}  # the history itself is left as it was
