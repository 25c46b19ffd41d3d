"""Borrowed lately on the team's pages (docs/fairness.md, Where it is shown)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from allocations.models import ClusterPolicy, TeamUsageMinute
from allocations.selectors.fairness import BorrowedLately, team_borrowed_lately
from allocations.selectors.snapshot import build_snapshot
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def member_client(personas: Personas) -> Client:
    client = Client()
    client.force_login(personas.member)
    return client


def borrowed_an_hour_ago(personas: Personas, gpus: int) -> None:
    TeamUsageMinute.objects.create(
        minute=(timezone.now() - timedelta(hours=1)).replace(second=0, microsecond=0),
        team=personas.team,
        instance_type=personas.instance_type,
        quota=8,
        used=8 + gpus,
        borrowed=gpus,
    )


@pytest.mark.parametrize("url_name", ["allocations:team_queue", "allocations:dashboard_team"])
def test_team_pages_show_borrowed_lately_only_while_history_counts(personas: Personas, url_name: str) -> None:
    borrowed_an_hour_ago(personas, 60)  # 60 GPUs for a minute: 1 GPU-hour, about half of it left
    url = reverse(url_name, kwargs={"team": "team-a"})
    page = member_client(personas).get(url).content.decode()
    assert 'id="borrowed-lately"' not in page
    ClusterPolicy.objects.update(fair_share_half_life_s=3600, fair_share_history_percent=25)
    page = member_client(personas).get(url).content.decode()
    assert 'id="borrowed-lately"' in page
    assert "0.5 GPU-hours" in page
    assert "25% of the team" in page


def test_borrowed_lately_of_a_snapshot_is_its_history_in_gpu_hours(personas: Personas) -> None:
    ClusterPolicy.objects.update(fair_share_half_life_s=7200, fair_share_history_percent=50)
    snapshot = build_snapshot(timezone.now())
    assert team_borrowed_lately(snapshot, "team-a") == BorrowedLately(0.0, 7200.0, 50)
    snapshot = replace(snapshot, borrowed_history={"team-a": 3.0})
    lately = team_borrowed_lately(snapshot, "team-a")
    assert lately is not None and lately.gpu_hours == pytest.approx(3.0 * 2 / math.log(2))
