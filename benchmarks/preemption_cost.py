"""What preemption costs, and what a minimum runtime and checkpoints save (docs/preemption.md 8).

    .venv/bin/python benchmarks/preemption_cost.py [--jobs 10000] [--days 3] [--load 0.85]
        [--trace ../shared/traces/philly-mix1.csv] [--skip-trace] [--skip-history]

Two histories, each replayed in one run under today's policy and under the same policy with
the settings of docs/preemption.md:

- **Philly MIX1 under fair share**: the public trace (``benchmarks/trace_replay.py``'s cluster,
  teams and ``fair-share`` policy); skipped when ../shared/traces is absent.
- **The what-if benchmark's history** (``benchmarks/whatif.py``'s generator: 1,024 GPUs, 50
  teams with half their quota lendable, three priority classes), at 85% of the capacity asked
  by default, replayed under the live policy as the what-if lab builds it.

Settings, beside ``today`` (every new setting 0):

- ``min10+ckpt30``: a minimum runtime of 10 minutes, and a checkpoint every 30 minutes for
  every job longer than an hour;
- ``min10``: the minimum runtime alone; ``ckpt30``: the checkpoints alone;
- ``min10+ckpt10all``: the minimum runtime and a checkpoint every 10 minutes for every job
  (a checkpoint falls where each protection ends).

Per history and setting it prints preemptions (by reason), lost GPU-hours, utilization,
GPU-hours idle while jobs waited, the share of victims that had run less than 10 minutes, the
victims taken in the instant they started and those started while their preemptor already
waited, and the mean and p95 wait per priority class; then the issue's targets, compared. Wall
times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from allocations.engine.session import Session  # noqa: E402
from allocations.simulation import parse_scenario, replay  # noqa: E402
from allocations.simulation.result import Result, percentile  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
MIN_RUNTIME_S = 600
CHECKPOINT_S = 1800
LONG_JOB_S = 3600  # jobs longer than this checkpoint
# Each setting: (minimum runtime, checkpoint interval, whether only jobs longer than an hour
# checkpoint), in seconds.
COSTS: dict[str, tuple[int, int, bool]] = {
    "today": (0, 0, True),
    "min10+ckpt30": (MIN_RUNTIME_S, CHECKPOINT_S, True),
    "min10": (MIN_RUNTIME_S, 0, True),
    "ckpt30": (0, CHECKPOINT_S, True),
    "min10+ckpt10all": (MIN_RUNTIME_S, 600, False),
}
SETTINGS = tuple(COSTS)
NO_CLASS = "(none)"


def with_costs(data: dict[str, Any], setting: str) -> dict[str, Any]:
    """The scenario ``data`` under ``setting``: a minimum runtime on its policy, checkpoints on
    its jobs, or its long ones (a file's ``jobs``; a trace's are marked in its CSV,
    ``marked_trace``)."""
    min_runtime, interval, long_only = COSTS[setting]
    data = {**data, "policy": dict(data.get("policy") or {})}
    if min_runtime:
        data["policy"]["min_runtime_s"] = min_runtime
    if interval and "jobs" in data:
        # A job without a duration runs until the end: long.
        data["jobs"] = [
            {**job, "checkpoint_interval_s": interval} if not long_only or _long(job.get("duration")) else job
            for job in data["jobs"]
        ]
    return data


def _long(duration: float | None) -> bool:
    return duration is None or duration > LONG_JOB_S


def waits_by_class(result: Result) -> dict[str, list[float]]:
    """Every wait (submit or requeue to start) of the jobs that started, by priority class."""
    out: dict[str, list[float]] = {}
    for job in result.jobs.values():
        if not job.admitted_at:
            continue
        requeues = sorted([p.at for p in job.preempted] + list(job.evicted_at))
        queued, k = job.submit, 0
        for admitted in job.admitted_at:
            while k < len(requeues) and requeues[k] <= admitted:
                queued = max(queued, requeues[k])
                k += 1
            out.setdefault(job.priority or NO_CLASS, []).append(max(0.0, admitted - queued))
    return out


def victim_runs(result: Result) -> tuple[int, int, int]:
    """Of the preemptions: how many took a victim in the instant it started (a later cycle at
    the same time), and how many a victim started while its preemptor already waited (what a
    preemptor holding its place could have saved at most); and the preemptions counted. A
    job's runs alternate with its ends, so its k-th preemption or eviction, in time order,
    ends its k-th start."""
    same_instant = started_after = total = 0
    jobs = result.jobs
    for job in jobs.values():
        ends = sorted([(p.at, p.by) for p in job.preempted] + [(at, "") for at in job.evicted_at])
        for (at, by), started in zip(ends, job.admitted_at, strict=False):
            if not by:
                continue  # an eviction: its node went down
            total += 1
            same_instant += started == at
            preemptor = jobs.get(by)
            if preemptor is None:
                continue
            queued = max([preemptor.submit] + [p.at for p in preemptor.preempted if p.at <= at])
            started_after += started >= queued
    return same_instant, started_after, total


def by_reason(result: Result) -> str:
    """The preemptions by reason, most first: "fair-share 4,237, reclaim 1,472"."""
    counts: dict[str, int] = {}
    for job in result.jobs.values():
        for p in job.preempted:
            counts[p.reason] = counts.get(p.reason, 0) + 1
    return ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def measure(name: str, build: Callable[[str], Any], settings: Iterable[str]) -> list[dict[str, Any]]:
    """Each setting's replay of one history: its figures, one row each."""
    rows = []
    for setting in settings:
        scenario = build(setting)
        started = time.perf_counter()
        result = replay(scenario, allocate=Session())
        wall = time.perf_counter() - started
        c = result.cluster
        rows.append(
            {
                "history": name,
                "setting": setting,
                "jobs": len(scenario.jobs),
                "preemptions": c.preemptions,
                "lost": c.lost_gpu_hours,
                "utilization": c.utilization,
                # Work redone after a preemption counts as allocated; useful = allocated - lost.
                "useful": (c.allocated_gpu_hours - c.lost_gpu_hours) / c.capacity_gpu_hours
                if c.capacity_gpu_hours
                else 0.0,
                "idle_waiting": c.idle_while_waiting_gpu_hours,
                "short": c.short_victims_share,
                "runs": victim_runs(result),
                "reasons": by_reason(result),
                "per_job": c.preemptions_per_job,
                "waits": {k: (sum(v) / len(v), percentile(v, 95)) for k, v in waits_by_class(result).items()},
                "wall": wall,
            }
        )
        print(f"  {name} {setting}: replayed in {wall:.1f} s", file=sys.stderr, flush=True)
    return rows


# -- Philly MIX1 -------------------------------------------------------------------------------


def marked_trace(trace: Path, out: Path, interval: int = CHECKPOINT_S, long_only: bool = True) -> Path:
    """The trace with a ``checkpoint_interval_s`` column: ``interval`` for every job, or only
    for those longer than an hour."""
    with trace.open(newline="") as src, out.open("w", newline="") as dst:
        reader = csv.reader(src)
        writer = csv.writer(dst)
        header = next(reader)
        at = header.index("duration")
        writer.writerow([*header, "checkpoint_interval_s"])
        for row in reader:
            try:
                long_job = float(row[at]) > LONG_JOB_S
            except (ValueError, IndexError):
                long_job = False
            writer.writerow([*row, interval if long_job or not long_only else ""])
    return out


def philly(trace: Path, vc_nodes: Path, tmp: Path, settings: list[str]) -> list[dict[str, Any]]:
    import trace_replay

    quotas = trace_replay.vc_quotas(vc_nodes)

    def build(setting: str) -> Any:
        _, interval, long_only = COSTS[setting]
        source = trace
        if interval:
            out = tmp / f"philly-mix1-checkpoints-{interval}-{'long' if long_only else 'all'}.csv"
            source = marked_trace(trace, out, interval, long_only)
        data = with_costs(trace_replay.scenario_data("fair-share", source, quotas), setting)
        if interval:
            data["jobs_csv"]["columns"]["checkpoint_interval_s"] = "checkpoint_interval_s"
        return parse_scenario(data, base_dir=source.parent, name=f"philly-{setting}")

    return measure("philly-mix1 fair-share", build, settings)


# -- the what-if history -----------------------------------------------------------------------


def whatif_history(
    jobs: int, teams: int, days: int, load: float, step: int, tmp: Path, settings: list[str]
) -> list[dict[str, Any]]:
    import whatif

    whatif.setup_django(tmp / "preemption-cost.sqlite3")
    window_start, window_end = whatif.write_history(jobs, teams, days, 1, load)
    from allocations.whatif import drafts, history, runs

    built = history.build(window_start, window_end, step=step)
    policies = [{"key": "live", "name": "live", "body": drafts.live_body()}]
    data = runs.scenario_data(built.data, policies, "live")

    def build(setting: str) -> Any:
        return parse_scenario(with_costs(data, setting), keep_unfit=True, name=f"whatif-{setting}")

    return measure(f"what-if {100 * load:.0f}%", build, settings)


# -- output ------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    classes = sorted({k for r in rows for k in r["waits"]})
    head = (
        "| history | setting | preemptions | by reason | per job | lost GPU-h | utilization | useful utilization "
        "| idle while waiting GPU-h "
        "| victims < 10 min | victims of the instant they started | victims started while their preemptor waited | "
        + " | ".join(f"wait {c} mean / p95" for c in classes)
        + " |"
    )
    lines = [head, "|---|---|---:|---|" + "---:|" * (8 + len(classes))]
    for r in rows:
        waits = " | ".join(
            f"{r['waits'][c][0] / 60:.1f} / {r['waits'][c][1] / 60:.1f} min" if c in r["waits"] else "-"
            for c in classes
        )
        lines.append(
            f"| {r['history']} | {r['setting']} | {r['preemptions']:,} | {r['reasons']} | {r['per_job']:.2f} | {r['lost']:,.1f} "
            f"| {100 * r['utilization']:.1f}% | {100 * r['useful']:.1f}% | {r['idle_waiting']:,.1f} | {100 * r['short']:.0f}% "
            f"| {_share(r['runs'][0], r['runs'][2])} | {_share(r['runs'][1], r['runs'][2])} | {waits} |"
        )
    return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"{part:,} ({100 * part / whole:.0f}%)" if whole else "0"


def targets(rows: list[dict[str, Any]], top_class: str | None) -> list[str]:
    """The issue's targets, for ``min10+ckpt30`` (the issue's setting) and each other setting
    with a minimum runtime, against ``today``, per history."""
    out = []
    for name in dict.fromkeys(r["history"] for r in rows):
        by = {r["setting"]: r for r in rows if r["history"] == name}
        for setting in by:
            if "today" in by and COSTS[setting][0]:
                out.append(_targets(f"{name} {setting}", by["today"], by[setting], top_class))
    return out


def _targets(name: str, today: dict[str, Any], new: dict[str, Any], top_class: str | None) -> str:
    def share(key: str) -> str:
        return f"{new[key] / today[key]:.2f}" if today[key] else "-"

    gap = 100 * (new["utilization"] - today["utilization"])
    useful = 100 * (new["useful"] - today["useful"])
    line = (
        f"{name}: preemptions x{share('preemptions')}, lost GPU-h x{share('lost')} (target <= 0.25 each); "
        f"utilization {gap:+.2f} points (target within 1), useful utilization {useful:+.2f} points"
    )
    cls = top_class if top_class in today["waits"] else NO_CLASS
    if cls in today["waits"] and cls in new["waits"]:
        more = (new["waits"][cls][1] - today["waits"][cls][1]) / 60
        line += f"; {cls} p95 wait {more:+.1f} min (target <= +{MIN_RUNTIME_S / 60:.0f})"
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACES / "philly-mix1.csv")
    parser.add_argument("--vc-nodes", type=Path, default=TRACES / "philly-vc-nodes.csv")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs of the what-if history")
    parser.add_argument("--teams", type=int, default=50)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--load", type=float, default=0.85, help="GPU-hours asked as a share of capacity")
    parser.add_argument("--step", type=int, default=60, help="time resolution of the what-if scenario, s")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--skip-trace", action="store_true")
    parser.add_argument("--skip-history", action="store_true")
    args = parser.parse_args()
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        parser.error(f"--settings: unknown {', '.join(unknown)} (choose from {', '.join(SETTINGS)})")
    from allocations.engine import BUILD

    print(f"engine build: {BUILD} (GPUGOV_ENGINE=interpreted or compiled chooses)", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.skip_trace:
            pass
        elif not args.trace.exists():
            print(
                f"{args.trace} not found (the shared traces, ../shared/traces): Philly skipped",
                file=sys.stderr,
            )
        else:
            rows += philly(args.trace.resolve(), args.vc_nodes.resolve(), Path(tmp), settings)
        if not args.skip_history:
            rows += whatif_history(
                args.jobs, args.teams, args.days, args.load, args.step, Path(tmp), settings
            )
    print(table(rows))
    print()
    for line in targets(rows, "inference"):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
