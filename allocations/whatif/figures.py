"""What the lab shows of one replay, beside the simulator's own result (pure Python).

The simulator's figures (``simulation.to_json``: utilization, GPU-hours idle while jobs
waited, borrowed and lent GPU-hours, preemptions, lost GPU-hours, p50/p95 waits per team) are
kept exactly as ``manage.py simulate --json`` prints them. Added here, from the per-job result:
mean waits per team and per priority class, cost per team (GPU-hours x the instance type's
price), running and waiting GPUs over time, and each job's total wait with the pending reason
it waited longest under (recorded by :class:`ReasonRecorder` around the engine).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allocations.engine.snapshot import PendingCode, PendingReason, Plan, Snapshot
from allocations.simulation.result import JobResult, Result, percentile, to_json
from allocations.simulation.scenario import Scenario

Allocate = Callable[[Snapshot, float], Plan]

# Points of the over-time charts: at most this many buckets, each a whole number of hours.
MAX_BUCKETS = 360
NO_CLASS = "(none)"
# A policy is said to churn when at least this many preemptions are this share of its starts.
CHURN_MIN_PREEMPTIONS = 20
CHURN_SHARE = 0.25


def churn_warning(name: str, cluster: Mapping[str, Any]) -> str | None:
    """A warning for a policy whose jobs take GPUs from each other back and forth: POLICY.md
    allows it (a back-off only delays the next preemption), but its cost, work thrown away,
    is easy to miss among the other figures."""
    preemptions = int(cluster.get("preemptions") or 0)
    starts = int(cluster.get("starts") or 0)
    if preemptions < CHURN_MIN_PREEMPTIONS or preemptions < CHURN_SHARE * starts:
        return None
    share = preemptions / starts if starts else 1.0
    lost = float(cluster.get("lost_gpu_hours") or 0)
    return (
        f"Under {name}, jobs were preempted {preemptions:,} times for {starts:,} starts ({100 * share:.0f}%): "
        f"they take GPUs from each other back and forth, and {lost:,.1f} GPU-hours of work were lost. "
        "Less borrowing (lend limits, borrow limits) or fewer teams preempting for their share "
        "(reclaim, fair share) makes it calmer."
    )


class ReasonRecorder:
    """Wraps the engine's ``allocate`` and adds up, per job, the seconds it spent pending with
    each reason code. The cycles of one instant take no time, so only the last plan of an
    instant counts: it holds until the next instant. Each plan is therefore kept until a cycle
    at a later time (or ``finish``) shows it was the last of its instant, and only then read; a
    reason a job had only between two cycles of one instant is not recorded."""

    def __init__(self, allocate: Allocate) -> None:
        self.allocate = allocate
        self.current: dict[str, tuple[PendingCode, float, str]] = {}  # job -> (code, since, message)
        self.seconds: dict[str, dict[str, float]] = {}
        self.messages: dict[tuple[str, str], str] = {}
        self.held: tuple[Mapping[str, PendingReason], float] | None = None  # the last plan, its time
        self.last: Mapping[str, PendingReason] = {}  # the reasons last recorded

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = self.allocate(snapshot, now)
        if self.held is not None and now > self.held[1]:
            self._record(*self.held)
        self.held = (plan.pending, now)
        return plan

    def _record(self, pending: Mapping[str, PendingReason], now: float) -> None:
        current = self.current
        for job_id in current.keys() - pending.keys():
            self._close(job_id, now)
        # Most jobs wait on with the very reason object they had last time (the engine keeps
        # its reasons by their figures): only the others are looked at. The jobs in
        # ``current`` are those of ``last``, each with its reason's code.
        seen = self.last.get
        for job_id in [job_id for job_id, reason in pending.items() if seen(job_id) is not reason]:
            reason = pending[job_id]
            held = current.get(job_id)
            code = reason.code
            if held is None or held[0] is not code:
                if held is not None:
                    self._close(job_id, now)
                current[job_id] = (code, now, reason.message)
        self.last = pending

    def _close(self, job_id: str, now: float) -> None:
        member, since, message = self.current.pop(job_id)
        code = member.value
        totals = self.seconds.setdefault(job_id, {})
        totals[code] = totals.get(code, 0.0) + (now - since)
        self.messages[(job_id, code)] = message

    def finish(self, end: float) -> None:
        if self.held is not None:
            self._record(*self.held)
            self.held = None
        for job_id in list(self.current):
            self._close(job_id, end)

    def main_reason(self, job_id: str) -> dict[str, str] | None:
        """The reason the job waited longest with (code and the engine's message)."""
        totals = self.seconds.get(job_id)
        if not totals:
            return None
        code = max(totals, key=lambda c: (totals[c], c))
        return {"code": code, "message": self.messages[(job_id, code)]}


@dataclass(frozen=True, slots=True)
class JobTimes:
    """One job's waits (each from submit or requeue to a start), total wait (with the wait
    still open at the end) and runs (start, stop), clipped to the replay's [0, end]."""

    waits: tuple[float, ...]
    total_wait: float
    runs: tuple[tuple[float, float], ...]
    queued: tuple[tuple[float, float], ...]


def job_times(job: JobResult, running_since: float | None, end: float) -> JobTimes:
    """Pair each start with the stop that ended it: stops (preemptions, lost nodes, finish,
    cancel) are taken in time order, so a job preempted and restarted at one instant has a
    run that ends there and a run that starts there."""
    requeues = sorted([p.at for p in job.preempted] + list(job.evicted_at))
    stops = sorted(
        requeues
        + ([job.finished_at] if job.finished_at is not None else [])
        + ([job.cancelled_at] if job.cancelled_at is not None else [])
    )
    starts = ([max(0.0, running_since)] if running_since is not None else []) + list(job.admitted_at)
    runs: list[tuple[float, float]] = []
    s = 0
    for start in starts:
        while s < len(stops) and stops[s] < start:
            s += 1
        stop = stops[s] if s < len(stops) else end
        s += 1
        runs.append((start, min(stop, end)))
    # Waiting: from submit, or from a requeue, to the next start (a requeue at an instant
    # comes before a restart at that instant: preemptions are applied before starts).
    timeline = sorted([(t, 0) for t in requeues] + [(t, 1) for t in job.admitted_at])
    waits: list[float] = []
    queued: list[tuple[float, float]] = []
    since: float | None = None if running_since is not None else job.submit
    for at, is_start in timeline:
        if not is_start:
            since = at
        elif since is not None:
            waits.append(at - since)
            queued.append((since, at))
            since = None
    if since is not None and job.state != "rejected":  # still waiting: until cancelled, or the end
        queued.append((since, job.cancelled_at if job.cancelled_at is not None else end))
    total = sum(b - a for a, b in queued)
    clipped = tuple((max(0.0, a), min(b, end)) for a, b in queued if min(b, end) > max(0.0, a))
    return JobTimes(tuple(waits), total, tuple(runs), clipped)


def _bucket_seconds(end: float) -> float:
    hours = max(1, math.ceil(end / 3600 / MAX_BUCKETS))
    return hours * 3600.0


def _spread(series: list[float], start: float, stop: float, amount: float, bucket: float) -> None:
    """Add ``amount`` (GPUs) x the seconds of [start, stop) in each bucket it overlaps."""
    b = int(start // bucket)
    while start < stop and b < len(series):
        edge = min(stop, (b + 1) * bucket)
        series[b] += amount * (edge - start)
        start = edge
        b += 1


def figures(
    result: Result, scenario: Scenario, prices: Mapping[str, float], recorder: ReasonRecorder | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(figures of the replay, per-job facts for comparisons: wait, state, main reason)."""
    end = result.end_time
    simulated = to_json(result)
    running_since = {j.id: j.running_since for j in scenario.jobs if j.running_since is not None}
    bucket = _bucket_seconds(end)
    count = max(1, math.ceil(end / bucket))
    running = [0.0] * count
    waiting = [0.0] * count
    team_waits: dict[str, list[float]] = defaultdict(list)
    class_waits: dict[str, list[float]] = defaultdict(list)
    cost: dict[str, float] = defaultdict(float)
    gpu_hours_by_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    jobs: dict[str, dict[str, Any]] = {}
    for job in result.jobs.values():
        times = job_times(job, running_since.get(job.id), end)
        team_waits[job.team].extend(times.waits)
        class_waits[job.priority or NO_CLASS].extend(times.waits)
        for a, b in times.runs:
            _spread(running, a, b, job.gpus, bucket)
            hours = job.gpus * (b - a) / 3600
            gpu_hours_by_type[job.team][job.instance_type] += hours
            cost[job.team] += hours * prices.get(job.instance_type, 0.0)
        for a, b in times.queued:
            _spread(waiting, a, b, job.gpus, bucket)
        reason = None
        if recorder is not None:
            reason = recorder.main_reason(job.id)
        if reason is None and job.pending_reason is not None:
            reason = {"code": job.pending_reason.code.value, "message": job.pending_reason.message}
        jobs[job.id] = {
            "team": job.team,
            "gpus": job.gpus,
            "instance_type": job.instance_type,
            "priority": job.priority,
            "state": job.state,
            "wait_s": round(times.total_wait, 3),
            "reason": reason,
        }
    teams = {}
    for name, team in simulated["teams"].items():
        waits = team_waits.get(name, [])
        teams[name] = {
            **team,
            "wait_mean_s": round(sum(waits) / len(waits), 3) if waits else 0,
            "cost": round(cost.get(name, 0.0), 2),
            "gpu_hours_by_type": {t: round(h, 6) for t, h in sorted(gpu_hours_by_type.get(name, {}).items())},
        }
    classes = {
        name: {
            "starts": len(waits),
            "wait_mean_s": round(sum(waits) / len(waits), 3) if waits else 0,
            "wait_p95_s": round(percentile(waits, 95), 3),
        }
        for name, waits in sorted(class_waits.items())
    }
    out = {
        "end_time": simulated["end_time"],
        "cluster": {**simulated["cluster"], "cost": round(sum(cost.values()), 2)},
        "teams": teams,
        "priority_classes": classes,
        "job_counts": simulated["job_counts"],
        "series": {
            "bucket_s": bucket,
            "running_gpus": [round(v / bucket, 3) for v in running],
            "waiting_gpus": [round(v / bucket, 3) for v in waiting],
        },
    }
    return out, jobs


def wait_changes(
    base: Mapping[str, Mapping[str, Any]], other: Mapping[str, Mapping[str, Any]], limit: int = 20
) -> list[dict[str, Any]]:
    """The jobs whose total wait changed most between two replays, largest change first."""
    rows = []
    for job_id, a in base.items():
        b = other.get(job_id)
        if b is None or a["wait_s"] == b["wait_s"]:
            continue
        rows.append(
            {
                "id": job_id,
                "team": a["team"],
                "gpus": a["gpus"],
                "priority": a["priority"],
                "wait_base_s": a["wait_s"],
                "wait_other_s": b["wait_s"],
                "change_s": round(b["wait_s"] - a["wait_s"], 3),
                "state_base": a["state"],
                "state_other": b["state"],
                "reason_base": a["reason"],
                "reason_other": b["reason"],
            }
        )
    rows.sort(key=lambda r: (-abs(r["change_s"]), int(r["id"]) if r["id"].isdigit() else 0, r["id"]))
    return rows[:limit]
