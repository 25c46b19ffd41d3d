"""Writes of team self-service: submitting, cancelling and resubmitting jobs, and team members.

Each service owns its transaction, records a JobEvent (or an AuditEntry for memberships) and
asks for an allocation cycle once the transaction has committed, so the loop sees the change at
once instead of at its next tick. Access is checked by the caller through ``access.py``; the
services enforce the rules of POLICY.md (a job that could never fit is refused at submission).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from allocations import engine
from allocations.choices import ACTIVE_JOB_STATES, JobEventKind, JobState, Role
from allocations.models import InstanceType, Job, JobEvent, Membership, PriorityClass, Team

# Longest requested duration accepted (seconds): 90 days. Longer is surely a unit mistake.
MAX_REQUESTED_DURATION = 90 * 24 * 3600
FINAL_JOB_STATES = (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED)


def _request_cycle_on_commit() -> None:
    """Ask the allocation loop for a cycle soon, once this transaction has committed."""
    from allocations.services.cycle_requests import request_cycle

    transaction.on_commit(request_cycle)


def default_priority_class() -> PriorityClass | None:
    """The lowest class by weight (POLICY.md: a job with no class has priority 0, but a class
    the policy defines is what users expect to see), or None when the policy defines none."""
    return PriorityClass.objects.order_by("weight", "name").first()


def check_whole_nodes(instance_type: InstanceType, gpus: int) -> None:
    """POLICY.md section 1: a job larger than one node asks for whole nodes."""
    per_node = instance_type.gpus_per_node
    if gpus > per_node and gpus % per_node:
        raise ValidationError(
            {
                "gpus": (
                    f"{instance_type.name} has {per_node} GPUs per node: a job larger than one node "
                    f"must ask for a multiple of {per_node} GPUs (got {gpus})."
                )
            }
        )


def check_can_ever_fit(
    *, team: Team, instance_type: InstanceType, gpus: int, priority_class: PriorityClass | None, now: datetime
) -> None:
    """Refuse at once a job the team could never run (POLICY.md section 2, ``exceeds-max``):
    the engine's ``never_fits`` judges it on the current snapshot and words the limit."""
    from allocations.engine import never_fits
    from allocations.selectors.snapshot import build_snapshot

    snapshot = build_snapshot(now)
    candidate = engine.Job(
        id="new",
        team=team.name,
        instance_type=instance_type.name,
        gpus=gpus,
        submit_time=now.timestamp(),
        priority_class=priority_class.name if priority_class else None,
    )
    reason = never_fits(snapshot, candidate)
    if reason is not None:
        raise ValidationError({"gpus": f"Team {team.name} could never run this job: {reason.message}"})


def _check_fields(*, name: str, gpus: int, command: str, image: str, requested_duration: int | None) -> None:
    """The field rules the service enforces whatever the caller (form, API, command) checked."""
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "Give the job a name."
    elif len(name) > 200:
        errors["name"] = f"At most 200 characters (got {len(name)})."
    if gpus < 1:
        errors["gpus"] = f"A job needs at least 1 GPU (got {gpus})."
    if not (command.strip() or image.strip()):
        errors["command"] = "Give a command or an image to run."
    if requested_duration is not None and not 1 <= requested_duration <= MAX_REQUESTED_DURATION:
        errors["requested_duration"] = (
            f"Between 1 and {MAX_REQUESTED_DURATION} seconds (90 days) (got {requested_duration})."
        )
    if errors:
        raise ValidationError(errors)


def job_submit(
    *,
    user: Any,
    team: Team,
    name: str,
    instance_type: InstanceType,
    gpus: int,
    priority_class: PriorityClass | None = None,
    command: str = "",
    image: str = "",
    requested_duration: int | None = None,
) -> Job:
    """Submit a job to ``team``'s queue: validated, stored pending with a "submitted" event.

    Raises ``ValidationError`` keyed by field: a bad value, a multi-node job that is not whole
    nodes (with the GPUs per node), or a job the team could never get (with the limit).
    """
    _check_fields(name=name, gpus=gpus, command=command, image=image, requested_duration=requested_duration)
    check_whole_nodes(instance_type, gpus)
    if priority_class is None:
        priority_class = default_priority_class()
    now = timezone.now()
    check_can_ever_fit(
        team=team, instance_type=instance_type, gpus=gpus, priority_class=priority_class, now=now
    )
    with transaction.atomic():
        job = Job.objects.create(
            team=team,
            submitter=user if user is not None and user.pk else None,
            name=name.strip(),
            instance_type=instance_type,
            gpus=gpus,
            priority_class=priority_class,
            command=command,
            image=image,
            requested_duration=requested_duration,
            state=JobState.PENDING,
            submitted_at=now,
        )
        JobEvent.objects.create(
            job=job,
            kind=JobEventKind.SUBMITTED,
            at=now,
            message=f"Submitted by {_who(user)}: {gpus} GPU(s) of {instance_type.name}.",
        )
        _request_cycle_on_commit()
    return job


def job_cancel(*, user: Any, job: Job) -> Job:
    """Cancel a pending or running job. A running job is stopped on the backend by the
    allocation loop, which sees it cancelled in its next cycle (requested here)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in ACTIVE_JOB_STATES:
            raise ValidationError(
                {"state": f"Only a pending or running job can be cancelled; this one is {job.state}."}
            )
        now = timezone.now()
        was = job.state
        job.state = JobState.CANCELLED
        job.finished_at = now
        job.pending_reason_code = ""
        job.pending_reason_message = ""
        job.save(
            update_fields=[
                "state",
                "finished_at",
                "pending_reason_code",
                "pending_reason_message",
                "updated_at",
            ]
        )
        JobEvent.objects.create(
            job=job,
            kind=JobEventKind.CANCELLED,
            at=now,
            nodes=job.nodes if was == JobState.RUNNING else [],
            message=f"Cancelled by {_who(user)} while {was}.",
        )
        _request_cycle_on_commit()
    return job


def job_resubmit(*, user: Any, job: Job) -> Job:
    """A new pending job copying a finished, failed, cancelled or rejected one (same team,
    instance type, GPUs, class, command, image and duration), checked like a new submission."""
    if job.state not in FINAL_JOB_STATES:
        raise ValidationError(
            {"state": f"Only a job that has ended can be resubmitted; this one is {job.state}."}
        )
    new_job = job_submit(
        user=user,
        team=job.team,
        name=job.name,
        instance_type=job.instance_type,
        gpus=job.gpus,
        priority_class=job.priority_class,
        command=job.command,
        image=job.image,
        requested_duration=job.requested_duration,
    )
    # Point the new job's history at the one it copies (the original's history is append-only).
    JobEvent.objects.filter(job=new_job, kind=JobEventKind.SUBMITTED).update(
        message=f"Resubmitted by {_who(user)} from job #{job.pk}: {job.gpus} GPU(s) of {job.instance_type.name}."
    )
    return new_job


def _who(user: Any) -> str:
    return user.get_username() if user is not None and user.pk else "system"


# --- Team members -----------------------------------------------------------------------------
# The writes and their audit are the policy services' (one implementation for the console and
# the team pages); what team self-service adds is that a team always keeps a team admin.


def membership_add(*, actor: Any, team: Team, user: Any, role: str = Role.MEMBER) -> Membership:
    """Give ``user`` a role in ``team`` (refused, on ``user``, when they already have one)."""
    from allocations.services import policy

    return policy.membership_create(actor=actor, team=team, user=user, role=role)


def _check_keeps_a_team_admin(membership: Membership, new_role: str | None) -> None:
    """A team keeps at least one team admin, so that it can always manage itself."""
    if membership.role != Role.TEAM_ADMIN or new_role == Role.TEAM_ADMIN:
        return
    others = Membership.objects.filter(team=membership.team_id, role=Role.TEAM_ADMIN).exclude(
        pk=membership.pk
    )
    if not others.exists():
        raise ValidationError(
            {"role": f"{membership.user.get_username()} is the last team admin of {membership.team.name}."}
        )


def membership_set_role(*, actor: Any, membership: Membership, role: str) -> Membership:
    """Change a member's role; the last team admin cannot be demoted."""
    from allocations.services import policy

    with transaction.atomic():
        locked = Membership.objects.select_for_update().select_related("team", "user").get(pk=membership.pk)
        _check_keeps_a_team_admin(locked, role)
        return policy.membership_update(actor=actor, membership=locked, role=role)


def membership_remove(*, actor: Any, membership: Membership) -> None:
    """Take a user out of a team (their jobs stay with the team); never the last team admin."""
    from allocations.services import policy

    with transaction.atomic():
        locked = Membership.objects.select_for_update().select_related("team", "user").get(pk=membership.pk)
        _check_keeps_a_team_admin(locked, None)
        policy.membership_delete(actor=actor, membership=locked)
