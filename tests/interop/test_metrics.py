"""/metrics: the figures of a hand-built cluster state, a constant number of queries, the token."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from allocations.models import Cluster, CycleRun, JobEvent
from tests import factories as f

pytestmark = pytest.mark.django_db
TOKEN = "s3cret-scrape-token"


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, token=TOKEN):
    response = client.get(reverse("allocations:metrics"), HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def running(team, instance_type, gpus, node):
    return f.make_job(
        team, instance_type, gpus, state="running", started_at=timezone.now(), nodes=[[node.name, gpus]]
    )


@pytest.fixture
def busy_cluster(personas):
    """Two nodes of 8 GPUs; team-a (quota 8) runs 12 GPUs, borrowing 4 of team-b's idle quota;
    team-b runs nothing and has 2 jobs pending (10 GPUs); 3 preemptions recorded."""
    p = personas
    node_a, node_b = p.nodes
    running(p.team, p.instance_type, 8, node_a)
    running(p.team, p.instance_type, 4, node_b)
    f.make_job(p.other_team, p.instance_type, 8)
    victim = f.make_job(p.other_team, p.instance_type, 2)
    now = timezone.now()
    for reason in ("reclaim", "reclaim", "in-team"):
        JobEvent.objects.create(job=victim, kind="preempted", at=now, reason=reason)
    CycleRun.objects.create(
        started_at=now - timedelta(seconds=2),
        finished_at=now - timedelta(seconds=1.75),
        trigger="test",
        ok=True,
    )
    CycleRun.objects.create(
        started_at=now - timedelta(seconds=30),
        finished_at=now - timedelta(seconds=20),
        trigger="test",
        ok=False,
    )
    Cluster.objects.filter(pk=1).update(backend_healthy=False)
    return p


def labels(team, instance_type="ml.p5.48xlarge"):
    return (("instance_type", instance_type), ("team", team))


def test_metrics_of_a_hand_built_state(client, busy_cluster, token):
    m = scrape(client)
    assert m[("gpugov_team_quota_gpus", labels("team-a"))] == 8
    assert m[("gpugov_team_used_gpus", labels("team-a"))] == 12
    assert m[("gpugov_team_borrowed_gpus", labels("team-a"))] == 4
    assert m[("gpugov_team_lent_gpus", labels("team-b"))] == 4
    assert m[("gpugov_team_idle_quota_gpus", labels("team-b"))] == 4
    assert m[("gpugov_team_pending_gpus", labels("team-b"))] == 10
    assert m[("gpugov_team_pending_jobs", labels("team-b"))] == 2
    assert m[("gpugov_team_pending_jobs", labels("team-a"))] == 0
    assert m[("gpugov_capacity_gpus", (("instance_type", "ml.p5.48xlarge"),))] == 16
    assert m[("gpugov_allocated_gpus", (("instance_type", "ml.p5.48xlarge"),))] == 12
    assert m[("gpugov_preemptions_total", (("reason", "reclaim"),))] == 2
    assert m[("gpugov_preemptions_total", (("reason", "in-team"),))] == 1
    # The most recently finished cycle, not the longest one.
    assert m[("gpugov_last_cycle_duration_seconds", ())] == pytest.approx(0.25)
    assert m[("gpugov_last_cycle_ok", ())] == 1
    assert m[("gpugov_backend_healthy", (("backend", "simulated"),))] == 0


def test_an_empty_installation_scrapes_without_error(client, db, token):
    m = scrape(client)
    assert ("gpugov_last_cycle_duration_seconds", ()) not in m
    assert not [key for key in m if key[0] == "gpugov_backend_healthy"]


def test_a_scrape_takes_the_same_number_of_queries_whatever_the_data(client, personas, token):
    def count_queries():
        with CaptureQueriesContext(connection) as queries:
            scrape(client)
        return len(queries)

    small = count_queries()
    for i in range(20):
        team = f.make_team(f"extra-{i}", {personas.instance_type: 1})
        for _ in range(3):
            job = f.make_job(team, personas.instance_type, 1)
            JobEvent.objects.create(job=job, kind="preempted", at=timezone.now(), reason="fair-share")
        CycleRun.objects.create(
            started_at=timezone.now(), finished_at=timezone.now(), trigger="test", ok=True
        )
    assert count_queries() == small


def test_without_a_configured_token_metrics_are_off(client, db, settings):
    settings.METRICS_TOKEN = ""
    response = client.get(reverse("allocations:metrics"), HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 404
    assert "Metrics are off: set METRICS_TOKEN" in response.content.decode()


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"],
    ids=["missing", "wrong", "other-scheme", "empty", "longer"],
)
def test_a_missing_or_wrong_token_is_refused(client, personas, token, header):
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get(reverse("allocations:metrics"), **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"gpugov_team" not in response.content


def test_a_session_is_not_enough(client, personas, token):
    client.force_login(personas.cluster_admin)
    assert client.get(reverse("allocations:metrics")).status_code == 401
