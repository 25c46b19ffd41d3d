"""What a team may ask for, through the API (docs/limits.md): cluster admins set the limits on
the team (classes by name, audited), bad values answer 400 naming the field and the value, and a
submission or resubmission past a limit answers 400 with the limit and the numbers."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from allocations.choices import JobState
from allocations.models import AuditEntry, Job, Team
from allocations.services import policy as services
from tests import factories as f

TEAM = "/api/v1/teams/team-a/"
JOBS = "/api/v1/jobs/"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def job(**overrides):
    return {
        "team": "team-a",
        "name": "train",
        "instance_type": "ml.p5.48xlarge",
        "gpus": 4,
        "command": "python train.py",
        **overrides,
    }


def test_a_cluster_admin_sets_the_limits_by_name(personas):
    limits = {
        "allowed_priority_classes": ["training", "experimentation"],
        "default_priority_class": "training",
        "max_gpus_per_job": 16,
        "max_pending_jobs_per_member": 5,
        "max_pending_jobs": 20,
    }
    response = client_for(personas.cluster_admin).patch(TEAM, limits, format="json")
    assert response.status_code == 200, response.content
    assert {k: response.json()[k] for k in limits} == limits
    assert client_for(personas.member).get(TEAM).json()["max_gpus_per_job"] == 16
    assert AuditEntry.objects.filter(object_repr="team-a").count() == 5


def test_a_team_is_created_with_its_limits(personas):
    response = client_for(personas.cluster_admin).post(
        "/api/v1/teams/",
        {
            "name": "vision",
            "allowed_priority_classes": ["training"],
            "default_priority_class": "training",
            "max_gpus_per_job": 16,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    team = Team.objects.get(name="vision")
    assert (team.allowed_priority_classes, team.default_priority_class.name, team.max_gpus_per_job) == (
        ["training"],
        "training",
        16,
    )
    created = AuditEntry.objects.get(object_repr="vision", action="create").new_value
    assert 'allowed_priority_classes: ["training"]' in created and "max_gpus_per_job: 16" in created


def test_a_member_cannot_change_the_limits(personas):
    response = client_for(personas.team_admin).patch(TEAM, {"max_gpus_per_job": 64}, format="json")
    assert response.status_code == 403
    assert Team.objects.get(pk=personas.team.pk).max_gpus_per_job is None


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"allowed_priority_classes": ["urgent"]}, "allowed_priority_classes", "no class is called 'urgent'"),
        ({"allowed_priority_classes": "training"}, "allowed_priority_classes", "'training'"),
        ({"default_priority_class": "urgent"}, "default_priority_class", "no priority class called urgent"),
        ({"max_gpus_per_job": 0}, "max_gpus_per_job", "must be 1 or more GPUs; got 0"),
        ({"max_pending_jobs_per_member": -3}, "max_pending_jobs_per_member", "-3"),
        ({"max_pending_jobs": "many"}, "max_pending_jobs", "'many'"),
        ({"max_running_gpus_per_member": 0}, "max_running_gpus_per_member", "must be 1 or more GPUs; got 0"),
        ({"max_running_gpus_per_member": "lots"}, "max_running_gpus_per_member", "'lots'"),
        (
            {"allowed_priority_classes": ["training"], "default_priority_class": "inference"},
            "default_priority_class",
            "Default priority class 'inference' is not one the team may use (training).",
        ),
    ],
)
def test_bad_limits_answer_400_naming_the_field_and_the_value(personas, changes, field, words):
    response = client_for(personas.cluster_admin).patch(TEAM, changes, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    assert not AuditEntry.objects.exists()


def test_a_submission_past_a_limit_answers_400_with_the_numbers(personas):
    services.team_update(
        actor=None, team=personas.team, allowed_priority_classes=["experimentation"], max_gpus_per_job=4
    )
    member = client_for(personas.member)
    response = member.post(JOBS, job(priority_class="inference"), format="json")
    assert response.status_code == 400
    assert response.json() == {
        "priority_class": [
            "Team team-a may submit priority classes experimentation; this job asks for inference."
        ]
    }
    response = member.post(JOBS, job(gpus=8), format="json")
    assert response.json() == {"gpus": ["Team team-a allows at most 4 GPUs per job; this job asks for 8."]}
    assert not Job.objects.exists()


def test_a_submission_past_the_pending_jobs_answers_400(personas):
    services.team_update(actor=None, team=personas.team, max_pending_jobs=1)
    member = client_for(personas.member)
    assert member.post(JOBS, job(), format="json").status_code == 201
    response = member.post(JOBS, job(), format="json")
    assert response.status_code == 400
    assert response.json() == {"__all__": ["Team team-a allows at most 1 pending job; it has 1 pending."]}


def test_a_job_without_a_class_gets_the_teams_default(personas):
    services.team_update(
        actor=None, team=personas.team, default_priority_class=personas.priority_classes["training"]
    )
    response = client_for(personas.member).post(JOBS, job(), format="json")
    assert response.json()["priority_class"] == "training"


def test_a_resubmit_past_a_limit_answers_400(personas):
    ended = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        state=JobState.FAILED,
        command="x",
    )
    services.team_update(actor=None, team=personas.team, max_gpus_per_job=4)
    response = client_for(personas.member).post(f"{JOBS}{ended.pk}/resubmit/")
    assert response.status_code == 400
    assert response.json() == {"gpus": ["Team team-a allows at most 4 GPUs per job; this job asks for 8."]}


def test_a_cluster_admin_sets_the_most_gpus_running_per_member(personas):
    """docs/limits.md: the engine's limit per member is set and cleared like the others, audited."""
    admin = client_for(personas.cluster_admin)
    response = admin.patch(TEAM, {"max_running_gpus_per_member": 8}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["max_running_gpus_per_member"] == 8
    assert Team.objects.get(pk=personas.team.pk).max_running_gpus_per_member == 8
    assert admin.patch(TEAM, {"max_running_gpus_per_member": None}, format="json").status_code == 200
    assert Team.objects.get(pk=personas.team.pk).max_running_gpus_per_member is None
    changes = AuditEntry.objects.filter(field="max_running_gpus_per_member").order_by("pk")
    assert [(e.old_value, e.new_value) for e in changes] == [("(none)", "8"), ("8", "(none)")]
    response = client_for(personas.team_admin).patch(TEAM, {"max_running_gpus_per_member": 64}, format="json")
    assert response.status_code == 403
