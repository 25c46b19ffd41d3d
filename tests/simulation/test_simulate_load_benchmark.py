"""``benchmarks/simulate_load.py`` runs end to end on a small trace: the script whose figures
docs/simulation.md gives stays runnable (its times are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "benchmarks/simulate_load.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_benchmark_runs_on_a_small_synthetic_trace() -> None:
    out = run("--jobs", "2000", "--synthetic")
    assert "trace: 2,000 rows" in out and "synthetic (seed 7)" in out
    for phase in ("floor: csv.DictReader", "load (parse + validate)", "cycles of t=0", "write --json"):
        assert phase in out
    assert "load + t=0 + json" in out and "target: within 5x the floor" in out


def test_the_benchmark_tiles_the_public_trace() -> None:
    if not (SHARED / "traces" / "philly-mix1.csv").exists():
        pytest.skip("../shared/traces/philly-mix1.csv is not here")
    out = run("--jobs", "1500")
    assert "trace: 1,500 rows" in out and "philly-mix1.csv tiled" in out
