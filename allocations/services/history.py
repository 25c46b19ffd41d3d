"""Capacity history: one sample a minute, rolled up into hours and days, pruned by age.

1. ``history_sample(now=...)`` takes the allocation loop's own snapshot (``build_snapshot``),
   runs the engine's accounting on it (``engine/accounting.py``: quota, used, borrowed, lent,
   idle quota per team and instance type) and writes one row per team and instance type, and
   one per instance type, for the minute ``now`` falls in. Sampling a minute twice writes once
   (unique constraints, ``ignore_conflicts``).
2. ``history_rollup(now=...)`` sums minutes into hours and hours into days. Rollups hold
   GPU-minutes, so an hour is exactly the sum of its minutes and a day the sum of its hours;
   it recomputes only the newest rolled-up hour and day onwards (late samples land there).
3. ``history_prune(now=...)`` deletes minutes, hours and days older than their retention
   (``HISTORY_MINUTE_DAYS``, ``HISTORY_HOUR_DAYS``, ``HISTORY_DAY_DAYS``).

Days are UTC days. Preemptions come from JobEvent: the sample of minute m counts the team's
jobs preempted in [m - 1 min, m), by reason and by how long the victim had run (``RAN_FIELDS``),
and adds up the GPU-seconds of work they lost (``victim_cost``: the event's own ``ran_s`` and
``lost_gpu_seconds``, or for an event recorded without them, the run since the job's last start,
all of it lost).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Aggregate, Count, F, Func, Max, Min, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import TruncDay, TruncHour

from allocations import engine
from allocations.choices import JobEventKind
from allocations.engine.accounting import InstanceTypeUsage, account_snapshot
from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    HistoryPeriod,
    InstanceType,
    JobEvent,
    Team,
    TeamUsageMinute,
    TeamUsageRollup,
)

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

# The preemption reasons of POLICY.md section 4 and the sample columns that count them.
PREEMPTION_FIELDS: dict[str, str] = {
    engine.PreemptionReason.IN_TEAM.value: "preempted_in_team",
    engine.PreemptionReason.RECLAIM.value: "preempted_reclaim",
    engine.PreemptionReason.RECLAIM_WHILE_BORROWING.value: "preempted_reclaim_while_borrowing",
    engine.PreemptionReason.FAIR_SHARE.value: "preempted_fair_share",
}

# How long a victim had run since its last start, in bands (upper bound in seconds), and the
# sample columns that count them: under 10 minutes is the churn a minimum runtime prevents.
RAN_FIELDS: dict[str, tuple[float, str]] = {
    "under 10 min": (600.0, "preempted_ran_under_10m"),
    "10-60 min": (3600.0, "preempted_ran_10_to_60m"),
    "over 1 h": (math.inf, "preempted_ran_over_1h"),
}
# The events that begin or end a run: a preempted event's run began at the last of them
# before it if that is a start (otherwise its start is not known).
RUN_BOUNDARIES = (JobEventKind.STARTED, JobEventKind.PREEMPTED, JobEventKind.FINISHED, JobEventKind.FAILED)
# The columns of what preemptions cost, summed as they are by the rollups.
COST_FIELDS: tuple[str, ...] = ("lost_gpu_seconds", *(column for _, column in RAN_FIELDS.values()))


def ran_band(ran_s: float) -> str:
    """The ``RAN_FIELDS`` band of a run of ``ran_s`` seconds."""
    return next(band for band, (upper, _) in RAN_FIELDS.items() if ran_s < upper)


def victim_cost(
    *,
    at: datetime,
    gpus: int,
    ran_s: float | None,
    lost_gpu_seconds: float | None,
    run_start: datetime | None,
) -> tuple[float | None, float]:
    """(seconds the victim had run, GPU-seconds lost) of one preempted event: the event's own
    figures when it has them (the loop records them, checkpoints included); for an event
    recorded without them (before they were recorded), the run since the job's last start, all
    of it lost (jobs had no checkpoints then). Unknown run time (no start recorded): None, 0.
    The one rule of the history sampler and of ``selectors.history.job_activity``."""
    ran = ran_s
    if ran is None and run_start is not None:
        ran = max(0.0, (at - run_start).total_seconds())
    if lost_gpu_seconds is not None:
        return ran, lost_gpu_seconds
    return ran, gpus * ran if ran is not None else 0.0


# Minute column -> rollup column (a sum of GPU-minutes, or of job-minutes).
TEAM_SUMS: dict[str, str] = {
    "quota": "quota_gpu_minutes",
    "used": "used_gpu_minutes",
    "used_within_quota": "used_within_quota_gpu_minutes",
    "borrowed": "borrowed_gpu_minutes",
    "lent": "lent_gpu_minutes",
    "idle_quota": "idle_quota_gpu_minutes",
    "pending_gpus": "pending_gpu_minutes",
    "running_jobs": "running_job_minutes",
    "pending_jobs": "pending_job_minutes",
}
CAPACITY_SUMS: dict[str, str] = {
    "capacity": "capacity_gpu_minutes",
    "allocated": "allocated_gpu_minutes",
    "idle": "idle_gpu_minutes",
    "unallocated": "unallocated_gpu_minutes",
    "pending_gpus": "pending_gpu_minutes",
    "pending_jobs": "pending_job_minutes",
    "idle_while_waiting": "idle_while_waiting_gpu_minutes",
}


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def floor_day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


# --- 1. Sampling ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TeamSample:
    """One team on one instance type at one minute (the columns of TeamUsageMinute)."""

    team: str
    instance_type: str
    quota: int
    used: int
    used_within_quota: int
    borrowed: int
    lent: float
    idle_quota: float
    pending_gpus: int
    running_jobs: int
    pending_jobs: int
    preemptions: Mapping[str, int] = field(default_factory=dict)  # by reason
    costs: Mapping[str, float] = field(default_factory=dict)  # ``COST_FIELDS`` column -> value

    @property
    def is_empty(self) -> bool:
        """Nothing to record: no quota, no use, no demand, nothing lent, no preemption."""
        return not (
            self.quota
            or self.used
            or self.pending_gpus
            or self.lent
            or any(self.preemptions.values())
            or any(self.costs.values())
        )


@dataclass(frozen=True, slots=True)
class CapacitySample:
    """One instance type at one minute (the columns of CapacityMinute)."""

    instance_type: str
    capacity: int
    allocated: int
    idle: int
    unallocated: int
    pending_gpus: int
    pending_jobs: int
    idle_while_waiting: int


def measure(
    snapshot: engine.Snapshot,
    preemptions: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
    costs: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
) -> tuple[list[TeamSample], list[CapacitySample]]:
    """The samples of one snapshot: the engine's accounting plus job counts and preemptions.

    ``preemptions``: counts by reason per (team, instance type) for the minute; ``costs``: their
    ``COST_FIELDS`` (``preemption_costs_between``). Pure: no database, so the arithmetic is
    tested on hand-worked snapshots.
    """
    preemptions = preemptions or {}
    costs = costs or {}
    accounting = account_snapshot(snapshot)
    running: dict[tuple[str, str], int] = defaultdict(int)
    for job in snapshot.jobs:
        if job.running:
            running[(job.team, job.instance_type)] += 1
    teams = [
        TeamSample(
            **_accounted(row, TeamSample),
            running_jobs=running[(row.team, row.instance_type)],
            preemptions=dict(preemptions.get((row.team, row.instance_type), {})),
            costs=dict(costs.get((row.team, row.instance_type), {})),
        )
        for row in accounting.teams
    ]
    return teams, [capacity_sample(row) for row in accounting.instance_types]


def capacity_sample(row: InstanceTypeUsage) -> CapacitySample:
    """The sample of an instance type from the engine's accounting of it."""
    # GPUs that sat idle although jobs of this type waited for them.
    idle_while_waiting = min(row.idle, row.pending_gpus)
    return CapacitySample(**_accounted(row, CapacitySample), idle_while_waiting=idle_while_waiting)


def _accounted(row: object, sample: type) -> dict[str, Any]:
    """The fields of ``sample`` that the engine's accounting ``row`` has, with their values:
    a sample holds the accounting's figures as they are, and adds its own."""
    return {f.name: getattr(row, f.name) for f in fields(sample) if hasattr(row, f.name)}


def preemptions_between(start: datetime, end: datetime) -> dict[tuple[str, str], dict[str, int]]:
    """Jobs preempted in [start, end), counted by (team, instance type) and reason."""
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    rows = (
        JobEvent.objects.filter(kind=JobEventKind.PREEMPTED, at__gte=start, at__lt=end)
        .values_list("job__team__name", "job__instance_type__name", "reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    for team, instance_type, reason, n in rows:
        counts[(team, instance_type)][reason] = counts[(team, instance_type)].get(reason, 0) + n
    return counts


def preemption_costs_between(start: datetime, end: datetime) -> dict[tuple[str, str], dict[str, float]]:
    """What the jobs preempted in [start, end) lost, by (team, instance type): the GPU-seconds of
    work and the preemptions by ``RAN_FIELDS`` band (``victim_cost``; a victim whose run time is
    not known is in no band). One query: each event with the job's run boundary before it (its
    last start, preemption or end); the run began there if that boundary is a start, as the walk
    of ``selectors.history.activity_by_team`` reads it."""
    boundary = (
        JobEvent.objects.filter(job_id=OuterRef("job_id"), kind__in=RUN_BOUNDARIES)
        .filter(Q(at__lt=OuterRef("at")) | Q(at=OuterRef("at"), id__lt=OuterRef("id")))
        .order_by("-at", "-id")
    )
    rows = (
        JobEvent.objects.filter(kind=JobEventKind.PREEMPTED, at__gte=start, at__lt=end)
        .annotate(
            boundary_at=Subquery(boundary.values("at")[:1]),
            boundary_kind=Subquery(boundary.values("kind")[:1]),
            gpus=F("job__gpus"),
        )
        .values_list(
            "job__team__name",
            "job__instance_type__name",
            "at",
            "gpus",
            "ran_s",
            "lost_gpu_seconds",
            "boundary_at",
            "boundary_kind",
        )
        .order_by()
    )
    costs: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: dict.fromkeys(COST_FIELDS, 0.0))
    for team, instance_type, at, gpus, ran_s, lost_gpu_seconds, boundary_at, boundary_kind in rows:
        run_start = boundary_at if boundary_kind == JobEventKind.STARTED else None
        ran, lost = victim_cost(
            at=at, gpus=gpus, ran_s=ran_s, lost_gpu_seconds=lost_gpu_seconds, run_start=run_start
        )
        into = costs[(team, instance_type)]
        into["lost_gpu_seconds"] += lost
        if ran is not None:
            into[RAN_FIELDS[ran_band(ran)][1]] += 1
    return dict(costs)


def history_sample(*, now: datetime) -> datetime:
    """Record the minute ``now`` falls in (idempotent); returns that minute."""
    from allocations.selectors.snapshot import build_snapshot

    minute = floor_minute(now)
    snapshot = build_snapshot(now)
    teams, capacity = measure(
        snapshot,
        preemptions_between(minute - MINUTE, minute),
        preemption_costs_between(minute - MINUTE, minute),
    )
    write_samples(minute, teams, capacity)
    return minute


def write_samples(minute: datetime, teams: Iterable[TeamSample], capacity: Iterable[CapacitySample]) -> None:
    """Insert one minute's rows; rows of a minute already sampled are left as they were."""
    team_ids = dict(Team.objects.values_list("name", "id"))
    type_ids = dict(InstanceType.objects.values_list("name", "id"))
    team_rows = [
        TeamUsageMinute(
            minute=minute,
            team_id=team_ids[s.team],
            instance_type_id=type_ids[s.instance_type],
            **{column: getattr(s, column) for column in TEAM_SUMS},
            **{column: s.preemptions.get(reason, 0) for reason, column in PREEMPTION_FIELDS.items()},
            **{column: s.costs.get(column, 0) for column in COST_FIELDS},
        )
        for s in teams
        if not s.is_empty and s.team in team_ids and s.instance_type in type_ids
    ]
    capacity_rows = [
        CapacityMinute(
            minute=minute,
            instance_type_id=type_ids[s.instance_type],
            **{column: getattr(s, column) for column in CAPACITY_SUMS},
        )
        for s in capacity
        if s.instance_type in type_ids
    ]
    with transaction.atomic():
        TeamUsageMinute.objects.bulk_create(team_rows, ignore_conflicts=True, batch_size=1000)
        CapacityMinute.objects.bulk_create(capacity_rows, ignore_conflicts=True, batch_size=1000)


# --- 2. Rollups ----------------------------------------------------------------------------
def _period_sums(
    rows: QuerySet[Any], start: Func, group: tuple[str, ...], sums: Mapping[str, Aggregate]
) -> list[dict[str, Any]]:
    """``rows`` summed per period (``start``, the truncated time of each row) and ``group``,
    as rollup rows: ``start``, the group's ids and each column of ``sums``. The aggregates are
    annotated under other names: Django refuses an annotation named like a field, and the day
    rollups sum the hour rollups' own columns."""
    summed = (
        rows.annotate(period_start=start)
        .values("period_start", *group)
        .annotate(**{f"sum_{column}": aggregate for column, aggregate in sums.items()})
        .order_by()
    )
    return [
        {"start": r["period_start"], **{key: r[key] for key in group}, **{c: r[f"sum_{c}"] for c in sums}}
        for r in summed
    ]


def rollup_hours(start: datetime, end: datetime) -> int:
    """(Re)compute the hour rollups of [start, end) from their minutes; returns rows written.

    ``start`` and ``end`` are whole hours. Hours without minutes are left alone (so rolling up
    a range whose minutes were pruned never erases its hours).
    """
    team_rows = _period_sums(
        TeamUsageMinute.objects.filter(minute__gte=start, minute__lt=end),
        TruncHour("minute"),
        ("team_id", "instance_type_id"),
        {
            **{rollup: Sum(column) for column, rollup in TEAM_SUMS.items()},
            "peak_used": Max("used"),
            "peak_pending_gpus": Max("pending_gpus"),
            **{column: Sum(column) for column in [*PREEMPTION_FIELDS.values(), *COST_FIELDS]},
        },
    )
    capacity_rows = _period_sums(
        CapacityMinute.objects.filter(minute__gte=start, minute__lt=end),
        TruncHour("minute"),
        ("instance_type_id",),
        {
            "minutes": Count("id"),
            **{rollup: Sum(column) for column, rollup in CAPACITY_SUMS.items()},
            "peak_allocated": Max("allocated"),
            "peak_pending_gpus": Max("pending_gpus"),
        },
    )
    return _replace(HistoryPeriod.HOUR, team_rows, capacity_rows)


def rollup_days(start: datetime, end: datetime) -> int:
    """(Re)compute the day rollups of [start, end) from their hours; returns rows written."""
    hours = {"period": HistoryPeriod.HOUR, "start__gte": start, "start__lt": end}
    team_rows = _period_sums(
        TeamUsageRollup.objects.filter(**hours),
        TruncDay("start"),
        ("team_id", "instance_type_id"),
        {
            **{c: Sum(c) for c in [*TEAM_SUMS.values(), *PREEMPTION_FIELDS.values(), *COST_FIELDS]},
            "peak_used": Max("peak_used"),
            "peak_pending_gpus": Max("peak_pending_gpus"),
        },
    )
    capacity_rows = _period_sums(
        CapacityRollup.objects.filter(**hours),
        TruncDay("start"),
        ("instance_type_id",),
        {
            "minutes": Sum("minutes"),
            **{c: Sum(c) for c in CAPACITY_SUMS.values()},
            "peak_allocated": Max("peak_allocated"),
            "peak_pending_gpus": Max("peak_pending_gpus"),
        },
    )
    return _replace(HistoryPeriod.DAY, team_rows, capacity_rows)


def _replace(period: str, team_rows: list[dict[str, Any]], capacity_rows: list[dict[str, Any]]) -> int:
    """Swap the rollups of the periods ``team_rows`` and ``capacity_rows`` start for these
    freshly computed ones, atomically."""
    starts = {row["start"] for row in capacity_rows} | {row["start"] for row in team_rows}
    if not starts:
        return 0
    with transaction.atomic():
        TeamUsageRollup.objects.filter(period=period, start__in=starts).delete()
        CapacityRollup.objects.filter(period=period, start__in=starts).delete()
        TeamUsageRollup.objects.bulk_create(
            [TeamUsageRollup(period=period, **row) for row in team_rows], batch_size=2000
        )
        CapacityRollup.objects.bulk_create(
            [CapacityRollup(period=period, **row) for row in capacity_rows], batch_size=2000
        )
    return len(team_rows) + len(capacity_rows)


def history_rollup(*, now: datetime) -> int:
    """Roll up what is new since the last run: the newest rolled hour (and day) onwards, up to
    and including the current, partial one. Returns the rows written."""
    last_hour = CapacityRollup.objects.filter(period=HistoryPeriod.HOUR).aggregate(m=Max("start"))["m"]
    if last_hour is None:
        last_hour = CapacityMinute.objects.aggregate(m=Min("minute"))["m"]
        if last_hour is None:
            return 0
    first_hour = floor_hour(last_hour)
    written = rollup_hours(first_hour, floor_hour(now) + HOUR)
    written += rollup_days(floor_day(first_hour), floor_day(now) + DAY)
    return written


# --- 3. Retention --------------------------------------------------------------------------
def history_prune(*, now: datetime) -> int:
    """Delete samples older than their retention (settings in days); returns rows deleted."""
    deleted = 0
    minute_cutoff = now - timedelta(days=settings.HISTORY_MINUTE_DAYS)
    deleted += TeamUsageMinute.objects.filter(minute__lt=minute_cutoff).delete()[0]
    deleted += CapacityMinute.objects.filter(minute__lt=minute_cutoff).delete()[0]
    for period, days in (
        (HistoryPeriod.HOUR, settings.HISTORY_HOUR_DAYS),
        (HistoryPeriod.DAY, settings.HISTORY_DAY_DAYS),
    ):
        cutoff = now - timedelta(days=days)
        deleted += TeamUsageRollup.objects.filter(period=period, start__lt=cutoff).delete()[0]
        deleted += CapacityRollup.objects.filter(period=period, start__lt=cutoff).delete()[0]
    return deleted


def history_tick(*, now: datetime) -> datetime:
    """What beat runs every minute: sample, roll up, prune. Safe to run twice."""
    minute = history_sample(now=now)
    history_rollup(now=now)
    history_prune(now=now)
    return minute
