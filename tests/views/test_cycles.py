"""The allocation cycles pages: for cluster administrators only, with phases, counts and notes."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from allocations.models import CycleRun
from allocations.services.loop import run_allocation_cycle
from tests import factories as f
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def client_for(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_lists_cycles_with_phase_durations_and_counts(personas: Personas) -> None:
    f.make_job(personas.team, personas.instance_type, 8)
    run = run_allocation_cycle(trigger="test")
    assert run is not None

    response = client_for(personas.cluster_admin).get(reverse("allocations:cycles"))

    assert response.status_code == 200
    page = response.content.decode()
    assert reverse("allocations:cycle_detail", args=[run.pk]) in page
    assert f"{run.engine_ms:.1f}" in page
    assert "Last 100 cycles" in page


def test_detail_shows_corrections_errors_and_phases(personas: Personas) -> None:
    run = CycleRun.objects.create(
        started_at="2026-11-29T12:00:00Z",
        trigger="beat",
        ok=False,
        backend_outage=True,
        sync_ms=12.5,
        corrections=1,
        notes=["job 7 runs in the backend but was pending: adopted as running"],
        errors="backend unreachable: connection refused",
    )
    response = client_for(personas.cluster_admin).get(reverse("allocations:cycle_detail", args=[run.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "adopted as running" in page
    assert "connection refused" in page
    assert "backend outage" in page
    assert "12.5" in page


def test_problems_filter_keeps_only_cycles_that_need_a_look(personas: Personas) -> None:
    fine = CycleRun.objects.create(started_at="2026-11-29T12:00:00Z", trigger="beat", ok=True)
    bad = CycleRun.objects.create(started_at="2026-11-29T12:00:05Z", trigger="beat", ok=True, corrections=2)
    page = client_for(personas.cluster_admin).get(reverse("allocations:cycles") + "?show=problems")
    text = page.content.decode()
    assert reverse("allocations:cycle_detail", args=[bad.pk]) in text
    assert reverse("allocations:cycle_detail", args=[fine.pk]) not in text


@pytest.mark.parametrize("who", ["team_admin", "member", "viewer", "outsider"])
def test_cycles_are_for_cluster_administrators_only(personas: Personas, who: str) -> None:
    run = CycleRun.objects.create(started_at="2026-11-29T12:00:00Z", trigger="beat", ok=True)
    client = client_for(getattr(personas, who))
    assert client.get(reverse("allocations:cycles")).status_code == 403
    assert client.get(reverse("allocations:cycle_detail", args=[run.pk])).status_code == 403


def test_anonymous_users_are_sent_to_log_in(personas: Personas) -> None:
    response = Client().get(reverse("allocations:cycles"))
    assert response.status_code == 302 and "login" in response["Location"]


def test_unknown_cycle_is_404(personas: Personas) -> None:
    assert (
        client_for(personas.cluster_admin).get(reverse("allocations:cycle_detail", args=[999])).status_code
        == 404
    )
