"""``benchmarks/whatif.py`` runs end to end on a small history: the script whose figures
docs/whatif.md gives stays runnable (its times are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_what_if_benchmark_runs_on_a_small_history() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/whatif.py", "--jobs", "400", "--teams", "5", "--days", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "history written: 400 jobs, 5 teams, 128 nodes, 75% of the capacity asked" in out
    assert out.count("scenario+replay+reasons+figures") == 2  # the live policy and the draft
    assert "what-if run (history + 2 policies" in out and "peak RSS" in out
