"""What a replay reports: the ``--json`` result of SCENARIO.md and the summary table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from allocations.engine.snapshot import PendingReason

from .scenario import TraceReport


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    at: float
    reason: str
    by: str


@dataclass(frozen=True, slots=True)
class JobResult:
    id: str
    team: str
    instance_type: str
    gpus: int
    priority: str | None
    submit: float
    state: str  # running, pending, finished, cancelled or rejected
    admitted_at: tuple[float, ...] = ()
    preempted: tuple[PreemptionRecord, ...] = ()
    finished_at: float | None = None
    cancelled_at: float | None = None
    pending_reason: PendingReason | None = None
    # Times its node went down under it (it went back to pending; not a preemption).
    evicted_at: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class TeamResult:
    gpu_hours: float
    borrowed_gpu_hours: float
    lent_gpu_hours: float
    idle_quota_gpu_hours: float
    wait_p50_s: float
    wait_p95_s: float
    preemptions: int
    lost_gpu_hours: float
    starts: int = 0


@dataclass(frozen=True, slots=True)
class ClusterResult:
    capacity_gpu_hours: float
    allocated_gpu_hours: float
    utilization: float
    idle_while_waiting_gpu_hours: float
    wait_mean_s: float
    wait_p95_s: float
    lost_gpu_hours: float
    preemptions: int
    cycles: int
    # Work thrown away when nodes went down under running jobs (not in lost_gpu_hours).
    node_down_lost_gpu_hours: float = 0.0
    starts: int = 0


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    end_time: float
    jobs: Mapping[str, JobResult]
    teams: Mapping[str, TeamResult]
    cluster: ClusterResult
    not_submitted: tuple[str, ...] = ()  # submitted after the end
    trace: TraceReport | None = None
    counts: Mapping[str, int] = field(default_factory=dict)  # jobs by state


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile (a value that occurred), 0 for no values."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _num(value: float, digits: int = 6) -> float | int:
    """Whole numbers as ints (times read like the file), others rounded for reading."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return int(value)
    return round(value, digits)


def to_json(result: Result) -> dict[str, Any]:
    """The ``--json`` result of SCENARIO.md (with a few added keys)."""
    jobs: dict[str, Any] = {}
    for job_id, job in result.jobs.items():
        jobs[job_id] = {
            "team": job.team,
            "gpus": job.gpus,
            "priority": job.priority,
            "state": job.state,
            "admitted_at": [_num(t) for t in job.admitted_at],
            "preempted": [{"at": _num(p.at), "reason": p.reason, "by": p.by} for p in job.preempted],
            "finished_at": None if job.finished_at is None else _num(job.finished_at),
            "pending_reason": None
            if job.pending_reason is None
            else {"code": job.pending_reason.code.value, "message": job.pending_reason.message},
            "instance_type": job.instance_type,
            "submit": _num(job.submit),
            "cancelled_at": None if job.cancelled_at is None else _num(job.cancelled_at),
            "evicted_at": [_num(t) for t in job.evicted_at],
        }
    teams = {
        name: {
            "gpu_hours": _num(t.gpu_hours),
            "borrowed_gpu_hours": _num(t.borrowed_gpu_hours),
            "lent_gpu_hours": _num(t.lent_gpu_hours),
            "idle_quota_gpu_hours": _num(t.idle_quota_gpu_hours),
            "wait_p50_s": _num(t.wait_p50_s, 3),
            "wait_p95_s": _num(t.wait_p95_s, 3),
            "preemptions": t.preemptions,
            "lost_gpu_hours": _num(t.lost_gpu_hours),
            "starts": t.starts,
        }
        for name, t in result.teams.items()
    }
    c = result.cluster
    cluster = {
        "capacity_gpu_hours": _num(c.capacity_gpu_hours),
        "allocated_gpu_hours": _num(c.allocated_gpu_hours),
        "utilization": _num(c.utilization),
        "idle_while_waiting_gpu_hours": _num(c.idle_while_waiting_gpu_hours),
        "wait_mean_s": _num(c.wait_mean_s, 3),
        "wait_p95_s": _num(c.wait_p95_s, 3),
        "lost_gpu_hours": _num(c.lost_gpu_hours),
        "preemptions": c.preemptions,
        "cycles": c.cycles,
        "node_down_lost_gpu_hours": _num(c.node_down_lost_gpu_hours),
        "starts": c.starts,
    }
    out: dict[str, Any] = {
        "name": result.name,
        "end_time": _num(result.end_time),
        "jobs": jobs,
        "teams": teams,
        "cluster": cluster,
        "job_counts": dict(result.counts),
        "not_submitted": list(result.not_submitted),
    }
    if result.trace is not None:
        out["trace"] = {
            "path": result.trace.path,
            "rows": result.trace.rows,
            "used": result.trace.used,
            "skipped": dict(result.trace.skipped),
            "skipped_examples": {k: list(v) for k, v in result.trace.examples.items()},
        }
    return out


def _hours(value: float) -> str:
    """GPU-hours with the decimals that show something: a short what-if is minutes long."""
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 or value == 0 else f"{value:.3f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def summary(result: Result) -> str:
    """A readable table per team and for the cluster."""
    lines = [f"Scenario {result.name}: simulated 0 .. {_num(result.end_time, 1)} s"]
    if result.trace is not None:
        lines.append(f"Trace {result.trace.describe()}")
    header = (
        "team",
        "GPU-h",
        "borrowed",
        "lent",
        "idle quota",
        "wait p50",
        "wait p95",
        "preempted",
        "lost GPU-h",
    )
    rows = [
        (
            name,
            _hours(t.gpu_hours),
            _hours(t.borrowed_gpu_hours),
            _hours(t.lent_gpu_hours),
            _hours(t.idle_quota_gpu_hours),
            _duration(t.wait_p50_s),
            _duration(t.wait_p95_s),
            str(t.preemptions),
            _hours(t.lost_gpu_hours),
        )
        for name, t in result.teams.items()
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )

    lines += ["", line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]
    c = result.cluster
    lines += [
        "",
        f"cluster: {_hours(c.allocated_gpu_hours)} of {_hours(c.capacity_gpu_hours)} GPU-hours allocated "
        f"(utilization {100 * c.utilization:.1f}%), {_hours(c.idle_while_waiting_gpu_hours)} GPU-hours idle while jobs waited",
        f"         wait mean {_duration(c.wait_mean_s)}, p95 {_duration(c.wait_p95_s)}; {c.preemptions} preemptions, "
        f"{_hours(c.lost_gpu_hours)} GPU-hours lost; {c.cycles} cycles",
        "jobs:    " + ", ".join(f"{n} {state}" for state, n in result.counts.items() if n),
    ]
    if c.node_down_lost_gpu_hours:
        lines.append(f"         {c.node_down_lost_gpu_hours:.2f} GPU-hours lost when nodes went down")
    if result.not_submitted:
        lines.append(f"         {len(result.not_submitted)} jobs not submitted before the end")
    return "\n".join(lines)
