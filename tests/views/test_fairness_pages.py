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


@pytest.mark.parametrize(
    ("url_name", "kwargs"),
    [
        ("allocations:team_queue", {"team": "team-a"}),
        ("allocations:dashboard_team", {"team": "team-a"}),
        ("allocations:team_detail", {"name": "team-a"}),
    ],
)
def test_team_pages_show_borrowed_lately_only_while_history_counts(
    personas: Personas, url_name: str, kwargs: dict[str, str]
) -> None:
    borrowed_an_hour_ago(personas, 60)  # 60 GPUs for a minute: 1 GPU-hour, about half of it left
    url = reverse(url_name, kwargs=kwargs)
    client = Client()
    client.force_login(personas.cluster_admin if url_name == "allocations:team_detail" else personas.member)
    page = client.get(url).content.decode()
    assert 'id="borrowed-lately"' not in page
    ClusterPolicy.objects.update(fair_share_half_life_s=3600, fair_share_history_percent=25)
    page = client.get(url).content.decode()
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


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fair_share_half_life_s", "-5", "Fair-share half-life must be 0 or more seconds; got -5."),
        ("fair_share_half_life_s", "soon", "Fair-share half-life must be a whole number of seconds; got"),
        ("fair_share_history_percent", "101", "Fair-share history percent must be at most 100; got 101."),
    ],
)
def test_the_policy_form_names_a_bad_history_setting_and_its_value(
    personas: Personas, field: str, value: str, message: str
) -> None:
    client = Client()
    client.force_login(personas.cluster_admin)
    data = {
        "form": "policy",
        "policy-idle_allocation": "fair-share",
        "policy-task_ranking": "priority",
        "policy-queueing": "best-effort-fifo",
        "policy-share_unallocated": "on",
        f"policy-{field}": value,
    }
    response = client.post(reverse("allocations:policy"), data)
    assert response.status_code == 200
    assert message in response.content.decode().replace("&#x27;", "'")
    assert ClusterPolicy.objects.get().fair_share_half_life_s == 0


def test_the_policy_form_turns_the_history_on(personas: Personas) -> None:
    client = Client()
    client.force_login(personas.cluster_admin)
    data = {
        "form": "policy",
        "policy-idle_allocation": "fair-share",
        "policy-task_ranking": "priority",
        "policy-queueing": "best-effort-fifo",
        "policy-fair_share_half_life_s": "86400",
        "policy-fair_share_history_percent": "30",
    }
    assert client.post(reverse("allocations:policy"), data).status_code == 302
    policy = ClusterPolicy.objects.get()
    assert (policy.fair_share_half_life_s, policy.fair_share_history_percent) == (86400, 30)
