"""Fairness over time from the recorded history (docs/fairness.md, selectors/fairness.py)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from allocations.models import ClusterPolicy, HistoryPeriod, TeamUsageMinute, TeamUsageRollup
from allocations.selectors.fairness import borrowed_lately
from allocations.selectors.snapshot import build_snapshot
from tests.conftest import Personas

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def minute(personas: Personas, team: str, ago: timedelta, borrowed: int) -> TeamUsageMinute:
    return TeamUsageMinute.objects.create(
        minute=NOW - ago,
        team=personas.team if team == "team-a" else personas.other_team,
        instance_type=personas.instance_type,
        quota=8,
        used=8 + borrowed,
        borrowed=borrowed,
    )


def test_borrowed_lately_decays_each_minute_by_its_age(personas: Personas) -> None:
    """4 GPUs borrowed for the minute one half-life ago count 4 * 60 / 2 GPU-seconds; a minute
    older than eight half-lives is not read, nor the minute ``now`` starts."""
    minute(personas, "team-a", timedelta(hours=1), 4)
    minute(personas, "team-a", timedelta(hours=2), 2)
    minute(personas, "team-a", timedelta(hours=9), 100)  # beyond eight half-lives
    minute(personas, "team-b", timedelta(minutes=0), 8)  # not before now
    minute(personas, "team-b", timedelta(minutes=30), 1)
    lately = borrowed_lately(NOW, 3600)
    assert lately["team-a"] == pytest.approx(4 * 60 * 0.5 + 2 * 60 * 0.25)
    assert lately["team-b"] == pytest.approx(60 * 2**-0.5)
    assert borrowed_lately(NOW, 0) == {}


@override_settings(HISTORY_MINUTE_DAYS=1)
def test_borrowed_lately_reads_hour_rollups_where_minutes_are_no_longer_kept(personas: Personas) -> None:
    """A half-life of a day reads eight days back: the hours before the minutes kept come from
    the hour rollups, weighted at the middle of their hour, and a minute there is not counted
    twice."""
    start = NOW - timedelta(days=3, minutes=30)
    TeamUsageRollup.objects.create(
        period=HistoryPeriod.HOUR,
        start=start,
        team=personas.team,
        instance_type=personas.instance_type,
        borrowed_gpu_minutes=600,
    )
    minute(personas, "team-a", timedelta(days=3), 5)  # inside that hour: the rollup counts it
    minute(personas, "team-a", timedelta(hours=12), 2)
    lately = borrowed_lately(NOW, 86400)
    assert lately["team-a"] == pytest.approx(600 * 60 * 2**-3 + 2 * 60 * 0.5**0.5)


def test_build_snapshot_brings_the_decayed_average_when_the_history_counts(personas: Personas) -> None:
    minute(personas, "team-a", timedelta(hours=1), 4)
    snapshot = build_snapshot(NOW)
    assert snapshot.borrowed_history == {}  # off by default: the share of this instant alone
    assert (snapshot.policy.fair_share_half_life_s, snapshot.policy.fair_share_history_percent) == (0.0, 0)
    ClusterPolicy.objects.update(fair_share_half_life_s=3600, fair_share_history_percent=40)
    snapshot = build_snapshot(NOW)
    assert snapshot.policy.fair_share_history_percent == 40
    assert snapshot.borrowed_history == {"team-a": pytest.approx(120 * math.log(2) / 3600)}


def test_build_snapshot_query_count_does_not_grow_with_history(
    personas: Personas, django_assert_num_queries: object
) -> None:
    """One aggregate SELECT for the history, however many minutes were recorded."""
    ClusterPolicy.objects.update(fair_share_half_life_s=600, fair_share_history_percent=50)
    for k in range(1, 11):
        minute(personas, "team-a", timedelta(minutes=k), 2)
    with django_assert_num_queries(8):  # type: ignore[operator]
        small = build_snapshot(NOW)
    TeamUsageMinute.objects.bulk_create(
        TeamUsageMinute(
            minute=NOW - timedelta(minutes=k),
            team=team,
            instance_type=personas.instance_type,
            borrowed=1,
        )
        for k in range(11, 600)
        for team in (personas.team, personas.other_team)
    )
    with django_assert_num_queries(8):  # type: ignore[operator]
        large = build_snapshot(NOW)
    assert large.borrowed_history["team-a"] > small.borrowed_history["team-a"]
    assert set(large.borrowed_history) == {"team-a", "team-b"}
