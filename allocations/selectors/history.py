"""Reads of the capacity history for the dashboards: plain rows for ``charts.py``.

A time range picks the table (``window_for``): minutes up to a day, hours up to 90 days, days
beyond; rows are merged into points in SQL so that no series has more than ``MAX_POINTS``. GPU
values are averages over their bucket: the sum of GPU-minutes divided by the number of minute
samples in the bucket (counted on the capacity rows, so a team's missing rows count as 0).
Every function runs a fixed number of queries, whatever the range or the number of teams.

Each figure has one source, whichever page shows it (the dashboards, the weekly reports in
``reports/figures.py``): GPU-hours, job-minutes and preemption counts come from the history
tables (the sampler counts preemptions off the JobEvent rows); jobs started, finished and
failed, waits and the GPU-hours lost to preemption from the JobEvent rows (``job_activity``).
The dashboards' lost GPU-hours over time come from the history, which the sampler adds up from
the same events by the same rule (``services.history.victim_cost``): over a span both sampled
and recorded, the two agree.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models import Window as SqlWindow  # this module's Window is a time range

from allocations.charts import WAIT_BINS, iso
from allocations.choices import JobEventKind
from allocations.models import (
    ANY_PREEMPTION,
    CapacityMinute,
    CapacityRollup,
    JobEvent,
    Team,
    TeamUsageMinute,
    TeamUsageRollup,
)
from allocations.services.history import (
    COST_FIELDS,
    DAY,
    HOUR,
    PREEMPTION_FIELDS,
    RAN_FIELDS,
    floor_day,
    floor_hour,
    floor_minute,
    victim_cost,
)

# Points per series at most (the data endpoints promise no more than 2,000): 500 keeps the
# 1-day cluster chart (16 series) light to send and draw, and no screen shows more.
MAX_POINTS = 500
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

    @property
    def span(self) -> tuple[datetime, datetime]:
        """The time [from, to) its rows stand for: the rows of (start, end], each of which holds
        the ``step`` from its own time (a minute's sample, an hour's or a day's sums). Figures
        read from other records than the rows (the jobs) cover this span."""
        return self.start + self.step, self.end + self.step

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


# Unix seconds of a datetime column, per database: the points are computed as integers
# (parsing tens of thousands of timestamps per request cost more than the query itself).
EPOCH_SQL = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM {column}) AS bigint)",
    # julianday() reads Django's stored text; day 2440587.5 is the Unix epoch.
    "sqlite": "CAST(ROUND((julianday({column}) - 2440587.5) * 86400) AS INTEGER)",
}


def _time_column(window: Window) -> str:
    return "minute" if window.source == "minute" else "start"


def _per_point(
    window: Window, inner: QuerySet[Any], group: Sequence[str], sums: Sequence[str], *, count: str = ""
) -> list[tuple[Any, ...]]:
    """Rows ``(t, *group, *sums[, count])`` per plotted point, ``t`` its start in Unix seconds.

    ``inner`` is grouped by the table's own time column (and ``group``), which the database
    does cheaply on the raw column; this wraps it in an outer query that turns each time into
    seconds, aligns it on the window's bucket (merging hours into 2-hour points, ...), sums
    ``sums`` and, with ``count``, counts the inner rows (the minutes sampled) as ``count``.
    """
    quote = connection.ops.quote_name
    sql, params = inner.query.sql_with_params()
    epoch = EPOCH_SQL[connection.vendor].format(column=f"sub.{quote(_time_column(window))}")
    width = int(window.bucket.total_seconds())
    point = epoch if window.bucket == window.step else f"(({epoch}) / {width}) * {width}"
    columns = [f"sub.{quote(g)}" for g in group]
    positions = ", ".join(str(i) for i in range(1, len(group) + 2))
    if window.bucket == window.step and not count:
        # One inner row per point already: no second aggregation.
        values = [f"sub.{quote(c)}" for c in sums]
        outer = f"SELECT {', '.join([point, *columns, *values])} FROM ({sql}) sub ORDER BY {positions}"
    else:
        aggregates = [f"SUM(sub.{quote(c)})" for c in sums] + (["COUNT(*)"] if count else [])
        outer = (
            f"SELECT {', '.join([point, *columns, *aggregates])} FROM ({sql}) sub "
            f"GROUP BY {positions} ORDER BY {positions}"
        )
    with connection.cursor() as cursor:
        cursor.execute(outer, params)
        rows = cursor.fetchall()
    # PostgreSQL sums bigints as numeric: plain floats for the arithmetic and the JSON.
    return [tuple(float(v) if isinstance(v, Decimal) else v for v in row) for row in rows]


class TimeAxis:
    """ISO strings of bucket starts, formatted once per bucket however many series share it."""

    def __init__(self) -> None:
        self._text: dict[int, str] = {}

    def __call__(self, seconds: int) -> str:
        text = self._text.get(seconds)
        if text is None:
            text = self._text[seconds] = iso(datetime.fromtimestamp(seconds, tz=UTC))
        return text


# --- Table access: the same questions of the minute table and of the rollups ----------------
def _capacity_rows(window: Window) -> QuerySet[Any]:
    if window.source == "minute":
        return CapacityMinute.objects.filter(minute__gt=window.start, minute__lte=window.end)
    return CapacityRollup.objects.filter(period=window.source, start__gt=window.start, start__lte=window.end)


def _team_rows(window: Window) -> QuerySet[Any]:
    if window.source == "minute":
        return TeamUsageMinute.objects.filter(minute__gt=window.start, minute__lte=window.end)
    return TeamUsageRollup.objects.filter(period=window.source, start__gt=window.start, start__lte=window.end)


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


def _sampled(
    window: Window, inner: QuerySet[Any], group: Sequence[str], sums: Sequence[str]
) -> list[tuple[Any, ...]]:
    """``_per_point`` over capacity rows, with the minutes sampled as the last column: the
    count of distinct minutes; on rollups, the sum of each period's ``minutes`` (the same for
    every instance type of a period, so its maximum)."""
    if window.source == "minute":
        return _per_point(window, inner, group, sums, count="samples")
    return _per_point(window, inner.annotate(samples=Max("minutes")), group, [*sums, "samples"])


# --- Cluster -------------------------------------------------------------------------------
CAPACITY_COLUMNS = {
    "capacity": ("capacity", "capacity_gpu_minutes"),
    "allocated": ("allocated", "allocated_gpu_minutes"),
    "idle": ("idle", "idle_gpu_minutes"),
    "pending": ("pending_gpus", "pending_gpu_minutes"),
    "idle_while_waiting": ("idle_while_waiting", "idle_while_waiting_gpu_minutes"),
}


def capacity_points(window: Window, instance_type_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Per point: average capacity, allocated, idle, pending and idle-while-waiting GPUs, ``t``
    (Unix seconds), ``at`` (ISO) and ``samples`` (minutes sampled). One query."""
    axis = TimeAxis()
    inner = (
        _filtered(_capacity_rows(window), instance_type_ids)
        .values(_time_column(window))
        .annotate(**{k: _sum(window, *cols) for k, cols in CAPACITY_COLUMNS.items()})
        .order_by()
    )
    points = []
    for t, *values, samples in _sampled(window, inner, [], list(CAPACITY_COLUMNS)):
        point: dict[str, Any] = {"t": t, "at": axis(t), "samples": samples}
        point.update(
            {key: (value or 0) / samples for key, value in zip(CAPACITY_COLUMNS, values, strict=True)}
        )
        points.append(point)
    return points


def _whole_periods(window: Window) -> tuple[QuerySet[Any], Q]:
    """The window's whole coarser periods (days of an hour window, hours of a minute window)
    as rollup rows, and the condition on the window's own rows that keeps only the partial
    periods at its two ends. Sums over both equal the sums over the window's own rows, since a
    rollup is exactly the sum of its rows, but read a few thousand rows instead of 200,000."""
    if window.source == "day":
        return TeamUsageRollup.objects.none(), Q()
    if window.source == "minute":
        first, last, period, column = (
            floor_hour(window.start) + HOUR,
            floor_hour(window.end),
            "hour",
            "minute",
        )
    else:
        first, last, period, column = floor_day(window.start) + DAY, floor_day(window.end), "day", "start"
    whole = TeamUsageRollup.objects.filter(period=period, start__gte=first, start__lt=last)
    return whole, Q(**{f"{column}__lt": first}) | Q(**{f"{column}__gte": last})


def team_totals(
    window: Window, instance_type_ids: Sequence[int] | None = None, team_ids: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Per team over the whole window: GPU-hours used, borrowed and lent, and its fair-share
    weight (today's). Two queries: the sums (whole periods from the coarser rollup, the partial
    ends from the window's table, in one UNION ALL), then the teams' names."""
    whole, ends = _whole_periods(window)
    sums_of = {"used": "used_gpu_minutes", "borrowed": "borrowed_gpu_minutes", "lent": "lent_gpu_minutes"}
    partial = (
        _filtered(_team_rows(window).filter(ends), instance_type_ids, team_ids)
        .values("team_id")
        .annotate(**{k: _sum(window, k, rollup) for k, rollup in sums_of.items()})
        .order_by()
    )
    coarse = (
        _filtered(whole, instance_type_ids, team_ids)
        .values("team_id")
        .annotate(**{k: Sum(rollup) for k, rollup in sums_of.items()})
        .order_by()
    )
    sums: dict[int, dict[str, float]] = {}
    for team_id, *values in partial.union(coarse, all=True).values_list("team_id", *sums_of):
        into = sums.setdefault(team_id, dict.fromkeys(sums_of, 0.0))
        for key, value in zip(sums_of, values, strict=True):
            into[key] += float(value or 0)
    teams = Team.objects.filter(pk__in=sums).order_by("name").values_list("pk", "name", "fair_share_weight")
    return [
        {
            "team_id": pk,
            "team": name,
            "weight": weight,
            "used_gpu_hours": sums[pk]["used"] / 60,
            "borrowed_gpu_hours": sums[pk]["borrowed"] / 60,
            "lent_gpu_hours": sums[pk]["lent"] / 60,
        }
        for pk, name, weight in teams
    ]


def stacked_usage(
    window: Window,
    totals: Sequence[Mapping[str, Any]],
    points: Sequence[Mapping[str, Any]],
    instance_type_ids: Sequence[int] | None = None,
    team_ids: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """GPUs used per point by each of the ``TOP_TEAMS`` biggest users, the rest summed as
    "other teams". One query.

    ``totals`` are ``team_totals`` of the same window; ``points`` its ``capacity_points``,
    whose sample counts are the denominators of the averages (zeros filled in). Only the top
    teams' rows are read (through the team-and-minute index): "other teams" is the point's
    allocated GPUs minus theirs, since one snapshot wrote both. With a team filter, the chosen
    teams' rows are read and the ones beyond the top are summed instead.
    """
    ranked = sorted(totals, key=lambda t: (-t["used_gpu_hours"], t["team"]))
    top = {t["team_id"]: t["team"] for t in ranked[:TOP_TEAMS]}
    series = Case(
        *[When(team_id=team_id, then=Value(team_id)) for team_id in top],
        default=Value(0),
        output_field=IntegerField(),
    )
    inner = (
        _filtered(_team_rows(window), instance_type_ids, team_ids or list(top) or [0])
        .annotate(series=series)
        .values(_time_column(window), "series")
        .annotate(used=_sum(window, "used", "used_gpu_minutes"))
        .order_by()
    )
    used: dict[tuple[int, str], float] = {}
    for t, team_id, gpu_minutes in _per_point(window, inner, ["series"], ["used"]):
        key = (t, top.get(team_id, OTHER_TEAMS))
        used[key] = used.get(key, 0.0) + (gpu_minutes or 0)
    usage = [
        {"at": p["at"], "team": name, "used": used.get((p["t"], name), 0.0) / p["samples"]}
        for name in top.values()
        for p in points
    ]
    if len(ranked) > TOP_TEAMS:
        for p in points:
            if team_ids:
                others = used.get((p["t"], OTHER_TEAMS), 0.0) / p["samples"]
            else:
                shown = sum(used.get((p["t"], name), 0.0) for name in top.values()) / p["samples"]
                others = max(0.0, p["allocated"] - shown)  # never below 0 from float rounding
            usage.append({"at": p["at"], "team": OTHER_TEAMS, "used": others})
    return usage


# A victim whose run time the history does not know (a preempted event with neither its run
# time nor a start recorded): the preemptions of a point less those of its bands.
UNKNOWN_RUN = "unknown"


def _cost_points(at: str, row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lost work and the preemptions by victim run time of one point's sums (the
    ``PREEMPTION_FIELDS`` and ``COST_FIELDS`` columns), as ``preemption_cost_points`` rows."""
    bands = {band: int(row[column] or 0) for band, (_, column) in RAN_FIELDS.items()}
    total = sum(int(row[column] or 0) for column in PREEMPTION_FIELDS.values())
    bands[UNKNOWN_RUN] = max(0, total - sum(bands.values()))
    return [
        {
            "at": at,
            "lost_gpu_hours": float(row["lost_gpu_seconds"] or 0) / 3600,
            "ran": band,
            "preemptions": n,
        }
        for band, n in bands.items()
    ]


def preemption_points(
    window: Window,
    points: Sequence[Mapping[str, Any]],
    instance_type_ids: Sequence[int] | None = None,
    team_ids: Sequence[int] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Preemptions per point by reason, of all teams (or the chosen ones); and what they cost
    (``_cost_points``: GPU-hours lost, preemptions by the victim's run time, one row per band
    and point, with the point's lost GPU-hours on each). One query, over the rows that counted
    any (most rows count none)."""
    columns = [*PREEMPTION_FIELDS.values(), *COST_FIELDS]
    inner = (
        # The same condition as the partial indexes, so that PostgreSQL uses them.
        _filtered(_team_rows(window).filter(ANY_PREEMPTION), instance_type_ids, team_ids)
        .values(_time_column(window))
        .annotate(**{column: Sum(column) for column in columns})
        .order_by()
    )
    axis = {p["t"]: p["at"] for p in points}
    by_reason: list[dict[str, Any]] = []
    costs: list[dict[str, Any]] = []
    for t, *sums in _per_point(window, inner, [], columns):
        at = axis.get(t) or iso(datetime.fromtimestamp(t, tz=UTC))
        row = dict(zip(columns, sums, strict=True))
        by_reason += [
            {"at": at, "reason": reason, "preemptions": row[column]}
            for reason, column in PREEMPTION_FIELDS.items()
            if row[column]
        ]
        costs += _cost_points(at, row)
    return by_reason, costs


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


def sample_counts(window: Window) -> list[dict[str, Any]]:
    """Minutes sampled per point (one query): the time axis and denominators of a team's
    averages, as ``{"t", "at", "samples"}``."""
    axis = TimeAxis()
    inner = _capacity_rows(window).values(_time_column(window))
    if window.source == "minute":
        inner = inner.annotate(types=Count("id"))
    return [
        {"t": t, "at": axis(t), "samples": samples}
        for t, *_, samples in _sampled(window, inner.order_by(), [], [])
    ]


def team_points(
    window: Window,
    team_id: int,
    samples: Sequence[Mapping[str, Any]],
    instance_type_ids: Sequence[int] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """One team per point: average quota, used, borrowed, lent, pending GPUs and job counts;
    its preemptions by reason; and what they cost (as ``preemption_points``). One query."""
    preempted_columns = [*PREEMPTION_FIELDS.values(), *COST_FIELDS]
    inner = (
        _filtered(_team_rows(window), instance_type_ids, [team_id])
        .values(_time_column(window))
        .annotate(
            **{k: _sum(window, *cols) for k, cols in TEAM_COLUMNS.items()},
            **{column: Sum(column) for column in preempted_columns},
        )
        .order_by()
    )
    columns = [*TEAM_COLUMNS, *preempted_columns]
    sums = {
        t: dict(zip(columns, values, strict=True)) for t, *values in _per_point(window, inner, [], columns)
    }
    zero = dict.fromkeys(columns, 0)
    points = []
    preemptions = []
    costs = []
    for p in samples:
        row = sums.get(p["t"], zero)
        points.append({"at": p["at"], **{key: (row[key] or 0) / p["samples"] for key in TEAM_COLUMNS}})
        for reason, column in PREEMPTION_FIELDS.items():
            if row[column]:
                preemptions.append({"at": p["at"], "reason": reason, "preemptions": row[column]})
        if any(row[column] for column in PREEMPTION_FIELDS.values()):
            costs += _cost_points(p["at"], row)
    return points, preemptions, costs


def wait_time_bins(
    window: Window, team_id: int, instance_type_ids: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """How long the team's jobs waited before each start in the window, binned: ``job_waits``,
    the weekly reports' waits, one per start. One query."""
    waits = job_waits(*window.span, team_ids=[team_id], instance_type_ids=instance_type_ids).get(team_id, [])
    counts = [0] * len(WAIT_BINS)
    for wait in waits:
        counts[next(i for i, (_, upper) in enumerate(WAIT_BINS) if wait < upper)] += 1
    return [{"wait": label, "jobs": n} for (label, _), n in zip(WAIT_BINS, counts, strict=True)]


# --- Jobs: what they did, from their JobEvent rows -------------------------------------------
class WaitStatistics:
    """The mean and the 95th percentile of ``waits`` (seconds, one per start), for the figures
    that hold a span's waits (here and in the weekly reports)."""

    __slots__ = ()
    waits: tuple[float, ...]

    @property
    def mean_wait(self) -> float | None:
        return mean_wait(self.waits)

    @property
    def p95_wait(self) -> float | None:
        return p95_wait(self.waits)


@dataclass(frozen=True, slots=True)
class JobActivity(WaitStatistics):
    """What a team's jobs did in a span of time, read from their JobEvent rows (the only record
    of each start and preemption: a job row keeps only its last start)."""

    started: int = 0  # distinct jobs that started at least once
    finished: int = 0
    failed: int = 0
    waits: tuple[float, ...] = ()  # seconds, one per start
    preempted: int = 0  # preempted events of its jobs
    preemptions_caused: int = 0  # preempted events whose preemptor is its job
    gpu_hours_lost: float = 0.0


def mean_wait(waits: Sequence[float]) -> float | None:
    return sum(waits) / len(waits) if waits else None


def p95_wait(waits: Sequence[float]) -> float | None:
    """Nearest-rank 95th percentile: the smallest wait that 95 % of the starts did not exceed."""
    if not waits:
        return None
    ordered = sorted(waits)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def job_activity(
    start: datetime,
    end: datetime,
    *,
    team_ids: Sequence[int] | None = None,
    instance_type_ids: Sequence[int] | None = None,
) -> dict[int, JobActivity]:
    """Per team, what its jobs did in [start, end): the jobs figures of the weekly reports
    (their waits are ``job_waits``, the dashboards' too). Two queries.

    With filters only those teams' and instance types' jobs are read: a preemption one of them
    caused to another job is then not counted as caused."""
    waits = job_waits(start, end, team_ids=team_ids, instance_type_ids=instance_type_ids)
    activity = activity_by_team(start, end, _job_events(start, end, team_ids, instance_type_ids))
    return {
        team_id: replace(figures, waits=tuple(waits.get(team_id, ())))
        for team_id, figures in activity.items()
    }


# Seconds from one datetime column to another, as a float, per database.
SECONDS_BETWEEN_SQL = {
    "postgresql": "EXTRACT(EPOCH FROM ({end} - {start}))",
    "sqlite": "(julianday({end}) - julianday({start})) * 86400.0",
}


def job_waits(
    start: datetime,
    end: datetime,
    *,
    team_ids: Sequence[int] | None = None,
    instance_type_ids: Sequence[int] | None = None,
) -> dict[int, list[float]]:
    """Per team, the wait of each start in [start, end), in seconds, by job and time: the start
    minus the job's latest submission or requeue before it (a requeued job's second wait counts
    from its requeue, not from its first submission; a job with no such event waits from its
    ``submitted_at``). The waits of the weekly reports and of the team dashboard's wait chart.

    One query: the database pairs each start with the latest submission or requeue before it
    (a running maximum over the job's events), so one number per start is read, however many
    events the jobs have."""
    started = JobEvent.objects.filter(kind=JobEventKind.STARTED, at__gte=start, at__lt=end)
    if team_ids:
        started = started.filter(job__team_id__in=team_ids)
    if instance_type_ids:
        started = started.filter(job__instance_type_id__in=instance_type_ids)
    ready_kinds = [JobEventKind.SUBMITTED, JobEventKind.REQUEUED]
    # All their events, of every kind and also after ``end`` (the running maximum and the count
    # pass over them): a condition on the kind or the time would have SQLite read every event
    # of those kinds through the (kind, at) index instead of these jobs' through the job index.
    inner = (
        JobEvent.objects.filter(job_id__in=started.values("job_id"))
        .annotate(
            ready_at=SqlWindow(
                Max(Case(When(kind__in=ready_kinds, then=F("at")))),
                partition_by=[F("job_id")],
                order_by=[F("at").asc(), F("id").asc()],
            ),
            submitted=F("job__submitted_at"),
            team=F("job__team_id"),
            counted=Case(
                When(kind=JobEventKind.STARTED, at__gte=start, at__lt=end, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            ),
        )
        .values("job_id", "id", "at", "ready_at", "submitted", "team", "counted")
        .order_by()
    )
    sql, params = inner.query.sql_with_params()
    quote = connection.ops.quote_name
    seconds = SECONDS_BETWEEN_SQL[connection.vendor].format(
        end=f"sub.{quote('at')}", start=f"COALESCE(sub.{quote('ready_at')}, sub.{quote('submitted')})"
    )
    outer = (
        f"SELECT sub.{quote('team')}, {seconds} FROM ({sql}) sub WHERE sub.{quote('counted')} = 1 "
        f"ORDER BY sub.{quote('job_id')}, sub.{quote('at')}, sub.{quote('id')}"
    )
    waits: dict[int, list[float]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(outer, params)
        for team_id, wait in cursor.fetchall():
            # Milliseconds: SQLite's julianday() is exact to a few microseconds only.
            waits[team_id].append(max(0.0, round(float(wait), 3)))
    return dict(waits)


def _job_events(
    start: datetime,
    end: datetime,
    team_ids: Sequence[int] | None,
    instance_type_ids: Sequence[int] | None,
) -> Iterable[tuple[Any, ...]]:
    """Every event of the jobs that started, were preempted or ended in [start, end), in order:
    one query (the filter on jobs is a subquery). Events of other kinds or after ``end`` are
    read too and passed over by the walk: a condition on the kind or the time would have
    SQLite read every such event through the (kind, at) index instead of these jobs' events."""
    active = JobEvent.objects.filter(
        at__gte=start,
        at__lt=end,
        kind__in=[JobEventKind.STARTED, JobEventKind.PREEMPTED, JobEventKind.FINISHED, JobEventKind.FAILED],
    )
    if team_ids:
        active = active.filter(job__team_id__in=team_ids)
    if instance_type_ids:
        active = active.filter(job__instance_type_id__in=instance_type_ids)
    return (
        JobEvent.objects.filter(job_id__in=active.values("job_id"))
        .values_list(
            "job_id",
            "job__team_id",
            "job__gpus",
            "kind",
            "at",
            "preemptor__team_id",
            "ran_s",
            "lost_gpu_seconds",
        )
        .order_by("job_id", "at", "id")
    )


def activity_by_team(
    start: datetime, end: datetime, rows: Iterable[tuple[Any, ...]]
) -> dict[int, JobActivity]:
    """Walk each job's events in order (``_job_events``' rows; no database).

    * waits are left out (``job_waits`` reads them, one number per start);
    * GPU-hours lost = for each preemption in the span, what the event records it lost (the
      work since the last checkpoint); for an event recorded without it, the GPUs times the run
      it cut short (the whole run, even the part before the span: that work is lost), as the
      history sampler counts it (``services.history.victim_cost``);
    * a preemption is caused by the preemptor's team (in-team preemptions count on both sides).
    """
    started: dict[int, set[int]] = defaultdict(set)
    finished: dict[int, int] = defaultdict(int)
    failed: dict[int, int] = defaultdict(int)
    preempted: dict[int, int] = defaultdict(int)
    caused: dict[int, int] = defaultdict(int)
    lost: dict[int, float] = defaultdict(float)
    job = None
    run_start: datetime | None = None
    for job_id, team_id, gpus, kind, at, preemptor_team, ran_s, lost_gpu_seconds in rows:
        if job_id != job:
            job, run_start = job_id, None
        inside = start <= at < end
        if kind == JobEventKind.STARTED:
            if inside:
                started[team_id].add(job_id)
            run_start = at
        elif kind == JobEventKind.PREEMPTED:
            if inside:
                preempted[team_id] += 1
                if preemptor_team is not None:
                    caused[preemptor_team] += 1
                _, lost_s = victim_cost(
                    at=at, gpus=gpus, ran_s=ran_s, lost_gpu_seconds=lost_gpu_seconds, run_start=run_start
                )
                lost[team_id] += lost_s / 3600
            run_start = None
        elif kind in (JobEventKind.FINISHED, JobEventKind.FAILED):
            if inside:
                (finished if kind == JobEventKind.FINISHED else failed)[team_id] += 1
            run_start = None
    teams = set(started) | set(finished) | set(failed) | set(preempted) | set(caused)
    return {
        team_id: JobActivity(
            started=len(started[team_id]),
            finished=finished[team_id],
            failed=failed[team_id],
            preempted=preempted[team_id],
            preemptions_caused=caused[team_id],
            gpu_hours_lost=lost[team_id],
        )
        for team_id in teams
    }
