"""What the lab shows of one replay, beside the simulator's own result (pure Python).

The simulator's figures (``simulation.to_json``: utilization, GPU-hours idle while jobs
waited, borrowed and lent GPU-hours, preemptions, lost GPU-hours, p50/p95 waits per team) are
kept exactly as ``manage.py simulate --json`` prints them. Added here, from the per-job result:
mean waits per team and per priority class, cost per team (GPU-hours x the instance type's
price), running and waiting GPUs over time, each job's total wait with the pending reason
it waited longest under (recorded by :class:`ReasonRecorder` around the engine). What
preemption cost (docs/preemption.md section 2: lost GPU-hours, preemptions per job, the share
of victims that had run less than 10 minutes) is the simulator's.

Waits are those of the weekly reports and the dashboards (``selectors.history.job_activity``):
one per start, from the submission or the latest requeue, p95 the nearest rank; so the live
policy's replay of a window compares with what the reports recorded of it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allocations.engine import resources
from allocations.engine.snapshot import Job, PendingCode, PendingReason, PendingReasons, Plan, Snapshot
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
    reason a job had only between two cycles of one instant is not recorded. An interval keeps
    the message its reason had when it began.

    The jobs are kept by code as sets of ids (``by_code``). A plan of the batched engine gives
    its reasons as runs of twins (``PendingReasons.parts``): a run whose jobs all had its code
    already is passed over with one set test, and a quiet cycle's plan, whose runs are those of
    the plan recorded before, is not read beyond its new jobs. The jobs that left are those the
    snapshots' changes took out of the queue and those the plan starts (``_follow``). So only
    the jobs whose code changed and the jobs decided one by one are read one by one, not every
    pending job at every instant."""

    def __init__(self, allocate: Allocate) -> None:
        self.allocate = allocate
        self.current: dict[str, tuple[PendingCode, float, str]] = {}  # job -> (code, since, message)
        self.seconds: dict[str, dict[str, float]] = {}
        self.messages: dict[tuple[str, str], str] = {}
        self.held: tuple[Plan, float] | None = None  # the last plan, its time
        self.by_code: dict[PendingCode, set[str]] = {}  # the jobs of ``current`` by their code
        self.runs: Sequence[tuple[Sequence[str], PendingReason]] = ()  # the last plan's, read
        # The pending jobs that left since the plan last recorded (None: not known, ``_follow``),
        # and the serial of the last snapshot.
        self.left: set[str] | None = None
        self.serial: int | None = None

    def __call__(self, snapshot: Snapshot, now: float) -> Plan:
        plan = self.allocate(snapshot, now)
        if self.held is not None and now > self.held[1]:
            self._record(*self.held)
        self._follow(snapshot)
        self.held = (plan, now)
        return plan

    def _follow(self, snapshot: Snapshot) -> None:
        """Note the pending jobs that left, from what the snapshot says changed since the one
        before (``Snapshot.changes``, the simulator's): pending jobs removed, less those added
        back (a job preempted, or moved out of its back-off). With the jobs its plan starts,
        they are the jobs of the plan recorded before that are not in the next one. Without an
        unbroken series of such changes, ``_record`` finds them by comparing all the pending
        jobs."""
        changes = snapshot.changes
        serial, self.serial = self.serial, snapshot.serial
        left = self.left
        if left is None or changes is None or serial is None or changes.since != serial:
            self.left = None
            return
        for job in changes.removed:
            if not job.nodes:
                left.add(job.id)
        for job in changes.added:
            if not job.nodes:
                left.discard(job.id)

    def _record(self, plan: Plan, now: float) -> None:
        pending = plan.pending
        runs: Sequence[tuple[Sequence[str], PendingReason]]
        singles: Mapping[str, PendingReason]
        if isinstance(pending, PendingReasons):
            runs, singles, gone = pending.parts()
        else:
            runs, singles, gone = (), pending, frozenset()
        current, by_code = self.current, self.by_code
        left, self.left = self.left, set()
        # A quiet cycle's plan gives the very runs of the plan recorded before: the jobs in
        # them wait on with those reasons, but those that left (below).
        if left is None or runs is not self.runs:
            for ids, reason in runs:
                have = by_code.get(reason.code)
                if have is not None and have.issuperset(ids):
                    continue  # each of them waits on under its code (or has left: see below)
                fresh = set(ids)
                if have is not None:
                    fresh -= have
                if gone:
                    fresh -= gone
                for job_id in fresh:
                    self._open(job_id, reason, now)
        self.runs = runs
        for job_id, reason in singles.items():
            held = current.get(job_id)
            if held is None or held[0] is not reason.code:
                self._open(job_id, reason, now)
        if left is not None:
            # The pending jobs that left: those ``_follow`` saw go, and those the plan starts.
            for job_id in left:
                if job_id in current:
                    self._close(job_id, now)
            for start in plan.starts:
                if start.job_id in current:
                    self._close(start.job_id, now)
        elif gone or len(current) != len(singles) + sum(len(ids) for ids, _ in runs):
            # Jobs have left (the runs and the singles are disjoint: without ``gone``, every
            # job of ``current`` is counted here once).
            now_ids: set[str] = set(singles)
            for ids, _ in runs:
                now_ids.update(ids)
            if gone:
                now_ids -= gone.difference(singles)
            for job_id in current.keys() - now_ids:
                self._close(job_id, now)

    def _open(self, job_id: str, reason: PendingReason, now: float) -> None:
        """The job waits with ``reason``'s code from ``now`` (closing the code it had)."""
        if job_id in self.current:
            self._close(job_id, now)
        code = reason.code
        self.current[job_id] = (code, now, reason.message)
        have = self.by_code.get(code)
        if have is None:
            self.by_code[code] = {job_id}
        else:
            have.add(job_id)

    def _close(self, job_id: str, now: float) -> None:
        member, since, message = self.current.pop(job_id)
        self.by_code[member].discard(job_id)
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
        self.runs = ()

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


# docs/resources.md 1: the resources besides GPUs whose hours a team's figures add up, with their
# keys there (only on a cluster where some instance type counts them).
RESOURCE_HOURS = ((resources.VCPUS, "vcpu_hours"), (resources.MEMORY, "memory_gib_hours"))


def resource_asks(scenario: Scenario) -> dict[str, dict[str, int]]:
    """Per job, the vCPU and memory it holds while it runs (docs/resources.md 3: the ratio of
    its GPUs where it left them out), by the engine's own rule; jobs of instance types that
    count neither are left out."""
    types = {t.name: t for t in scenario.instance_types}
    out: dict[str, dict[str, int]] = {}
    for job in scenario.jobs:
        it = types.get(job.instance_type)
        if it is None or not (it.vcpus_per_node or it.memory_gib_per_node):
            continue
        asks = resources.job_resources(
            it,
            Job(
                id=job.id,
                team=job.team,
                instance_type=job.instance_type,
                gpus=job.gpus,
                submit_time=job.submit,
                vcpus=job.vcpus,
                memory_gib=job.memory_gib,
                partitions=job.partitions,
            ),
        )
        out[job.id] = {name: asks[name] for name, _ in RESOURCE_HOURS if name in asks}
    return out


# Long: one pass over the jobs feeds every figure (waits, runs, cost, series, resource hours);
# split, each part would walk every job's runs again.
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
    asks = resource_asks(scenario)
    counted = {name for job_asks in asks.values() for name in job_asks}
    resource_hours: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(counted, 0.0))
    for job in result.jobs.values():
        times = job_times(job, running_since.get(job.id), end)
        team_waits[job.team].extend(times.waits)
        class_waits[job.priority or NO_CLASS].extend(times.waits)
        held = asks.get(job.id, {})
        for a, b in times.runs:
            _spread(running, a, b, job.gpus, bucket)
            hours = job.gpus * (b - a) / 3600
            gpu_hours_by_type[job.team][job.instance_type] += hours
            cost[job.team] += hours * prices.get(job.instance_type, 0.0)
            for name, amount in held.items():
                resource_hours[job.team][name] += amount * (b - a) / 3600
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
            # Only where some instance type counts the resource: a GPU-only run shows none.
            **{
                key: round(resource_hours[name].get(resource, 0.0), 3)
                for resource, key in RESOURCE_HOURS
                if resource in counted
            },
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
        "cluster": {
            **simulated["cluster"],
            "cost": round(sum(cost.values()), 2),
        },
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
