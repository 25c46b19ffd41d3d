"""Fairness over time: each team's borrowed GPUs decayed with the policy's half-life
(docs/fairness.md), read from the usage history the sampler records.

``borrowed_lately(now, half_life_s)`` is one aggregate query, whatever the number of rows:
the minutes (``TeamUsageMinute``, one sample a minute) within eight half-lives of ``now``, and
for the part of that span older than the minutes are kept, the hour rollups (their GPU-minutes
weighted at the middle of their hour). Older borrowing weighs less than 1/256 and is left out,
so the rows read stop growing with the history once it is eight half-lives long. Being read
from the database, it survives restarts of the loop.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, FloatField, Func, Sum, Value
from django.db.models.functions import Power

from allocations import engine
from allocations.models import ClusterPolicy, HistoryPeriod, TeamUsageMinute, TeamUsageRollup

# Borrowing older than this many half-lives weighs less than 2 ** -8 and is not read.
HALF_LIVES_READ = 8
HOUR = timedelta(hours=1)


class _Seconds(Func):
    """Unix seconds of a datetime column, as a float."""

    output_field = FloatField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="CAST(EXTRACT(EPOCH FROM %(expressions)s) AS double precision)",
            **extra,
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # julianday() reads Django's stored text; day 2440587.5 is the Unix epoch.
        return self.as_sql(
            compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)", **extra
        )


def _decayed(
    column: str, time_column: str, seconds_per_unit: float, offset: float, now: float, half_life: float
) -> Sum:
    """``SUM(column * seconds_per_unit * 0.5 ** ((now - (time + offset)) / half_life))``."""
    age = (Value(now) - _Seconds(F(time_column)) - Value(offset)) / Value(half_life)
    return Sum(
        F(column) * Value(seconds_per_unit) * Power(Value(0.5), age, output_field=FloatField()),
        output_field=FloatField(),
    )


def borrowed_lately(now: datetime, half_life_s: float) -> dict[str, float]:
    """Per team name, its borrowed GPU-seconds before ``now``, each weighted ``2 ** (-age /
    half_life_s)`` (summed over instance types). Empty when the half-life is 0."""
    if half_life_s <= 0:
        return {}
    cutoff = now - timedelta(seconds=HALF_LIVES_READ * half_life_s)
    # Minutes from the oldest whole hour that is surely still kept; hours before that.
    kept = now - timedelta(days=settings.HISTORY_MINUTE_DAYS) + HOUR
    minutes_from = max(cutoff, kept.replace(minute=0, second=0, microsecond=0))
    at = now.timestamp()
    minutes = (
        TeamUsageMinute.objects.filter(minute__gte=minutes_from, minute__lt=now, borrowed__gt=0)
        .values("team__name")
        .annotate(decayed=_decayed("borrowed", "minute", 60.0, 0.0, at, half_life_s))
        .values_list("team__name", "decayed")
        .order_by()
    )
    query = minutes
    if cutoff < minutes_from:
        hours = (
            TeamUsageRollup.objects.filter(
                period=HistoryPeriod.HOUR,
                start__gte=cutoff,
                start__lt=minutes_from,
                borrowed_gpu_minutes__gt=0,
            )
            .values("team__name")
            .annotate(decayed=_decayed("borrowed_gpu_minutes", "start", 60.0, 1800.0, at, half_life_s))
            .values_list("team__name", "decayed")
            .order_by()
        )
        query = minutes.union(hours, all=True)
    totals: dict[str, float] = defaultdict(float)
    for name, decayed in query:
        totals[name] += float(decayed or 0.0)
    return dict(totals)


def borrowed_history(lately: Mapping[str, float], half_life_s: float) -> dict[str, float]:
    """Decayed GPU-seconds as the engine's ``Snapshot.borrowed_history``: the decayed average
    of borrowed GPUs, so that a team borrowing b GPUs all along has b, comparable with its
    borrowing now (the weights' integral is ``half_life_s / ln 2``)."""
    if half_life_s <= 0:
        return {}
    return {name: seconds * math.log(2) / half_life_s for name, seconds in lately.items()}


@dataclass(frozen=True, slots=True)
class BorrowedLately:
    """What a team page shows of fairness over time: the team's borrowed GPU-hours decayed
    with the half-life, and the settings."""

    gpu_hours: float
    half_life_s: float
    history_percent: int

    @property
    def half_life_hours(self) -> float:
        return self.half_life_s / 3600


def team_borrowed_lately(snapshot: engine.Snapshot, team: str) -> BorrowedLately | None:
    """From a loop's snapshot (``build_snapshot``, no query): the team's borrowing lately, or
    None while fairness over time is off (the snapshot then carries no history)."""
    policy = snapshot.policy
    half_life = policy.fair_share_half_life_s
    if half_life <= 0 or policy.fair_share_history_percent <= 0:
        return None
    average = snapshot.borrowed_history.get(team, 0.0)
    return BorrowedLately(
        average * half_life / math.log(2) / 3600, half_life, policy.fair_share_history_percent
    )


def team_borrowed_lately_now(team: str, now: datetime) -> BorrowedLately | None:
    """As ``team_borrowed_lately``, read from the database (two queries): for pages that do not
    build a snapshot (the team dashboard)."""
    row = (
        ClusterPolicy.objects.filter(cluster_id=1)
        .values_list("fair_share_half_life_s", "fair_share_history_percent")
        .first()
    )
    if row is None or row[0] <= 0 or row[1] <= 0:
        return None
    seconds = borrowed_lately(now, row[0]).get(team, 0.0)
    return BorrowedLately(seconds / 3600, float(row[0]), row[1])
