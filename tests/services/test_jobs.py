"""Job and membership services: submission rules (POLICY.md sections 1 and 2), events, cycles
requested on commit, cancel/resubmit, and team membership with its audit trail."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from allocations.choices import JobEventKind, JobState, Role
from allocations.models import AuditEntry, Job, JobEvent, Membership, TeamQuota
from allocations.services import jobs as services
from tests import factories as f


def submit(personas, **overrides):
    fields = {
        "user": personas.member,
        "team": personas.team,
        "name": "train",
        "instance_type": personas.instance_type,
        "gpus": 4,
        "command": "python train.py",
    }
    fields.update(overrides)
    return services.job_submit(**fields)


def test_submit_stores_a_pending_job_with_a_submitted_event_and_asks_for_a_cycle(
    personas, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        job = submit(personas, requested_duration=3600)
    job.refresh_from_db()
    assert (job.state, job.gpus, job.submitter, job.requested_duration) == (
        JobState.PENDING,
        4,
        personas.member,
        3600,
    )
    assert list(job.events.values_list("kind", flat=True)) == [JobEventKind.SUBMITTED]
    assert [cb.__name__ for cb in callbacks] == ["request_cycle"]


def test_submit_defaults_to_the_lowest_priority_class(personas):
    job = submit(personas)
    assert job.priority_class.name == "experimentation"


def test_submit_keeps_the_given_priority_class(personas):
    job = submit(personas, priority_class=personas.priority_classes["inference"])
    assert job.priority_class.name == "inference"


def test_a_multi_node_job_must_ask_for_whole_nodes_and_the_error_says_the_gpus_per_node(personas):
    with pytest.raises(ValidationError) as caught:
        submit(personas, gpus=12)
    message = caught.value.message_dict["gpus"][0]
    assert "8 GPUs per node" in message and "multiple of 8" in message and "12" in message
    assert not Job.objects.exists()


def test_a_whole_number_of_nodes_is_accepted(personas):
    # Quota 8, borrow limit 50% -> max_use 12 < 16: give the team room to make the point.
    TeamQuota.objects.filter(team=personas.team).update(quota=16)
    assert submit(personas, gpus=16).gpus == 16


def test_a_job_the_team_could_never_get_is_refused_with_the_limit(personas):
    # team-a: quota 8 + 50% borrow limit = 12 GPUs at most (POLICY.md 2, max_use).
    with pytest.raises(ValidationError) as caught:
        submit(personas, gpus=24)
    message = caught.value.message_dict["gpus"][0]
    assert "team-a" in message and "12" in message, message
    assert not Job.objects.exists()


def test_a_job_of_a_type_the_team_has_no_quota_for_is_refused(personas):
    other_type = f.make_instance_type("ml.g5.xlarge", 1)
    f.make_nodes(other_type, 1)
    with pytest.raises(ValidationError) as caught:
        submit(personas, instance_type=other_type, gpus=1)
    assert "gpus" in caught.value.message_dict


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -3}, "gpus"),
        ({"name": "  "}, "name"),
        ({"command": "", "image": ""}, "command"),
        ({"requested_duration": 0}, "requested_duration"),
        ({"requested_duration": 10**9}, "requested_duration"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(personas, overrides, field):
    with pytest.raises(ValidationError) as caught:
        submit(personas, **overrides)
    assert field in caught.value.message_dict
    assert not Job.objects.exists()


def test_an_image_alone_is_enough(personas):
    assert submit(personas, command="", image="pytorch:2.5").image == "pytorch:2.5"


def test_cancel_a_pending_job_records_the_event_and_asks_for_a_cycle(
    personas, django_capture_on_commit_callbacks
):
    job = submit(personas)
    with django_capture_on_commit_callbacks() as callbacks:
        services.job_cancel(user=personas.member, job=job)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at is not None
    assert list(job.events.values_list("kind", flat=True)) == [JobEventKind.SUBMITTED, JobEventKind.CANCELLED]
    assert len(callbacks) == 1


def test_cancel_a_running_job_keeps_its_nodes_in_the_event(personas):
    job = f.make_job(personas.team, personas.instance_type, 8, state=JobState.RUNNING, nodes=[["n1", 8]])
    services.job_cancel(user=personas.team_admin, job=job)
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.nodes) == (JobEventKind.CANCELLED, [["n1", 8]])


@pytest.mark.parametrize("state", [JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED])
def test_an_ended_job_cannot_be_cancelled(personas, state):
    job = f.make_job(personas.team, personas.instance_type, 1, state=state, command="x")
    with pytest.raises(ValidationError) as caught:
        services.job_cancel(user=personas.member, job=job)
    assert "state" in caught.value.message_dict
    job.refresh_from_db()
    assert job.state == state


def test_resubmit_copies_an_ended_job_into_a_new_pending_one(personas):
    old = f.make_job(
        personas.team,
        personas.instance_type,
        2,
        state=JobState.FAILED,
        command="python x.py",
        image="img:1",
        requested_duration=60,
        priority_class=personas.priority_classes["training"],
        name="again",
    )
    new = services.job_resubmit(user=personas.member, job=old)
    assert new.pk != old.pk
    assert (new.state, new.gpus, new.command, new.image, new.requested_duration, new.priority_class.name) == (
        JobState.PENDING,
        2,
        "python x.py",
        "img:1",
        60,
        "training",
    )
    assert f"#{old.pk}" in new.events.get().message


def test_a_pending_job_cannot_be_resubmitted(personas):
    job = submit(personas)
    with pytest.raises(ValidationError):
        services.job_resubmit(user=personas.member, job=job)
    assert Job.objects.count() == 1


# --- Memberships ------------------------------------------------------------------------------
def test_membership_add_is_audited(personas):
    user = f.make_user("newcomer")
    membership = services.membership_add(
        actor=personas.team_admin, team=personas.team, user=user, role=Role.VIEWER
    )
    assert membership.role == Role.VIEWER
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.object_repr) == (
        "create",
        personas.team_admin,
        "newcomer in team-a",
    )


def test_membership_add_refuses_a_second_membership(personas):
    with pytest.raises(ValidationError) as caught:
        services.membership_add(actor=personas.team_admin, team=personas.team, user=personas.member)
    assert "user" in caught.value.message_dict


def test_membership_set_role_is_audited_with_old_and_new(personas):
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    services.membership_set_role(actor=personas.team_admin, membership=membership, role=Role.TEAM_ADMIN)
    entry = AuditEntry.objects.get()
    assert (entry.field, entry.old_value, entry.new_value) == ("role", "member", "team-admin")


def test_membership_set_role_refuses_an_unknown_role(personas):
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    with pytest.raises(ValidationError) as caught:
        services.membership_set_role(actor=personas.team_admin, membership=membership, role="boss")
    assert "boss" in " ".join(caught.value.message_dict["role"])


def test_the_last_team_admin_can_be_neither_demoted_nor_removed(personas):
    membership = Membership.objects.get(user=personas.team_admin, team=personas.team)
    with pytest.raises(ValidationError):
        services.membership_set_role(actor=personas.cluster_admin, membership=membership, role=Role.MEMBER)
    with pytest.raises(ValidationError):
        services.membership_remove(actor=personas.cluster_admin, membership=membership)
    membership.refresh_from_db()
    assert membership.role == Role.TEAM_ADMIN


def test_membership_remove_keeps_the_users_jobs_with_the_team(personas):
    job = submit(personas)
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    services.membership_remove(actor=personas.team_admin, membership=membership)
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert Job.objects.get(pk=job.pk).team == personas.team
    assert AuditEntry.objects.get().action == "delete"
