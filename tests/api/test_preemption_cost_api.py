"""The API's side of preemption cost (docs/preemption.md): the minimum runtimes of the policy
and of a class, a job's checkpoint interval, and what preemptions cost a job, read back; bad
values answer 400 naming the field and the value (a grace too, docs/preemption.md section 5)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.models import AuditEntry, ClusterPolicy, Job, JobEvent, PriorityClass
from tests import factories as f


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def job_body(**overrides):
    return {
        "team": "team-a",
        "name": "train",
        "instance_type": "ml.p5.48xlarge",
        "gpus": 4,
        "command": "python train.py",
        **overrides,
    }


def test_admin_sets_the_minimum_runtimes_and_they_are_audited(personas):
    admin = client_for(personas.cluster_admin)
    response = admin.patch("/api/v1/policy/", {"min_runtime_s": 600}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["min_runtime_s"], response.json()["preemption_grace_s"]) == (600, 0)
    response = admin.post(
        "/api/v1/priority-classes/", {"name": "urgent", "weight": 99, "min_runtime_s": 60}, format="json"
    )
    assert response.status_code == 201, response.content
    assert PriorityClass.objects.get(name="urgent").min_runtime_s == 60
    assert ClusterPolicy.objects.get().min_runtime_s == 600
    assert AuditEntry.objects.filter(field="min_runtime_s", new_value="600").exists()
    assert AuditEntry.objects.filter(
        object_type="priority class", new_value__contains="min_runtime_s: 60"
    ).exists()


@pytest.mark.parametrize(
    ("url", "method", "data", "field", "words"),
    [
        ("/api/v1/policy/", "patch", {"min_runtime_s": -1}, "min_runtime_s", ["-1"]),
        ("/api/v1/policy/", "patch", {"min_runtime_s": "ten"}, "min_runtime_s", ["ten"]),
        ("/api/v1/policy/", "patch", {"min_runtime_s": 10**8}, "min_runtime_s", [str(10**8)]),
        ("/api/v1/policy/", "patch", {"preemption_grace_s": 86_401}, "preemption_grace_s", ["86401"]),
        ("/api/v1/policy/", "patch", {"preemption_grace_s": -1}, "preemption_grace_s", ["-1"]),
        ("/api/v1/policy/", "patch", {"preemption_grace_s": "soon"}, "preemption_grace_s", ["soon"]),
        (
            "/api/v1/priority-classes/",
            "post",
            {"name": "urgent", "weight": 5, "preemption_grace_s": 90_000},
            "preemption_grace_s",
            ["90000"],
        ),
        (
            "/api/v1/priority-classes/",
            "post",
            {"name": "urgent", "weight": 5, "min_runtime_s": -5},
            "min_runtime_s",
            ["-5"],
        ),
    ],
)
def test_bad_policy_values_answer_400_naming_the_field_and_value(personas, url, method, data, field, words):
    before = AuditEntry.objects.count()
    response = getattr(client_for(personas.cluster_admin), method)(url, data, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    text = " ".join(map(str, errors[field]))
    for word in words:
        assert word in text, (word, text)
    assert AuditEntry.objects.count() == before
    assert ClusterPolicy.objects.get().preemption_grace_s == 0


def test_a_job_submitted_with_a_checkpoint_interval_shows_it_and_its_costs(personas):
    response = client_for(personas.member).post(
        "/api/v1/jobs/", job_body(checkpoint_interval_s=1800), format="json"
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["checkpoint_interval_s"], data["progress_kept_s"], data["lost_gpu_seconds"]) == (1800, 0, 0)
    assert Job.objects.get(pk=data["id"]).checkpoint_interval_s == 1800


@pytest.mark.parametrize(
    ("value", "words"),
    [(0, ["0"]), (-30, ["-30"]), ("often", ["often"]), (10**9, [str(10**9)])],
)
def test_a_bad_checkpoint_interval_answers_400_naming_it_and_the_value(personas, value, words):
    response = client_for(personas.member).post(
        "/api/v1/jobs/", job_body(checkpoint_interval_s=value), format="json"
    )
    assert response.status_code == 400, response.content
    errors = response.json()
    assert "checkpoint_interval_s" in errors, errors
    text = " ".join(map(str, errors["checkpoint_interval_s"]))
    for word in words:
        assert word in text, (word, text)
    assert not Job.objects.exists()


def test_a_jobs_history_has_what_each_preemption_cost(personas):
    job = f.make_job(personas.team, personas.instance_type, 4, lost_gpu_seconds=480.0, progress_kept_s=60.0)
    JobEvent.objects.create(
        job=job, kind="preempted", at=timezone.now(), reason="reclaim", ran_s=180.0, lost_gpu_seconds=480.0
    )
    client = client_for(personas.member)
    events = client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [(e["kind"], e["ran_s"], e["lost_gpu_seconds"]) for e in events] == [("preempted", 180.0, 480.0)]
    data = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (data["progress_kept_s"], data["lost_gpu_seconds"]) == (60.0, 480.0)


def test_admin_sets_the_preemption_graces_and_reads_them_back(personas):
    """docs/preemption.md section 5: the policy's grace and a class's own (null: the policy's)."""
    admin = client_for(personas.cluster_admin)
    response = admin.patch("/api/v1/policy/", {"preemption_grace_s": 30}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["preemption_grace_s"] == 30
    response = admin.post(
        "/api/v1/priority-classes/",
        {"name": "urgent", "weight": 99, "preemption_grace_s": 120},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["preemption_grace_s"] == 120
    listed = {pc["name"]: pc for pc in admin.get("/api/v1/priority-classes/").json()["results"]}
    assert (listed["urgent"]["preemption_grace_s"], listed["training"]["preemption_grace_s"]) == (120, None)
    assert ClusterPolicy.objects.get().preemption_grace_s == 30
    assert AuditEntry.objects.filter(field="preemption_grace_s", old_value="0", new_value="30").exists()


def test_a_terminating_job_says_so_through_the_api(personas):
    """docs/preemption.md section 5: a victim within its grace shows when it was signalled,
    when its grace ends and the job it stops for, as its page does; other jobs show nulls."""
    from datetime import timedelta

    now = timezone.now().replace(microsecond=0)
    preemptor = f.make_job(personas.other_team, personas.instance_type, 8)
    victim = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        state="running",
        started_at=now - timedelta(seconds=100),
        nodes=[[personas.nodes[0].name, 8]],
        terminating_since=now - timedelta(seconds=10),
        grace_ends_at=now + timedelta(seconds=20),
        preempted_for=preemptor,
        preempted_reason="reclaim",
    )
    data = client_for(personas.member).get(f"/api/v1/jobs/{victim.pk}/").json()
    assert data["grace_ends_at"] is not None and data["terminating_since"] is not None
    assert (data["preempted_for"], data["preempted_reason"]) == (preemptor.pk, "reclaim")
    other = client_for(personas.other_member).get(f"/api/v1/jobs/{preemptor.pk}/").json()
    assert (other["terminating_since"], other["grace_ends_at"], other["preempted_for"]) == (None, None, None)
