"""Reads of the capacity history for the dashboards: plain rows for ``charts.py``.

A time range picks the table (``window_for``): minutes up to a day, hours up to 90 days, days
beyond; buckets are merged further so that no series has more than ``MAX_POINTS`` points. GPU
values are averages over their bucket: the sum of GPU-minutes divided by the number of minute
samples in the bucket (counted on the capacity rows, so a team's missing rows count as 0).
Every function runs a fixed number of queries, whatever the range or the number of teams.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)

from allocations.charts import WAIT_BINS
from allocations.models import (
    CapacityMinute,
    CapacityRollup,
    Job,
    TeamUsageMinute,
    TeamUsageRollup,
)
from allocations.services.history import PREEMPTION_FIELDS, floor_day, floor_hour, floor_minute

MAX_POINTS = 2000
# Teams drawn one by one in the cluster's stacked charts; the rest are summed as "other teams".
TOP_TEAMS = 10
OTHER_TEAMS = "other teams"

RANGES: dict[str, tuple[str, timedelta]] = {
    "1h": ("Last hour", timedelta(hours=1)),
    "6h": ("Last 6 hours", timedelta(hours=6)),
    "1d": ("Last day", timedelta(days=1)),
    "7d": ("Last week", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
    "90d": ("Last 90 days", timedelta(days=90)),
    "1y": ("Last year", timedelta(days=365)),
}
DEFAULT_RANGE = "1d"
# Ranges this short are refreshed live by the page (their newest minute changes every minute).
LIVE_RANGES = ("1h", "6h", "1d")


@dataclass(frozen=True, slots=True)
class Window:
    """A time range resolved to a table: ``source`` is minute, hour or day; ``bucket`` is the
    width of a plotted point (a multiple of the table's step)."""

    key: str
    start: datetime
    end: datetime
    source: str
    step: timedelta
    bucket: timedelta

    @property
    def live(self) -> bool:
        return self.key in LIVE_RANGES

    def describe(self) -> dict[str, Any]:
        return {
            "range": self.key,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "resolution": self.source,
            "bucket_seconds": int(self.bucket.total_seconds()),
            "live": self.live,
        }


def window_for(key: str, now: datetime) -> Window:
    """The window of the range ``key`` ending at ``now``; ValueError names a bad key."""
    if key not in RANGES:
        raise ValueError(f"range: unknown value {key!r}; choose one of {', '.join(RANGES)}")
    length = RANGES[key][1]
    if length <= timedelta(days=1):
        source, step, end = "minute", timedelta(minutes=1), floor_minute(now)
        start = end - length
    elif length <= timedelta(days=90):
        source, step, end = "hour", timedelta(hours=1), floor_hour(now)
        start = end - length
    else:
        source, step, end = "day", timedelta(days=1), floor_day(now)
        start = end - length
    points = math.ceil(length / step)
    factor = max(1, math.ceil(points / MAX_POINTS))
    return Window(key, start, end, source, step, step * factor)


def _bucket_of(window: Window, at: datetime) -> datetime:
    """The start of the plotted bucket that ``at`` falls in (aligned on the Unix epoch)."""
    if window.bucket == window.step:
        return at
    width = int(window.bucket.total_seconds())
    return datetime.fromtimestamp(int(at.timestamp()) // width * width, tz=UTC)


# --- Table access: the same questions of the minute table and of the rollups ----------------
def _capacity_rows(window: Window) -> QuerySet[Any]:
    if window.source == "minute":
        return CapacityMinute.objects.filter(minute__gt=window.start, minute__lte=window.end).annotate(
            at=F("minute")
        )
    return CapacityRollup.objects.filter(
        period=window.source, start__gt=window.start, start__lte=window.end
    ).annotate(at=F("start"))


def _team_rows(window: Window) -> QuerySet[Any]:
    if window.source == "minute":
        return TeamUsageMinute.objects.filter(minute__gt=window.start, minute__lte=window.end).annotate(
            at=F("minute")
        )
    return TeamUsageRollup.objects.filter(
        period=window.source, start__gt=window.start, start__lte=window.end
    ).annotate(at=F("start"))


def _sum(window: Window, minute_field: str, rollup_field: str) -> Sum:
    return Sum(minute_field if window.source == "minute" else rollup_field)


def _filtered(
    qs: QuerySet[Any], instance_type_ids: Sequence[int] | None, team_ids: Sequence[int] | None = None
) -> QuerySet[Any]:
    if instance_type_ids:
        qs = qs.filter(instance_type_id__in=instance_type_ids)
    if team_ids:
        qs = qs.filter(team_id__in=team_ids)
    return qs


# --- Cluster -------------------------------------------------------------------------------
CAPACITY_COLUMNS = {
    "capacity": ("capacity", "capacity_gpu_minutes"),
    "allocated": ("allocated", "allocated_gpu_minutes"),
    "idle": ("idle", "idle_gpu_minutes"),
    "pending": ("pending_gpus", "pending_gpu_minutes"),
    "idle_while_waiting": ("idle_while_waiting", "idle_while_waiting_gpu_minutes"),
}


def capacity_points(window: Window, instance_type_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Per bucket: average capacity, allocated, idle, pending and idle-while-waiting GPUs, and
    ``samples`` (minutes sampled). One query."""
    sums = {k: _sum(window, *cols) for k, cols in CAPACITY_COLUMNS.items()}
    if window.source != "minute":
        sums["samples"] = Max("minutes")  # the same for every instance type of a period
    rows = _filtered(_capacity_rows(window), instance_type_ids).values("at").annotate(**sums).order_by("at")
    buckets: dict[datetime, dict[str, Any]] = {}
    for row in rows:
        at = _bucket_of(window, row["at"])
        point = buckets.setdefault(at, {"at": at, "samples": 0, **dict.fromkeys(CAPACITY_COLUMNS, 0.0)})
        point["samples"] += row.get("samples", 1)
        for key in CAPACITY_COLUMNS:
            point[key] += row[key] or 0
    points = list(buckets.values())
    for point in points:
        for key in CAPACITY_COLUMNS:
            point[key] = point[key] / point["samples"]
    return points


def team_totals(
    window: Window, instance_type_ids: Sequence[int] | None = None, team_ids: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Per team over the whole window: GPU-hours used, borrowed and lent, and its fair-share
    weight (today's). One query."""
    rows = (
        _filtered(_team_rows(window), instance_type_ids, team_ids)
        .values("team_id", "team__name", "team__fair_share_weight")
        .annotate(
            used=_sum(window, "used", "used_gpu_minutes"),
            borrowed=_sum(window, "borrowed", "borrowed_gpu_minutes"),
            lent=_sum(window, "lent", "lent_gpu_minutes"),
        )
        .order_by("team__name")
    )
    return [
        {
            "team_id": r["team_id"],
            "team": r["team__name"],
            "weight": r["team__fair_share_weight"],
            "used_gpu_hours": (r["used"] or 0) / 60,
            "borrowed_gpu_hours": (r["borrowed"] or 0) / 60,
            "lent_gpu_hours": (r["lent"] or 0) / 60,
        }
        for r in rows
    ]


def stacked_usage(
    window: Window,
    totals: Sequence[Mapping[str, Any]],
    samples: Mapping[datetime, int],
    instance_type_ids: Sequence[int] | None = None,
    team_ids: Sequence[int] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """GPUs used per bucket by each of the ``TOP_TEAMS`` biggest users (the rest summed as
    "other teams"), and preemptions per bucket by reason. One query.

    ``totals`` are ``team_totals`` of the same window; ``samples`` the minutes sampled per
    bucket (from ``capacity_points``): the denominator of the averages, zeros filled in.
    """
    ranked = sorted(totals, key=lambda t: (-t["used_gpu_hours"], t["team"]))
    top = {t["team_id"]: t["team"] for t in ranked[:TOP_TEAMS]}
    series = Case(
        *[When(team_id=team_id, then=Value(team_id)) for team_id in top],
        default=Value(0),
        output_field=IntegerField(),
    )
    rows = (
        _filtered(_team_rows(window), instance_type_ids, team_ids)
        .annotate(series=series)
        .values("at", "series")
        .annotate(
            used=_sum(window, "used", "used_gpu_minutes"),
            **{column: Sum(column) for column in PREEMPTION_FIELDS.values()},
        )
        .order_by()
    )
    names = [*top.values()] + ([OTHER_TEAMS] if len(ranked) > TOP_TEAMS else [])
    used: dict[tuple[datetime, str], float] = defaultdict(float)
    preempted: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in rows:
        at = _bucket_of(window, row["at"])
        used[(at, top.get(row["series"], OTHER_TEAMS))] += row["used"] or 0
        for reason, column in PREEMPTION_FIELDS.items():
            preempted[(at, reason)] += row[column] or 0
    usage = [
        {"at": at, "team": name, "used": used.get((at, name), 0.0) / n}
        for name in names
        for at, n in samples.items()
    ]
    preemptions = [
        {"at": at, "reason": reason, "preemptions": count}
        for (at, reason), count in sorted(preempted.items())
        if count
    ]
    return usage, preemptions


# --- One team ------------------------------------------------------------------------------
TEAM_COLUMNS = {
    "quota": ("quota", "quota_gpu_minutes"),
    "used": ("used", "used_gpu_minutes"),
    "borrowed": ("borrowed", "borrowed_gpu_minutes"),
    "lent": ("lent", "lent_gpu_minutes"),
    "pending_gpus": ("pending_gpus", "pending_gpu_minutes"),
    "running_jobs": ("running_jobs", "running_job_minutes"),
    "pending_jobs": ("pending_jobs", "pending_job_minutes"),
}


def sample_counts(window: Window) -> dict[datetime, int]:
    """Minutes sampled per bucket (one query): the denominators of a team's averages."""
    counts: dict[datetime, int] = {}
    if window.source == "minute":
        rows: Iterable[tuple[datetime, int]] = (
            (at, 1) for at in _capacity_rows(window).values_list("at", flat=True).distinct().order_by("at")
        )
    else:
        rows = _capacity_rows(window).values_list("at").annotate(n=Max("minutes")).order_by("at")
    for at, n in rows:
        bucket = _bucket_of(window, at)
        counts[bucket] = counts.get(bucket, 0) + n
    return counts


def team_points(
    window: Window,
    team_id: int,
    samples: Mapping[datetime, int],
    instance_type_ids: Sequence[int] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One team per bucket: average quota, used, borrowed, lent, pending GPUs and job counts;
    and its preemptions by reason. One query."""
    rows = (
        _filtered(_team_rows(window), instance_type_ids, [team_id])
        .values("at")
        .annotate(
            **{k: _sum(window, *cols) for k, cols in TEAM_COLUMNS.items()},
            **{column: Sum(column) for column in PREEMPTION_FIELDS.values()},
        )
        .order_by("at")
    )
    sums: dict[datetime, dict[str, float]] = defaultdict(lambda: dict.fromkeys(TEAM_COLUMNS, 0.0))
    preempted: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in rows:
        at = _bucket_of(window, row["at"])
        for key in TEAM_COLUMNS:
            sums[at][key] += row[key] or 0
        for reason, column in PREEMPTION_FIELDS.items():
            preempted[(at, reason)] += row[column] or 0
    points = [
        {"at": at, **{key: sums[at][key] / n for key in TEAM_COLUMNS}} if at in sums
        else {"at": at, **dict.fromkeys(TEAM_COLUMNS, 0.0)}
        for at, n in samples.items()
    ]  # fmt: skip
    preemptions = [
        {"at": at, "reason": reason, "preemptions": count}
        for (at, reason), count in sorted(preempted.items())
        if count
    ]
    return points, preemptions


def wait_time_bins(
    window: Window, team_id: int, instance_type_ids: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """How long the team's jobs started in the window waited (start minus submission; a
    requeued job keeps its submission time, so its wait includes its earlier runs). One query."""
    jobs = Job.objects.filter(team_id=team_id, started_at__gt=window.start, started_at__lte=window.end)
    if instance_type_ids:
        jobs = jobs.filter(instance_type_id__in=instance_type_ids)
    wait = ExpressionWrapper(F("started_at") - F("submitted_at"), output_field=DurationField())
    lower = timedelta(0)
    counts: dict[str, Count] = {}
    for i, (_label, upper) in enumerate(WAIT_BINS):
        condition = Q(wait__gte=lower) if i else Q()
        if math.isfinite(upper):
            condition &= Q(wait__lt=timedelta(seconds=upper))
            lower = timedelta(seconds=upper)
        counts[f"bin{i}"] = Count("id", filter=condition)
    result = jobs.annotate(wait=wait).aggregate(**counts)
    return [{"wait": label, "jobs": result[f"bin{i}"]} for i, (label, _) in enumerate(WAIT_BINS)]
