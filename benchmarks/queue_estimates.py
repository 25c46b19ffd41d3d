"""How long the queue page's start estimates take (allocations/selectors/estimates.py).

Prints, for 10, 100 and 1,000 pending jobs on a 32-GPU cluster of four teams: one engine cycle
(the baseline, measured in the same run), the whole forward simulation without a time budget,
and how many pending jobs got an estimate within the page's budget (``BUDGET_S``).

    .venv/bin/python benchmarks/queue_estimates.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpugov_site.settings.base")

import django

django.setup()

from allocations import engine  # noqa: E402
from allocations.engine import allocate  # noqa: E402
from allocations.selectors.estimates import BUDGET_S, MAX_STEPS, forecast_starts  # noqa: E402


def snapshot(pending: int) -> tuple[engine.Snapshot, dict[str, float | None]]:
    nodes = tuple(engine.Node(name=f"n{i}", instance_type="p5", gpus=8) for i in range(4))
    teams = tuple(engine.Team(f"team-{i}", quotas={"p5": engine.Quota(quota=8)}) for i in range(4))
    jobs = tuple(engine.Job(str(i), f"team-{i % 4}", "p5", 1, submit_time=i, seq=i) for i in range(pending))
    durations: dict[str, float | None] = {str(i): 600.0 + (i % 7) * 60 for i in range(pending)}
    return engine.Snapshot(
        (engine.InstanceType("p5", 8),), nodes, teams, engine.ClusterPolicy(), jobs
    ), durations


def main() -> None:
    print(f"{'pending':>8} {'1 cycle (baseline)':>19} {'full forecast':>14} {'estimated in budget':>20}")
    for pending in (10, 100, 1000):
        snap, durations = snapshot(pending)
        started = time.perf_counter()
        allocate(snap, 0.0)
        one_cycle = time.perf_counter() - started
        started = time.perf_counter()
        forecast_starts(snap, 0.0, durations, allocate, budget_s=3600, max_steps=MAX_STEPS)
        full = time.perf_counter() - started
        within = forecast_starts(snap, 0.0, durations, allocate)
        known = sum(value is not None for value in within.values())
        print(
            f"{pending:>8} {one_cycle * 1000:>16.1f} ms {full:>12.2f} s {known:>9} of {pending} ({BUDGET_S} s)"
        )


if __name__ == "__main__":
    main()
