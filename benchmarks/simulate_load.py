"""What ``manage.py simulate`` spends around the engine on a 110,000-job trace: loading the
scenario, the cycles of time 0 and writing the ``--json`` result, each beside the floor.

    .venv/bin/python benchmarks/simulate_load.py [--jobs 110000] [--trace ../shared/traces/philly-mix1.csv]
        [--synthetic] [--seed 7]

The trace is the public Philly MIX1 trace (../shared/traces/philly-mix1.csv) tiled to
``--jobs`` rows (each copy with its own ids, after the one before it in time), or, without
../shared or with ``--synthetic``, a trace of the same columns and shape drawn with a fixed
seed. Its submit times are moved before the start, so that every job is submitted at time 0:
the cycles of time 0 see the whole queue and the result holds every job, as a month's backlog
replayed with ``--until 0`` would. The scenario: 352 nodes of 4 GPUs, the Philly virtual
clusters as teams (quota their node count x 4) lending and borrowing without limit under fair
share, the trace's ``best_effort`` column a low priority class.

Measured in one run:

- the floor: ``csv.DictReader`` over the trace and sorting its rows by queue order (submit
  time, then file order), the least any loader of the file does (best of 3);
- load: ``load_scenario`` of the scenario file (parse and validate, "can never fit");
- t=0: ``replay(scenario, until=0)``, the cycles of time 0 until nothing changes (and, of
  that, the time inside the engine's ``allocate``);
- json: writing the result as ``simulate --json OUT`` writes it.

Each is printed in seconds and as a multiple of the floor, and their total against 5x the
floor (the target). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from allocations.engine.session import Session  # noqa: E402
from allocations.engine.snapshot import Plan, Snapshot  # noqa: E402
from allocations.simulation import load_scenario, replay  # noqa: E402
from allocations.simulation.result import write_json  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
INSTANCE_TYPE = "philly.4gpu"
GPUS_PER_NODE = 4
NODES = 352
COLUMNS = (
    "job_id",
    "user",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "duration",
    "interval",
    "expect_time_list",
    "expect_value_list",
    "best_effort",
    "job_type",
)
# The Philly virtual clusters and their node counts (philly-vc-nodes.csv), for a synthetic trace.
VC_NODES = {
    "6214e9": 64,
    "7f04ca": 32,
    "11cb48": 16,
    "b436b2": 64,
    "ee9e8c": 64,
    "e13805": 16,
    "6c71a0": 32,
    "2869ce": 16,
    "ed69ec": 8,
    "103959": 8,
    "0e4a51": 32,
}
# GPUs asked per job in MIX1 (184 rows of 0: real data is messy, the loader skips them).
GPU_WEIGHTS = {1: 28361, 4: 1173, 8: 876, 2: 205, 0: 184, 16: 124, 32: 14, 12: 2, 20: 1}
MODELS = ("vgg16", "resnet50", "mobilenet_v2", "alexnet", "inception_v3", "bert", "lstm")


def _seconds(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def tiled_rows(trace: Path, jobs: int) -> list[list[str]]:
    """``jobs`` rows of ``trace``: copies of it one after the other in time, with new ids."""
    with trace.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        source = list(reader)
    at = {name: header.index(name) for name in ("job_id", "submit_time")}
    span = max(float(row[at["submit_time"]]) for row in source) + 1
    rows: list[list[str]] = []
    copy = 0
    while len(rows) < jobs:
        for row in source[: jobs - len(rows)]:
            row = list(row)
            row[at["job_id"]] = str(copy * len(source) + int(row[at["job_id"]]))
            row[at["submit_time"]] = _seconds(float(row[at["submit_time"]]) + copy * span)
            rows.append(row)
        copy += 1
    if header != list(COLUMNS):
        rows = [[dict(zip(header, row, strict=True))[c] for c in COLUMNS] for row in rows]
    return rows


def synthetic_rows(jobs: int, seed: int) -> list[list[str]]:
    """A trace of MIX1's columns and shape: 11 teams, its GPU sizes, jobs over 5.6 hours."""
    rng = random.Random(seed)
    sizes, weights = list(GPU_WEIGHTS), list(GPU_WEIGHTS.values())
    vcs = list(VC_NODES)
    span = 20_151 * jobs / 30_940  # MIX1's rate of submissions
    rows = []
    for i in range(jobs):
        duration = int(min(4317, 20 + rng.expovariate(1 / 600)))
        rows.append(
            [
                str(i),
                f"vc_{rng.choice(vcs)}",
                str(rng.choices(sizes, weights)[0]),
                str(int(rng.uniform(1, span))),
                str(rng.randint(100, 6000)),
                rng.choice(MODELS),
                str(duration),
                str(rng.randint(1, 20)),
                str(rng.randint(100, 15_000)),
                "10",
                "1" if rng.random() < 0.3 else "0",
                "best" if rng.random() < 0.3 else "strict",
            ]
        )
    return rows


def write_trace(rows: list[list[str]], path: Path) -> None:
    """The rows with their submit times moved so that the last one is at 0 (all submitted)."""
    submit = COLUMNS.index("submit_time")
    last = max(float(row[submit]) for row in rows)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([*row[:submit], _seconds(float(row[submit]) - last), *row[submit + 1 :]])


def scenario_text(trace: Path, vc_nodes: dict[str, int]) -> str:
    """The scenario file (JSON, which is YAML) of the benchmark."""
    import json

    data: dict[str, Any] = {
        "name": "philly-mix1-110k",
        "cluster": {
            "node_pools": [{"instance_type": INSTANCE_TYPE, "count": NODES, "gpus_per_node": GPUS_PER_NODE}]
        },
        "policy": {
            "idle_allocation": "fair-share",
            "priority_classes": [{"name": "normal", "weight": 50}, {"name": "best-effort", "weight": 0}],
        },
        "teams": [
            {
                "name": f"vc-{vc}",
                "quota": {INSTANCE_TYPE: nodes * GPUS_PER_NODE},
                "borrow_limit": "unlimited",
            }
            for vc, nodes in vc_nodes.items()
        ],
        "jobs_csv": {
            "path": trace.name,
            "columns": {
                "id": "job_id",
                "team": "user",
                "gpus": "num_gpu",
                "submit": "submit_time",
                "duration": "duration",
                "priority": "best_effort",
            },
            "priority_values": {"0": "normal", "1": "best-effort"},
        },
    }
    return json.dumps(data, indent=2) + "\n"


def floor(trace: Path) -> float:
    """``csv.DictReader`` over the trace and its rows sorted by queue order, best of 3."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        with trace.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        rows.sort(key=lambda row: float(row["submit_time"]))  # stable: then file order
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=110_000, help="rows of the trace (default 110,000)")
    parser.add_argument("--trace", type=Path, default=TRACES / "philly-mix1.csv")
    parser.add_argument("--synthetic", action="store_true", help="draw the trace even if --trace exists")
    parser.add_argument("--seed", type=int, default=7, help="of the synthetic trace")
    args = parser.parse_args()
    from allocations.engine import BUILD

    vc_nodes = VC_NODES
    if args.synthetic or not args.trace.exists():
        rows = synthetic_rows(args.jobs, args.seed)
        source = f"synthetic (seed {args.seed})"
    else:
        rows = tiled_rows(args.trace, args.jobs)
        source = f"{args.trace.name} tiled"
        nodes_file = args.trace.parent / "philly-vc-nodes.csv"
        if nodes_file.exists():
            with nodes_file.open(newline="") as handle:
                vc_nodes = {row["vc"]: int(row["node num"]) for row in csv.DictReader(handle)}
    with tempfile.TemporaryDirectory(prefix="simulate-load-") as tmp:
        trace = Path(tmp) / "trace.csv"
        write_trace(rows, trace)
        scenario_file = Path(tmp) / "scenario.json"
        scenario_file.write_text(scenario_text(trace, vc_nodes), encoding="utf-8")
        size = trace.stat().st_size
        print(f"trace: {len(rows):,} rows, {size / 1e6:.1f} MB, {source}; engine build: {BUILD}")

        base = floor(trace)
        started = time.perf_counter()
        scenario = load_scenario(scenario_file)
        loaded = time.perf_counter()
        session = Session()
        engine_seconds = 0.0

        def timed_allocate(snapshot: Snapshot, now: float) -> Plan:
            nonlocal engine_seconds
            started = time.perf_counter()
            plan = session(snapshot, now)
            engine_seconds += time.perf_counter() - started
            return plan

        result = replay(scenario, until=0, allocate=timed_allocate)
        cycled = time.perf_counter()
        with (Path(tmp) / "result.json").open("w", encoding="utf-8") as out:
            write_json(result, out)  # as ``simulate --json OUT`` writes it
        written = time.perf_counter()

    phases = [
        ("load (parse + validate)", loaded - started),
        ("cycles of t=0", cycled - loaded),
        ("  of which inside the engine's allocate", engine_seconds),
        ("write --json", written - cycled),
    ]
    skipped = scenario.trace.skipped_total if scenario.trace else 0
    counts = ", ".join(f"{n:,} {state}" for state, n in result.counts.items() if n)
    print(
        f"jobs: {len(scenario.jobs):,} loaded ({skipped:,} rows skipped); at t=0: {counts}; {result.cluster.cycles} cycles"
    )
    print(f"{'floor: csv.DictReader + sort by queue order':<45} {base:7.3f} s   1.0x")
    for label, seconds in phases:
        print(f"{label:<45} {seconds:7.3f} s {seconds / base:5.1f}x")
    total = sum(seconds for label, seconds in phases if not label.startswith(" "))
    print(
        f"{'load + t=0 + json':<45} {total:7.3f} s {total / base:5.1f}x  "
        f"(target: within 5x the floor, {5 * base:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
