"""Writes of team self-service: submitting, cancelling and resubmitting jobs (team members:
``services/memberships.py``).

Each service owns its transaction, records a JobEvent and asks for an allocation cycle once the
transaction has committed, so the loop sees the change at once instead of at its next tick.
Access is checked by the caller through ``access.py``; the services enforce the rules of
POLICY.md (a job that could never fit is refused at submission).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from allocations import engine
from allocations.choices import ACTIVE_JOB_STATES, JobEventKind, JobState
from allocations.models import InstanceType, Job, JobEvent, PriorityClass, Team
from allocations.services.loop import end_job

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


def team_default_class(team: Team) -> PriorityClass | None:
    """The class of a job submitted to ``team`` without one (docs/limits.md): the team's
    default class, else the lowest of the classes it may use, else None (no class defined)."""
    if team.default_priority_class_id is not None:
        return team.default_priority_class
    classes = PriorityClass.objects.order_by("weight", "name")
    if team.allowed_priority_classes:
        classes = classes.filter(name__in=team.allowed_priority_classes)
    return classes.first()


def check_team_limits(*, team: Team, user: Any, gpus: int, priority_class: PriorityClass | None) -> None:
    """Refuse a job past what ``team`` may ask for (docs/limits.md): a class it may not use,
    more GPUs than one job may have, or one pending job too many for the member or the team.

    Call it inside the transaction that creates the job, with ``team`` read under
    ``select_for_update``: concurrent submissions to one team then count each other's jobs.
    Only new submissions are checked, so a limit lowered later leaves existing jobs alone."""
    allowed = team.allowed_priority_classes
    if priority_class is not None and allowed and priority_class.name not in allowed:
        raise ValidationError(
            {
                "priority_class": (
                    f"Team {team.name} may submit priority classes {', '.join(allowed)}; "
                    f"this job asks for {priority_class.name}."
                )
            }
        )
    if team.max_gpus_per_job is not None and gpus > team.max_gpus_per_job:
        raise ValidationError(
            {
                "gpus": (
                    f"Team {team.name} allows at most {team.max_gpus_per_job} GPUs per job; "
                    f"this job asks for {gpus}."
                )
            }
        )
    cap = team.max_running_gpus_per_member
    if cap is not None and user is not None and user.pk and gpus > cap:
        # The engine enforces this limit at each cycle; a job above it on its own would wait
        # for ever, so it is refused now, as a job that can never fit is.
        raise ValidationError(
            {
                "gpus": (
                    f"Team {team.name} allows at most {cap} GPUs running per member; "
                    f"this job asks for {gpus}."
                )
            }
        )
    pending = Job.objects.filter(team=team, state=JobState.PENDING)
    if team.max_pending_jobs is not None:
        count = pending.count()
        if count >= team.max_pending_jobs:
            raise ValidationError(
                {
                    "__all__": f"Team {team.name} allows at most {_jobs(team.max_pending_jobs)}; it has {count} pending."
                }
            )
    if team.max_pending_jobs_per_member is not None and user is not None and user.pk:
        count = pending.filter(submitter=user).count()
        if count >= team.max_pending_jobs_per_member:
            raise ValidationError(
                {
                    "__all__": (
                        f"Team {team.name} allows at most {_jobs(team.max_pending_jobs_per_member)} per member; "
                        f"{_who(user)} has {count} pending."
                    )
                }
            )


def _jobs(count: int) -> str:
    return f"{count} pending job" if count == 1 else f"{count} pending jobs"


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
    the engine's ``never_fits`` judges it on the teams, policy and nodes (no job is read) and
    words the limit."""
    from allocations.engine import never_fits
    from allocations.selectors.snapshot import policy_snapshot

    if gpus < 1:
        return  # a job of partitions alone: no GPU limit to judge it on
    snapshot = policy_snapshot()
    # Judged on GPUs alone: the resources were checked against one node by
    # ``check_job_resources`` (docs/resources.md 3), and this judge counts GPUs only.
    snapshot = replace(
        snapshot,
        instance_types=tuple(
            engine.InstanceType(it.name, it.gpus_per_node) for it in snapshot.instance_types
        ),
    )
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


def _check_fields(
    *,
    name: str,
    gpus: int,
    command: str,
    image: str,
    requested_duration: int | None,
    checkpoint_interval_s: int | None = None,
    partitions: Mapping[str, int] | None = None,
) -> None:
    """The field rules the service enforces whatever the caller (form, API, command) checked."""
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "Give the job a name."
    elif len(name) > 200:
        errors["name"] = f"At most 200 characters (got {len(name)})."
    if gpus < 0 or (gpus < 1 and not partitions):
        errors["gpus"] = f"A job needs at least 1 GPU, or partitions (got {gpus})."
    if not (command.strip() or image.strip()):
        errors["command"] = "Give a command or an image to run."
    if requested_duration is not None and not 1 <= requested_duration <= MAX_REQUESTED_DURATION:
        errors["requested_duration"] = (
            f"Between 1 and {MAX_REQUESTED_DURATION} seconds (90 days) (got {requested_duration})."
        )
    if checkpoint_interval_s is not None and (
        isinstance(checkpoint_interval_s, bool)
        or not isinstance(checkpoint_interval_s, int)
        or not 1 <= checkpoint_interval_s <= MAX_REQUESTED_DURATION
    ):
        errors["checkpoint_interval_s"] = (
            f"Checkpoint interval must be between 1 and {MAX_REQUESTED_DURATION} seconds, or empty for "
            f"a job that keeps no checkpoints (docs/preemption.md section 2) (got {checkpoint_interval_s!r})."
        )
    if errors:
        raise ValidationError(errors)


RESOURCE_WORDS = {"vcpus": "vCPU", "memory_gib": "GiB memory"}


def check_job_resources(
    instance_type: InstanceType,
    gpus: int,
    vcpus: Any = None,
    memory_gib: Any = None,
    partitions: Any = None,
) -> None:
    """What a job asks besides GPUs (docs/resources.md 3 and 8): resources its instance type
    declares, at most what one node has (or its whole nodes have: no partitions then), known
    partition profiles. Raises ``ValidationError`` naming the field and the value."""
    errors: dict[str, str] = {}
    per_node_gpus = instance_type.gpus_per_node
    nodes = gpus // per_node_gpus if gpus > per_node_gpus else 1
    where = f"one {instance_type.name} node" if nodes == 1 else f"{nodes} {instance_type.name} nodes"
    for field, per_node in (
        ("vcpus", instance_type.vcpus_per_node),
        ("memory_gib", instance_type.memory_gib_per_node),
    ):
        value = {"vcpus": vcpus, "memory_gib": memory_gib}[field]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors[field] = f"{field} must be a whole number of 0 or more; got {value!r}."
        elif not per_node:
            errors[field] = f"{instance_type.name} declares no {field}; got {value}."
        elif value > nodes * per_node:
            errors[field] = (
                f"{field} {value:,} is more than {where} has ({nodes * per_node:,} {RESOURCE_WORDS[field]})."
            )
    if partitions:
        have = dict(instance_type.partitions_per_node or {})
        if not isinstance(partitions, Mapping):
            errors["partitions"] = f"Partitions must be a mapping of profile to a count; got {partitions!r}."
        elif not have:
            errors["partitions"] = f"{instance_type.name} has no partitions; got {dict(partitions)!r}."
        elif nodes > 1:
            errors["partitions"] = f"A job of whole nodes asks for no partitions; got {dict(partitions)!r}."
        else:
            problems = []
            for profile, count in partitions.items():
                if profile not in have:
                    problems.append(
                        f"unknown partition profile {profile!r} of {instance_type.name} (it has: {', '.join(have)})"
                    )
                elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    problems.append(f"{profile} must be a whole number of 1 or more; got {count!r}")
                elif count > have[profile]:
                    problems.append(
                        f"{profile} {count} is more than one {instance_type.name} node has ({have[profile]})"
                    )
            if problems:
                errors["partitions"] = "Partitions: " + "; ".join(problems) + "."
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
    checkpoint_interval_s: int | None = None,
    idempotency_key: str | None = None,
    message: str = "",
    vcpus: int | None = None,
    memory_gib: int | None = None,
    partitions: Mapping[str, int] | None = None,
) -> Job:
    """Submit a job to ``team``'s queue: validated, stored pending with a "submitted" event
    (``message``: its text, when not the default one). Without ``priority_class`` the job gets
    the team's default class (``team_default_class``).

    Raises ``ValidationError`` keyed by field: a bad value, a multi-node job that is not whole
    nodes (with the GPUs per node), a job past what the team may ask for (``check_team_limits``;
    the pending-job limits under ``__all__``), or a job the team could never get (with the
    limit); and ``IntegrityError`` when ``user`` already made a job with ``idempotency_key``.
    ``checkpoint_interval_s``: how often the job saves its progress (None: never); a preempted
    job keeps its work up to its last checkpoint (docs/preemption.md section 2).
    """
    _check_fields(
        name=name,
        gpus=gpus,
        command=command,
        image=image,
        requested_duration=requested_duration,
        checkpoint_interval_s=checkpoint_interval_s,
        partitions=partitions,
    )
    check_whole_nodes(instance_type, gpus)
    check_job_resources(instance_type, gpus, vcpus, memory_gib, partitions)
    now = timezone.now()
    with transaction.atomic():
        # The team's row locked: its limits as they are now, and submissions to the team one
        # at a time, so that two at once cannot both pass a pending-jobs limit.
        team = Team.objects.select_for_update().get(pk=team.pk)
        if priority_class is None:
            priority_class = team_default_class(team)
        check_team_limits(team=team, user=user, gpus=gpus, priority_class=priority_class)
        check_can_ever_fit(
            team=team, instance_type=instance_type, gpus=gpus, priority_class=priority_class, now=now
        )
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
            checkpoint_interval_s=checkpoint_interval_s,
            vcpus=vcpus,
            memory_gib=memory_gib,
            partitions=dict(partitions or {}),
            state=JobState.PENDING,
            submitted_at=now,
            idempotency_key=idempotency_key or "",
        )
        JobEvent.objects.create(
            job=job,
            kind=JobEventKind.SUBMITTED,
            at=now,
            message=message or f"Submitted by {_who(user)}: {gpus} GPU(s) of {instance_type.name}.",
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
        was = job.state
        # Ended as the loop ends a job the backend ended: its nodes are free from now on (the
        # loop stops it there at its next cycle), its event keeps where it ran.
        fields, event = end_job(
            job,
            state=JobState.CANCELLED,
            at=timezone.now(),
            message=f"Cancelled by {_who(user)} while {was}.",
        )
        job.pending_reason_code = job.pending_reason_message = ""
        job.save(update_fields=[*fields, "pending_reason_code", "pending_reason_message", "updated_at"])
        event.save()
        _request_cycle_on_commit()
    return job


IDEMPOTENCY_KEY_MAX_LENGTH = 255


def job_resubmit(*, user: Any, job: Job, idempotency_key: str | None = None) -> tuple[Job, bool]:
    """A new pending job copying a finished, failed, cancelled or rejected one (same team,
    instance type, GPUs, class, command, image, duration and checkpoint interval), checked like a new submission.
    Returns ``(new job, True)``.

    With an ``idempotency_key`` (the API's ``Idempotency-Key`` header, the resubmit form's
    one-time token), a key ``user`` already resubmitted with returns ``(that job, False)``
    instead: a request retried or a button clicked twice makes one job, however many arrive
    at once. The key is stored on the job under a unique constraint per submitter, so of
    concurrent requests exactly one insert wins and the others read the winner's job. A key
    that made a job which is no copy of ``job`` is refused (``ValidationError`` on
    ``idempotency_key``): reusing a key for another request is a client's mistake."""
    if idempotency_key is not None:
        if not user or not user.pk:
            raise ValueError("an idempotency key belongs to a user: resubmit without one")
        _check_idempotency_key(idempotency_key)
        earlier = _resubmitted_with(user, idempotency_key, job)
        if earlier is not None:
            return earlier, False
    if job.state not in FINAL_JOB_STATES:
        raise ValidationError(
            {"state": f"Only a job that has ended can be resubmitted; this one is {job.state}."}
        )
    try:
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
            checkpoint_interval_s=job.checkpoint_interval_s,
            vcpus=job.vcpus,
            memory_gib=job.memory_gib,
            partitions=job.partitions,
            idempotency_key=idempotency_key,
            # The new job's history points at the one it copies (whose history is append-only).
            message=(
                f"Resubmitted by {_who(user)} from job #{job.pk}: {job.gpus} GPU(s) of {job.instance_type.name}."
            ),
        )
    except IntegrityError:
        # Another request with this key inserted first (PostgreSQL made this insert wait for
        # its commit): its job is the answer to this one too.
        earlier = _resubmitted_with(user, idempotency_key, job) if idempotency_key is not None else None
        if earlier is None:
            raise
        return earlier, False
    return new_job, True


def _check_idempotency_key(key: str) -> None:
    if not 1 <= len(key) <= IDEMPOTENCY_KEY_MAX_LENGTH or not key.isprintable() or not key.isascii():
        raise ValidationError(
            {
                "idempotency_key": (
                    f"An idempotency key is 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} printable ASCII characters "
                    f"(got {len(key)} characters)."
                )
            }
        )


def _resubmitted_with(user: Any, key: str, job: Job) -> Job | None:
    """The job ``user`` made with ``key``, or None; ValidationError when it copies another job."""
    earlier = Job.objects.filter(submitter=user, idempotency_key=key).first()
    if earlier is None:
        return None
    # What job_submit makes of the copied fields (a job without a class gets the team's default).
    priority_class_id = job.priority_class_id
    if priority_class_id is None and earlier.priority_class_id is not None:
        default = team_default_class(Team.objects.get(pk=job.team_id))  # its limits as they are now
        priority_class_id = default.pk if default else None
    copy = (job.team_id, job.name.strip(), job.instance_type_id, job.gpus, priority_class_id)
    copy += (job.command, job.image, job.requested_duration, job.checkpoint_interval_s)
    made = (earlier.team_id, earlier.name, earlier.instance_type_id, earlier.gpus, earlier.priority_class_id)
    made += (earlier.command, earlier.image, earlier.requested_duration, earlier.checkpoint_interval_s)
    if made != copy:
        raise ValidationError(
            {
                "idempotency_key": f"This key was used for job #{earlier.pk}, which is not a copy of job #{job.pk}."
            }
        )
    return earlier


def _who(user: Any) -> str:
    return user.get_username() if user is not None and user.pk else "system"
