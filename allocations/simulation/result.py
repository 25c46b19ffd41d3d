"""What a replay reports: the ``--json`` result of SCENARIO.md and the summary table."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _string
from typing import Any, TextIO

from allocations.engine.snapshot import PendingReason

from .trace import TraceReport


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
    # Its borrowed GPU-hours decayed with the policy's half-life, at the end (docs/fairness.md).
    borrowed_lately_gpu_hours: float = 0.0


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
    # docs/preemption.md 8: preemptions per submitted job, and the share of victims that had
    # run less than 10 minutes since their last start.
    preemptions_per_job: float = 0.0
    short_victims_share: float = 0.0


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


def _job_json(job: JobResult) -> dict[str, Any]:
    return {
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


def to_json(result: Result) -> dict[str, Any]:
    """The ``--json`` result of SCENARIO.md (with a few added keys)."""
    document = _document(result)
    document["jobs"] = {job_id: _job_json(job) for job_id, job in result.jobs.items()}
    return document


def _document(result: Result) -> dict[str, Any]:
    """``to_json`` but for the jobs (an empty mapping in their place)."""
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
            "borrowed_lately_gpu_hours": _num(t.borrowed_lately_gpu_hours),
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
        "preemptions_per_job": _num(c.preemptions_per_job),
        "short_victims_share": _num(c.short_victims_share),
    }
    out: dict[str, Any] = {
        "name": result.name,
        "end_time": _num(result.end_time),
        "jobs": {},
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


# Jobs written to the stream at a time by ``write_json``.
_JOBS_PER_WRITE = 2048


def write_json(result: Result, out: TextIO) -> None:
    """Write ``json.dumps(to_json(result), indent=2)`` and a newline to ``out``, as
    ``simulate --json`` does, without building and encoding a dict per job.

    A replay of a trace has a hundred thousand jobs, and ``json`` indents in Python, one call
    per value: about 15 times as long. Each job's block is written here from its fields instead,
    with the encoded pending reasons (a few dozen, shared by the jobs that wait for the same
    thing) and other repeated strings kept; everything else is ``json.dumps``'s own text.
    ``tests/simulation/test_result_json.py`` checks that the text is the same."""
    document = _document(result)
    out.write("{\n")
    for i, (key, value) in enumerate(document.items()):
        out.write(f"  {_string(key)}: ")
        if key == "jobs" and result.jobs:
            _write_jobs(result.jobs, out)
        else:
            out.write(_indented(value, 1))
        out.write(",\n" if i < len(document) - 1 else "\n")
    out.write("}\n")


def _indented(value: object, level: int) -> str:
    """``value`` as ``json.dumps(..., indent=2)`` writes it ``level`` levels deep (its
    strings hold no newline: ``json`` escapes them)."""
    return json.dumps(value, indent=2).replace("\n", "\n" + "  " * level)


def _write_jobs(jobs: Mapping[str, JobResult], out: TextIO) -> None:
    strings: dict[str | None, str] = {}
    reasons: dict[int, str] = {}

    def text(value: str | None) -> str:
        encoded = strings.get(value)
        if encoded is None:
            encoded = strings[value] = "null" if value is None else _string(value)
        return encoded

    def reason(value: PendingReason | None) -> str:
        if value is None:
            return "null"
        encoded = reasons.get(id(value))  # the result holds every reason while this runs
        if encoded is None:
            encoded = reasons[id(value)] = _indented({"code": value.code.value, "message": value.message}, 3)
        return encoded

    out.write("{\n")
    blocks: list[str] = []
    for job_id, job in jobs.items():
        preempted = "[]"
        if job.preempted:
            preempted = _indented(
                [{"at": _num(p.at), "reason": p.reason, "by": p.by} for p in job.preempted], 3
            )
        blocks.append(
            f"    {_string(job_id)}: {{\n"
            f'      "team": {text(job.team)},\n'
            f'      "gpus": {_number(job.gpus)},\n'
            f'      "priority": {text(job.priority)},\n'
            f'      "state": {text(job.state)},\n'
            f'      "admitted_at": {_times(job.admitted_at)},\n'
            f'      "preempted": {preempted},\n'
            f'      "finished_at": {_time(job.finished_at)},\n'
            f'      "pending_reason": {reason(job.pending_reason)},\n'
            f'      "instance_type": {text(job.instance_type)},\n'
            f'      "submit": {_time(job.submit)},\n'
            f'      "cancelled_at": {_time(job.cancelled_at)},\n'
            f'      "evicted_at": {_times(job.evicted_at)}\n'
            "    }"
        )
        if len(blocks) == _JOBS_PER_WRITE:
            out.write(",\n".join(blocks) + ",\n")
            blocks.clear()
    out.write(",\n".join(blocks) + "\n  }")


def _number(value: float) -> str:
    """A number as ``json.dumps`` writes it."""
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return repr(value)
    return json.dumps(value)


def _time(value: float | None) -> str:
    return "null" if value is None else _number(_num(value))


def _times(values: Sequence[float]) -> str:
    """A job's times (a list three levels deep) as ``json.dumps(..., indent=2)`` writes them."""
    if not values:
        return "[]"
    return "[\n        " + ",\n        ".join(_number(_num(t)) for t in values) + "\n      ]"


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
        f"         {c.preemptions_per_job:.2f} preemptions per job; "
        f"{100 * c.short_victims_share:.0f}% of the victims had run less than 10 minutes",
        "jobs:    " + ", ".join(f"{n} {state}" for state, n in result.counts.items() if n),
    ]
    if c.node_down_lost_gpu_hours:
        lines.append(f"         {c.node_down_lost_gpu_hours:.2f} GPU-hours lost when nodes went down")
    if result.not_submitted:
        lines.append(f"         {len(result.not_submitted)} jobs not submitted before the end")
    return "\n".join(lines)
