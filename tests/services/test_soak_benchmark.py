"""``benchmarks/soak.py`` runs end to end on a small history: the script whose figures
docs/operations.md gives stays runnable (its times are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_the_soak_benchmark_runs_on_a_small_history() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/soak.py", "--max-ended", "1500", "--cycles", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "demo cluster (" in out and "warm-up cycles" in out
    # The first size and the last one, each with every phase beside the first size's figure.
    assert "1,000 ended jobs written" in out and "1,500 ended jobs written" in out
    for phase in ("sync", "snapshot", "engine", "apply", "record", "cycle", "history sample"):
        assert out.count(f"\n  {phase} ") == 2, phase
    assert "a cycle's error" not in out
    assert "target: every phase within 1.5x of its figure at 1,000 ended jobs" in out
