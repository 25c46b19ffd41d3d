"""What a team may ask for (docs/limits.md): every submission path refuses a job past the team's
limits with a message naming the limit and the numbers; a limit lowered later leaves existing
jobs alone; concurrent submissions cannot both pass a pending-jobs limit (PostgreSQL)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from allocations.choices import JobState
from allocations.models import Job, PriorityClass, Team
from allocations.services import jobs as services
from allocations.services import policy as policy_services
from tests import factories as f
from tests.races import race_behind_a_lock


def submit(personas, user=None, **overrides):
    fields = {
        "user": user or personas.member,
        "team": personas.team,
        "name": "train",
        "instance_type": personas.instance_type,
        "gpus": 4,
        "command": "python train.py",
    }
    fields.update(overrides)
    return services.job_submit(**fields)


def limit(personas, **limits):
    return policy_services.team_update(actor=personas.cluster_admin, team=personas.team, **limits)


def refusal(caught, key="__all__"):
    return " ".join(caught.value.message_dict[key])


# --- Priority classes ------------------------------------------------------------------------------
def test_by_default_every_class_may_be_submitted(personas):
    job = submit(personas, priority_class=personas.priority_classes["inference"])
    assert job.priority_class.name == "inference"


def test_a_class_the_team_may_not_use_is_refused_naming_the_allowed_ones(personas):
    limit(personas, allowed_priority_classes=["training", "experimentation"])
    with pytest.raises(ValidationError) as caught:
        submit(personas, priority_class=personas.priority_classes["inference"])
    assert refusal(caught, "priority_class") == (
        "Team team-a may submit priority classes training, experimentation; this job asks for inference."
    )
    assert not Job.objects.exists()


def test_team_admins_are_held_to_the_teams_classes_too(personas):
    limit(personas, allowed_priority_classes=["experimentation"])
    with pytest.raises(ValidationError):
        submit(personas, user=personas.team_admin, priority_class=personas.priority_classes["training"])


def test_a_job_naming_no_class_gets_the_teams_default_class(personas):
    limit(personas, default_priority_class=personas.priority_classes["training"])
    assert submit(personas).priority_class.name == "training"


def test_without_a_default_a_job_gets_the_lowest_class_the_team_may_use(personas):
    limit(personas, allowed_priority_classes=["inference", "training"])
    assert submit(personas).priority_class.name == "training"


def test_without_any_limit_a_job_gets_the_lowest_class_as_before(personas):
    assert submit(personas).priority_class.name == "experimentation"


# --- GPUs per job --------------------------------------------------------------------------------
def test_a_job_over_the_teams_gpus_per_job_is_refused_with_both_numbers(personas):
    limit(personas, max_gpus_per_job=4)
    with pytest.raises(ValidationError) as caught:
        submit(personas, gpus=8)
    assert refusal(caught, "gpus") == "Team team-a allows at most 4 GPUs per job; this job asks for 8."
    assert submit(personas, gpus=4).gpus == 4


def test_a_job_larger_than_the_gpus_running_per_member_is_refused_and_others_are_not(personas):
    """docs/limits.md: the engine holds a member's jobs back at each cycle, but a job above
    the limit on its own could never start, so it is refused at submission; a job within it
    is accepted whatever the member runs already (that is the engine's to judge)."""
    limit(personas, max_running_gpus_per_member=4)
    with pytest.raises(ValidationError) as caught:
        submit(personas, gpus=8)
    assert (
        refusal(caught, "gpus")
        == "Team team-a allows at most 4 GPUs running per member; this job asks for 8."
    )
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.RUNNING)
    assert submit(personas, gpus=4).state == JobState.PENDING
    assert (
        services.job_submit(
            user=None, team=personas.team, name="x", instance_type=personas.instance_type, gpus=8, command="x"
        ).gpus
        == 8
    )


# --- Pending jobs --------------------------------------------------------------------------------
def test_a_member_past_the_pending_jobs_per_member_is_refused_and_a_colleague_is_not(personas):
    limit(personas, max_pending_jobs_per_member=2)
    submit(personas)
    submit(personas)
    with pytest.raises(ValidationError) as caught:
        submit(personas)
    assert refusal(caught) == "Team team-a allows at most 2 pending jobs per member; bob has 2 pending."
    assert submit(personas, user=personas.team_admin).submitter == personas.team_admin


def test_the_team_past_its_pending_jobs_is_refused(personas):
    limit(personas, max_pending_jobs=2)
    submit(personas)
    submit(personas, user=personas.team_admin)
    with pytest.raises(ValidationError) as caught:
        submit(personas)
    assert refusal(caught) == "Team team-a allows at most 2 pending jobs; it has 2 pending."


def test_only_pending_jobs_count(personas):
    limit(personas, max_pending_jobs_per_member=1)
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.RUNNING)
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.FINISHED)
    assert submit(personas).state == JobState.PENDING


def test_another_teams_pending_jobs_do_not_count(personas):
    limit(personas, max_pending_jobs=1)
    f.make_job(personas.other_team, personas.instance_type, 4, state=JobState.PENDING)
    assert submit(personas).team == personas.team


def test_a_limit_lowered_later_cancels_nothing_and_refuses_new_jobs(personas):
    jobs = [submit(personas, gpus=8) for _ in range(3)]
    limit(personas, max_pending_jobs=1, max_gpus_per_job=4, allowed_priority_classes=["inference"])
    assert set(Job.objects.values_list("state", "gpus")) == {(JobState.PENDING, 8)}
    assert Job.objects.filter(pk__in=[j.pk for j in jobs]).count() == 3
    with pytest.raises(ValidationError) as caught:
        submit(personas, gpus=4, priority_class=personas.priority_classes["inference"])
    assert refusal(caught) == "Team team-a allows at most 1 pending job; it has 3 pending."


# --- Resubmission ----------------------------------------------------------------------------------
def _ended(personas, **fields):
    return f.make_job(
        personas.team,
        personas.instance_type,
        fields.pop("gpus", 4),
        submitter=personas.member,
        state=JobState.FINISHED,
        command="python train.py",
        **fields,
    )


def test_resubmit_is_refused_a_class_the_team_may_no_longer_use(personas):
    job = _ended(personas, priority_class=personas.priority_classes["inference"])
    limit(personas, allowed_priority_classes=["training"])
    with pytest.raises(ValidationError) as caught:
        services.job_resubmit(user=personas.member, job=job)
    assert "may submit priority classes training; this job asks for inference" in refusal(
        caught, "priority_class"
    )


def test_resubmit_is_refused_past_the_gpus_per_job(personas):
    job = _ended(personas, gpus=8)
    limit(personas, max_gpus_per_job=4)
    with pytest.raises(ValidationError) as caught:
        services.job_resubmit(user=personas.member, job=job)
    assert refusal(caught, "gpus") == "Team team-a allows at most 4 GPUs per job; this job asks for 8."


def test_resubmit_is_refused_past_the_pending_jobs(personas):
    job = _ended(personas)
    limit(personas, max_pending_jobs_per_member=1)
    services.job_resubmit(user=personas.member, job=job)
    with pytest.raises(ValidationError) as caught:
        services.job_resubmit(user=personas.member, job=job)
    assert refusal(caught) == "Team team-a allows at most 1 pending job per member; bob has 1 pending."


def test_a_resubmitted_job_without_class_gets_the_teams_default(personas):
    job = _ended(personas)
    limit(personas, default_priority_class=personas.priority_classes["fine-tuning"])
    new_job, _ = services.job_resubmit(user=personas.member, job=job, idempotency_key="k1")
    assert new_job.priority_class.name == "fine-tuning"
    # The same key again finds that job: the copy is judged with the team's default too.
    again, created = services.job_resubmit(user=personas.member, job=job, idempotency_key="k1")
    assert (again.pk, created) == (new_job.pk, False)


# --- Setting the limits ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"allowed_priority_classes": ["training", "urgent"]},
            "allowed_priority_classes",
            "Allowed priority classes: no class is called 'urgent'.",
        ),
        (
            {"allowed_priority_classes": "training"},
            "allowed_priority_classes",
            "Allowed priority classes must be a list of class names; got 'training'.",
        ),
        ({"max_gpus_per_job": 0}, "max_gpus_per_job", "Most GPUs per job must be 1 or more GPUs; got 0."),
        (
            {"max_pending_jobs_per_member": -2},
            "max_pending_jobs_per_member",
            "Most pending jobs per member must be 1 or more jobs; got -2.",
        ),
        (
            {"max_pending_jobs": "many"},
            "max_pending_jobs",
            "Most pending jobs of the team must be a whole number of jobs; got 'many'.",
        ),
    ],
)
def test_bad_limits_are_refused_naming_the_field_and_value(personas, changes, field, message):
    with pytest.raises(ValidationError) as caught:
        limit(personas, **changes)
    assert caught.value.message_dict[field] == [message]


def test_the_default_class_must_be_one_the_team_may_use(personas):
    with pytest.raises(ValidationError) as caught:
        limit(
            personas,
            allowed_priority_classes=["experimentation"],
            default_priority_class=personas.priority_classes["inference"],
        )
    assert caught.value.message_dict["default_priority_class"] == [
        "Default priority class 'inference' is not one the team may use (experimentation)."
    ]


def test_a_class_a_team_names_cannot_be_deleted(personas):
    limit(personas, allowed_priority_classes=["training"])
    with pytest.raises(ValidationError) as caught:
        policy_services.priority_class_delete(
            actor=personas.cluster_admin, priority_class=personas.priority_classes["training"]
        )
    assert "team(s) team-a may use it" in refusal(caught)
    limit(personas, allowed_priority_classes=[], default_priority_class=personas.priority_classes["training"])
    with pytest.raises(ValidationError):
        policy_services.priority_class_delete(
            actor=personas.cluster_admin, priority_class=personas.priority_classes["training"]
        )
    assert PriorityClass.objects.filter(name="training").exists()


def test_a_renamed_class_stays_allowed(personas):
    limit(personas, allowed_priority_classes=["training", "experimentation"])
    policy_services.priority_class_update(
        actor=personas.cluster_admin, priority_class=personas.priority_classes["training"], name="train"
    )
    assert Team.objects.get(pk=personas.team.pk).allowed_priority_classes == ["train", "experimentation"]
    assert (
        submit(personas, priority_class=PriorityClass.objects.get(name="train")).priority_class.name
        == "train"
    )


# --- Concurrency -------------------------------------------------------------------------------------
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_cannot_pass_a_pending_jobs_limit(personas):
    """Ten submissions at once to a team allowing one pending job: the Job table is locked
    against inserts until all ten are inside the service, so without the lock on the team row
    all ten would have counted no pending job. With it, one makes a job and nine are refused."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL (SQLite lets one writer in at a time)")
    limit(personas, max_pending_jobs=1)
    refused: list[str] = []

    def one_submission() -> None:
        try:
            submit(personas)
        except ValidationError as exc:
            refused.append(" ".join(exc.messages))

    all_in = race_behind_a_lock(Job._meta.db_table, [one_submission] * 10)
    assert all_in, "the ten submissions did not all reach the service's lock or insert"
    assert Job.objects.filter(team=personas.team).count() == 1
    assert refused == ["Team team-a allows at most 1 pending job; it has 1 pending."] * 9
