"""Replay the Philly MIX1 trace under six governance policies and compare them.

    .venv/bin/python benchmarks/trace_replay.py [--trace ../shared/traces/philly-mix1.csv]
        [--policies silos,fcfs,...]

The cluster: 352 nodes x 4 GPUs (1,408 GPUs), one instance type. Each of the 11 virtual
clusters is a team whose quota is its node count in ``philly-vc-nodes.csv`` x 4 GPUs (the
quotas add up to the cluster). Policies:

- ``silos``: every team ``dont-lend``: nobody lends or borrows.
- ``fcfs``: lend and borrow without limit, idle capacity first-come-first-serve.
- ``fair-share``: the same, idle capacity by fair share (weights 1).
- ``fair-share-history``: fair share counting each team's borrowing lately, decayed with a
  half-life of a day, for half of its share (docs/fairness.md).
- ``fair-share-priority``: fair share, and the trace's ``best_effort=1`` jobs in a low priority
  class (weight 0) under the others (weight 50).
- ``pooled``: every quota 0 and unlimited borrowing, first-come-first-serve: one pool, the
  work-conserving bound.

Per policy it prints utilization, GPU-hours idle while jobs waited, mean and p95 wait,
preemptions, GPU-hours lost, the replay's wall time and jobs/s; beside it, as the baseline
measured in the same run, the time spent inside the engine's ``allocate`` and the time to load
the trace. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from allocations.engine.session import Session  # noqa: E402
from allocations.engine.snapshot import Plan, Snapshot  # noqa: E402
from allocations.simulation import parse_scenario, replay  # noqa: E402
from allocations.simulation.scenario import team_name_from_trace  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
INSTANCE_TYPE = "philly.4gpu"
GPUS_PER_NODE = 4
NODES = 352
POLICIES = ("silos", "fcfs", "fair-share", "fair-share-history", "fair-share-priority", "pooled")
# fair-share-history: fairness over time (docs/fairness.md), a half-life of a day at 50%.
HISTORY = {"fair_share_half_life_s": 86400, "fair_share_history_percent": 50}


def vc_quotas(path: Path) -> dict[str, int]:
    """Team name -> quota in GPUs (nodes x 4), from philly-vc-nodes.csv."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {team_name_from_trace(f"vc_{row['vc']}"): int(row["node num"]) * GPUS_PER_NODE for row in rows}


def scenario_data(policy: str, trace: Path, quotas: dict[str, int]) -> dict[str, Any]:
    """The scenario of one policy, as a file would hold it."""
    columns = {
        "id": "job_id",
        "team": "user",
        "gpus": "num_gpu",
        "submit": "submit_time",
        "duration": "duration",
    }
    data: dict[str, Any] = {
        "name": f"philly-mix1-{policy}",
        "cluster": {
            "node_pools": [{"instance_type": INSTANCE_TYPE, "count": NODES, "gpus_per_node": GPUS_PER_NODE}]
        },
        "policy": {
            "idle_allocation": "fair-share" if policy.startswith("fair-share") else "first-come-first-serve"
        },
        "jobs_csv": {"path": str(trace), "columns": columns},
    }
    teams = []
    for name, quota in quotas.items():
        team: dict[str, Any] = {"name": name, "quota": {INSTANCE_TYPE: 0 if policy == "pooled" else quota}}
        if policy == "silos":
            team["sharing"] = "dont-lend"
        else:
            team["borrow_limit"] = "unlimited"
        teams.append(team)
    data["teams"] = teams
    if policy == "fair-share-history":
        data["policy"].update(HISTORY)
    if policy == "fair-share-priority":
        data["policy"]["priority_classes"] = [
            {"name": "normal", "weight": 50},
            {"name": "best-effort", "weight": 0},
        ]
        columns["priority"] = "best_effort"
        data["jobs_csv"]["priority_values"] = {"0": "normal", "1": "best-effort"}
    return data


def run(policy: str, trace: Path, quotas: dict[str, int]) -> dict[str, Any]:
    started = time.perf_counter()
    scenario = parse_scenario(scenario_data(policy, trace, quotas), base_dir=trace.parent, name=policy)
    loaded = time.perf_counter()
    engine_seconds = 0.0
    cycles = 0
    allocate = Session()

    def timed_allocate(snapshot: Snapshot, now: float) -> Plan:
        nonlocal engine_seconds, cycles
        t0 = time.perf_counter()
        plan = allocate(snapshot, now)
        engine_seconds += time.perf_counter() - t0
        cycles += 1
        return plan

    result = replay(scenario, allocate=timed_allocate)
    done = time.perf_counter()
    c = result.cluster
    return {
        "policy": policy,
        "jobs": len(scenario.jobs),
        "skipped": scenario.trace.skipped_total if scenario.trace else 0,
        "utilization": c.utilization,
        "idle_while_waiting": c.idle_while_waiting_gpu_hours,
        "wait_mean": c.wait_mean_s,
        "wait_p95": c.wait_p95_s,
        "preemptions": c.preemptions,
        "lost": c.lost_gpu_hours,
        "end": result.end_time,
        "load_s": loaded - started,
        "replay_s": done - loaded,
        "engine_s": engine_seconds,
        "cycles": cycles,
        "jobs_per_s": len(scenario.jobs) / (done - loaded),
        "allocated": c.allocated_gpu_hours,
        # Work redone after a preemption counts as allocated; useful = allocated - lost.
        "useful_utilization": (c.allocated_gpu_hours - c.lost_gpu_hours) / c.capacity_gpu_hours,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACES / "philly-mix1.csv")
    parser.add_argument("--vc-nodes", type=Path, default=TRACES / "philly-vc-nodes.csv")
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"{args.trace} not found (it is in the shared traces, ../shared/traces)", file=sys.stderr)
        return 2
    from allocations.engine import BUILD

    print(f"engine build: {BUILD} (GPUGOV_ENGINE=interpreted or compiled chooses)", file=sys.stderr)
    quotas = vc_quotas(args.vc_nodes)
    rows = []
    for policy in args.policies.split(","):
        row = run(policy, args.trace.resolve(), quotas)
        rows.append(row)
        print(
            f"{policy}: {row['jobs']} jobs ({row['skipped']} rows skipped), utilization {100 * row['utilization']:.1f}%, "
            f"idle while waiting {row['idle_while_waiting']:.1f} GPU-h, replay {row['replay_s']:.1f} s "
            f"(engine {row['engine_s']:.1f} s, {row['cycles']} cycles; load {row['load_s']:.1f} s)",
            file=sys.stderr,
        )
    print()
    print(
        "| policy | utilization | useful utilization | last job ends | GPU-h idle while jobs waited | mean wait | p95 wait | preemptions | GPU-h lost | replay wall time | jobs/s | engine time (baseline) | load time (baseline) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['policy']} | {100 * r['utilization']:.1f}% | {100 * r['useful_utilization']:.1f}% | "
            f"{r['end'] / 3600:.2f} h | {r['idle_while_waiting']:.1f} | {r['wait_mean']:.0f} s | "
            f"{r['wait_p95']:.0f} s | {r['preemptions']} | {r['lost']:.1f} | {r['replay_s']:.1f} s | {r['jobs_per_s']:,.0f} | "
            f"{r['engine_s']:.1f} s | {r['load_s']:.1f} s |"
        )
    by = {r["policy"]: r for r in rows}
    print()
    if "silos" in by and "fair-share" in by:
        silos, fair = by["silos"]["idle_while_waiting"], by["fair-share"]["idle_while_waiting"]
        cut = 1 - fair / silos if silos else 0.0
        print(
            f"fair-share leaves {100 * cut:.0f}% fewer GPU-hours idle while jobs wait than silos (target >= 40%)"
        )
    if "pooled" in by and "fair-share" in by:
        gap = 100 * (by["pooled"]["utilization"] - by["fair-share"]["utilization"])
        side = "below" if gap >= 0 else "above"
        print(
            f"fair-share utilization is {abs(gap):.2f} points {side} the pooled bound (target: at most 2 below)"
        )
    slowest = max(rows, key=lambda r: r["replay_s"])
    print(f"slowest replay: {slowest['policy']} {slowest['replay_s']:.1f} s (target < 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
