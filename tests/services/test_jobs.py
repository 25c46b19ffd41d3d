"""Job services: submission rules (POLICY.md sections 1 and 2), events, cycles requested on
commit, cancel/resubmit (memberships: tests/services/test_memberships.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError

from allocations.choices import JobEventKind, JobState
from allocations.models import Job, JobEvent, TeamQuota
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
    new, created = services.job_resubmit(user=personas.member, job=old)
    assert created and new.pk != old.pk
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


def test_cancel_a_running_job_ends_it_as_the_loop_ends_a_finished_one(personas):
    """Cancelling frees the job's nodes at once, as the loop frees those of a job that finished
    (one function ends both): the row keeps no nodes, the event says where it ran, and the
    loop's next cycle stops it in the backend and gives its GPUs to the job waiting for them."""
    from django.utils import timezone

    from allocations.models import SimulatedJob
    from allocations.services.loop import run_allocation_cycle

    now = timezone.now()
    cancelled, waiting = (
        f.make_job(
            personas.team, personas.instance_type, 8, name=name, requested_duration=3600, submitted_at=at
        )
        for name, at in [("cancelled", now), ("waiting", now + timedelta(seconds=1))]
    )
    run_allocation_cycle(trigger="test")
    cancelled.refresh_from_db()
    assert cancelled.state == JobState.RUNNING and cancelled.nodes
    ran_on = cancelled.nodes

    services.job_cancel(user=personas.member, job=cancelled)

    cancelled.refresh_from_db()
    assert (cancelled.state, cancelled.nodes) == (JobState.CANCELLED, [])
    assert cancelled.finished_at is not None and cancelled.finished_at >= cancelled.started_at
    event = cancelled.events.get(kind=JobEventKind.CANCELLED)
    assert (event.at, event.nodes) == (cancelled.finished_at, ran_on)
    run_allocation_cycle(trigger="test")
    assert SimulatedJob.objects.get(job_id=str(cancelled.pk)).state == "cancelled"
    waiting.refresh_from_db()
    assert waiting.state == JobState.RUNNING and waiting.nodes
    # The loop ends a finished job the same way: end time, nodes cleared, event with its nodes.
    ran_on = waiting.nodes
    SimulatedJob.objects.filter(job_id=str(waiting.pk)).update(ends_at=waiting.started_at)
    run_allocation_cycle(trigger="test")
    waiting.refresh_from_db()
    assert (waiting.state, waiting.nodes, waiting.finished_at) == (JobState.FINISHED, [], waiting.started_at)
    assert waiting.events.get(kind=JobEventKind.FINISHED).nodes == ran_on


def test_a_resubmit_with_a_key_used_before_returns_the_job_that_key_made(personas):
    old = f.make_job(personas.team, personas.instance_type, 2, state=JobState.FAILED, command="x")
    first, created = services.job_resubmit(user=personas.member, job=old, idempotency_key="click-1")
    again, created_again = services.job_resubmit(user=personas.member, job=old, idempotency_key="click-1")
    assert (created, created_again) == (True, False) and again == first
    assert first.idempotency_key == "click-1"
    # Another key, or the same key of another user, is another resubmit.
    other, _ = services.job_resubmit(user=personas.member, job=old, idempotency_key="click-2")
    theirs, _ = services.job_resubmit(user=personas.team_admin, job=old, idempotency_key="click-1")
    assert len({first.pk, other.pk, theirs.pk}) == 3
    assert Job.objects.filter(state=JobState.PENDING).count() == 3


def test_a_key_reused_for_another_job_is_refused(personas):
    old = f.make_job(personas.team, personas.instance_type, 2, state=JobState.FAILED, command="x")
    different = f.make_job(personas.team, personas.instance_type, 4, state=JobState.FINISHED, command="y")
    services.job_resubmit(user=personas.member, job=old, idempotency_key="k")
    with pytest.raises(ValidationError) as caught:
        services.job_resubmit(user=personas.member, job=different, idempotency_key="k")
    assert "not a copy" in caught.value.message_dict["idempotency_key"][0]
    assert Job.objects.filter(state=JobState.PENDING).count() == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "caf\u00e9"])
def test_a_bad_idempotency_key_is_refused_by_name(personas, key):
    old = f.make_job(personas.team, personas.instance_type, 2, state=JobState.FAILED, command="x")
    with pytest.raises(ValidationError) as caught:
        services.job_resubmit(user=personas.member, job=old, idempotency_key=key)
    assert "idempotency_key" in caught.value.message_dict
    assert not Job.objects.filter(state=JobState.PENDING).exists()


def test_the_key_is_unique_per_submitter_in_the_database(personas):
    """What the race rests on: a second row with the same submitter and key cannot be inserted,
    whatever the code path; jobs without a key are not limited."""
    from django.db import IntegrityError, transaction

    f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member, idempotency_key="k")
    f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member)
    f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member)
    with pytest.raises(IntegrityError), transaction.atomic():
        f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member, idempotency_key="k")


def test_the_can_ever_fit_check_at_submission_reads_no_job(personas):
    """The judgement of POLICY.md section 2's "can never fit" needs the teams, the policy and
    the nodes only: a submission's cost does not grow with the jobs the cluster holds."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    for _ in range(3):
        f.make_job(personas.team, personas.instance_type, 2)
    with CaptureQueriesContext(connection) as queries:
        services.check_can_ever_fit(
            team=personas.team,
            instance_type=personas.instance_type,
            gpus=4,
            priority_class=None,
            now=timezone.now(),
        )
    tables = " ".join(q["sql"] for q in queries.captured_queries)
    assert '"allocations_job"' not in tables
    assert len(queries.captured_queries) == 6
    with pytest.raises(ValidationError, match="could never run"):
        services.check_can_ever_fit(
            team=personas.team,
            instance_type=personas.instance_type,
            gpus=10_000,
            priority_class=None,
            now=timezone.now(),
        )


# --- Checkpoints (docs/preemption.md section 2) ---------------------------------------------------
def test_a_job_declares_its_checkpoint_interval_and_starts_with_nothing_lost(personas):
    job = submit(personas, checkpoint_interval_s=1800)
    assert (job.checkpoint_interval_s, job.progress_kept_s, job.lost_gpu_seconds) == (1800, 0, 0)


@pytest.mark.parametrize("value", [0, -1, 90 * 24 * 3600 + 1, 2.5, "60", True])
def test_a_bad_checkpoint_interval_is_refused_naming_the_field_and_value(personas, value):
    with pytest.raises(ValidationError) as refused:
        submit(personas, checkpoint_interval_s=value)
    (message,) = refused.value.message_dict["checkpoint_interval_s"]
    assert f"(got {value!r})" in message
    assert not Job.objects.exists()


def test_a_resubmit_keeps_the_checkpoint_interval_but_not_what_preemptions_cost(personas):
    old = f.make_job(
        personas.team,
        personas.instance_type,
        2,
        state=JobState.FAILED,
        command="python x.py",
        checkpoint_interval_s=600,
        progress_kept_s=1200.0,
        lost_gpu_seconds=300.0,
    )
    new, _ = services.job_resubmit(user=personas.member, job=old, idempotency_key="k-1")
    assert (new.checkpoint_interval_s, new.progress_kept_s, new.lost_gpu_seconds) == (600, 0, 0)
    again, created = services.job_resubmit(user=personas.member, job=old, idempotency_key="k-1")
    assert (again.pk, created) == (new.pk, False)
