"""Reads of team self-service: a team's queue, a job's history, the jobs the API lists.

Every function returns rows with their related rows loaded, so the number of queries of a page
or an API call does not grow with the number of jobs (STYLE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, IntegerField, Q, QuerySet, Value
from django.db.models.functions import Coalesce

from allocations import access, engine
from allocations.choices import PENDING_CODE_WORDS, JobState
from allocations.engine import TaskRanking
from allocations.engine.accounting import TeamUsage, account_snapshot
from allocations.models import ClusterPolicy, Job, JobEvent, Team, TeamQuota
from allocations.selectors.estimates import Estimates


def task_ranking() -> TaskRanking:
    """The cluster's ranking of jobs (POLICY.md section 1); the default when none is stored."""
    value = ClusterPolicy.objects.filter(cluster_id=1).values_list("task_ranking", flat=True).first()
    return TaskRanking(value) if value else TaskRanking.PRIORITY


def with_related(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs with everything a list shows loaded in the same query."""
    return queryset.select_related("team", "instance_type", "priority_class", "submitter")


def in_team_order(queryset: QuerySet[Job], ranking: TaskRanking) -> QuerySet[Job]:
    """POLICY.md section 3 step 1: priority (high first), then submit time, then id. Under
    ``first-come-first-serve`` ranking every job ranks as priority 0."""
    if ranking is TaskRanking.FIRST_COME_FIRST_SERVE:
        priority: Any = Value(0, output_field=IntegerField())
    else:
        priority = Coalesce(F("priority_class__weight"), Value(0), output_field=IntegerField())
    return queryset.annotate(rank_priority=priority).order_by("-rank_priority", "submitted_at", "pk")


@dataclass(frozen=True)
class QueueRow:
    """One line of a team's queue page."""

    job: Job
    position: int
    waiting_seconds: float | None  # pending: since submission; running: None
    estimated_start: datetime | None
    estimate_known: bool
    estimate_note: str = ""  # why unknown, or why it starts before a job ahead of it

    @property
    def reason_words(self) -> str:
        """Its pending code in plain words (empty for none), shown with the code."""
        return PENDING_CODE_WORDS.get(self.job.pending_reason_code, "")


@dataclass(frozen=True)
class TeamQueue:
    team: Team
    running: list[QueueRow]
    pending: list[QueueRow]
    usage: list[TeamUsage]


def team_queue(
    team: Team,
    *,
    now: datetime,
    snapshot: engine.Snapshot,
    estimates: dict[int, datetime | None] | Estimates | None = None,
) -> TeamQueue:
    """The team's running and pending jobs in the team's order, with positions, and its quota,
    usage, borrowed and lent per instance type in ``snapshot`` (the state right now).
    ``estimates`` maps job ids to an estimated start (None, or missing: unknown), or is the
    ``Estimates`` with their reasons."""
    notes: dict[int, str] = {}
    if isinstance(estimates, Estimates):
        notes = {**estimates.ahead, **estimates.unknown}
        estimates = estimates.starts
    estimates = estimates or {}
    ranking = task_ranking()
    active = with_related(Job.objects.filter(team=team, state__in=(JobState.RUNNING, JobState.PENDING)))
    running: list[QueueRow] = []
    pending: list[QueueRow] = []
    for job in in_team_order(active, ranking):
        if job.state == JobState.RUNNING:
            running.append(QueueRow(job, len(running) + 1, None, job.started_at, True))
        else:
            known = job.pk in estimates and estimates[job.pk] is not None
            pending.append(
                QueueRow(
                    job,
                    len(pending) + 1,
                    max(0.0, (now - job.submitted_at).total_seconds()),
                    estimates.get(job.pk),
                    known,
                    notes.get(job.pk, "" if known else "it has not been forecast yet"),
                )
            )
    accounting = account_snapshot(snapshot)
    usage = [row for row in accounting.teams if row.team == team.name]
    # Only the instance types the team has a quota for or uses: a cluster may have many.
    quota_types = set(TeamQuota.objects.filter(team=team).values_list("instance_type__name", flat=True))
    usage = [row for row in usage if row.instance_type in quota_types or row.used or row.pending_jobs]
    return TeamQueue(team=team, running=running, pending=pending, usage=usage)


def job_history(job: Job) -> QuerySet[JobEvent]:
    """Every event of the job, oldest first, with the preempting job and its team loaded."""
    return (
        JobEvent.objects.filter(job=job).select_related("preemptor", "preemptor__team").order_by("at", "pk")
    )


def my_teams(user: Any) -> list[dict[str, Any]]:
    """The user's teams with their role and how many jobs run and wait (one query for the
    teams, one for the counts)."""
    teams = list(access.visible_teams(user).order_by("name"))
    counts: dict[tuple[int, str], int] = {}
    rows = (
        Job.objects.filter(team__in=teams, state__in=(JobState.RUNNING, JobState.PENDING))
        .values_list("team_id", "state")
        .order_by()
    )
    for team_id, state in rows:
        counts[(team_id, state)] = counts.get((team_id, state), 0) + 1
    return [
        {
            "team": team,
            "role": access.role_in(user, team) or ("cluster admin" if access.is_cluster_admin(user) else ""),
            "running": counts.get((team.pk, JobState.RUNNING), 0),
            "pending": counts.get((team.pk, JobState.PENDING), 0),
        }
        for team in teams
    ]


def pending_positions(team_ids: set[int] | None = None) -> dict[int, int]:
    """Each pending job's position in its team's queue (1: next), by primary key, for the teams
    ``team_ids`` (None: every team). One query; the order is ``in_team_order``'s."""
    pending = Job.objects.filter(state=JobState.PENDING)
    if team_ids is not None:
        pending = pending.filter(team_id__in=team_ids)
    positions: dict[int, int] = {}
    counts: dict[int, int] = {}
    for pk, team_id in in_team_order(pending, task_ranking()).values_list("pk", "team_id"):
        counts[team_id] = counts.get(team_id, 0) + 1
        positions[pk] = counts[team_id]
    return positions


@dataclass(frozen=True)
class QueuePlace:
    """Where a pending job stands: its position in its team's queue, its estimated start
    (None: unknown) and the sentence that goes with it (why unknown, or why before the job
    ahead of it)."""

    position: int | None
    estimated_start: datetime | None
    note: str


def queue_place(job: Job, estimates: Estimates, positions: dict[int, int]) -> QueuePlace:
    start = estimates.starts.get(job.pk)
    if start is None:
        note = estimates.unknown.get(job.pk, "it has not been forecast yet")
    else:
        note = estimates.ahead.get(job.pk, "")
    return QueuePlace(positions.get(job.pk), start, note)


@dataclass(frozen=True, slots=True)
class LimitsInForce:
    """What a team's members may ask for (docs/limits.md) and where ``user`` stands: the team
    and member pages show it next to the submit button."""

    allowed_classes: list[str]  # empty: every class
    default_class: str | None
    max_gpus_per_job: int | None
    max_pending_jobs_per_member: int | None
    max_pending_jobs: int | None
    pending_mine: int
    pending_team: int


def limits_in_force(team: Team, user: Any) -> LimitsInForce:
    """``team``'s limits and its pending jobs (``user``'s and all), in two queries."""
    from allocations.services.jobs import team_default_class

    default = team_default_class(team)
    pending = Job.objects.filter(team=team, state=JobState.PENDING)
    counts = pending.aggregate(
        team=Count("pk"), mine=Count("pk", filter=Q(submitter_id=getattr(user, "pk", None)))
    )
    return LimitsInForce(
        allowed_classes=list(team.allowed_priority_classes),
        default_class=default.name if default else None,
        max_gpus_per_job=team.max_gpus_per_job,
        max_pending_jobs_per_member=team.max_pending_jobs_per_member,
        max_pending_jobs=team.max_pending_jobs,
        pending_mine=counts["mine"],
        pending_team=counts["team"],
    )
