"""Who may see or change what: the only place that decides (STYLE.md).

Cluster administrators are Django staff users: they see and change everything. Team roles
(team admin, member, viewer) come from Membership rows:

* team admin: manages the team's jobs (anyone's) and its members; reads its quota;
* member: submits jobs and manages their own; sees the team's queue and usage;
* viewer: reads what a member reads.

Pages and the API ask the same functions. Lists filter through ``visible_to(user, queryset)``;
an object outside it answers 404 exactly like a missing one ("not yours" and "missing" are
indistinguishable), and a visible object that the role may not change answers 403.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from .choices import Role
from .models import Job, JobEvent, Membership, Team, TeamQuota

# Cached on the user object for one request: {team id: role}.
_ROLES_ATTR = "_gpugov_team_roles"
M = TypeVar("M", bound=Model)


def is_cluster_admin(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def cluster_admin_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Console pages: login first, then cluster administrators only (403 for everyone else)."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_cluster_admin(request.user):
            raise PermissionDenied("The console is for cluster administrators.")
        return view(request, *args, **kwargs)

    return wrapper


def team_roles(user: Any) -> dict[int, str]:
    """The user's role in each of their teams, by team id (one query per request)."""
    if not (user.is_authenticated and user.is_active):
        return {}
    roles = getattr(user, _ROLES_ATTR, None)
    if roles is None:
        roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        setattr(user, _ROLES_ATTR, roles)
    return roles


def role_in(user: Any, team: Team | int) -> str | None:
    """The user's team role (a ``Role`` value) in ``team``, or None."""
    team_id = team if isinstance(team, int) else team.pk
    return team_roles(user).get(team_id)


# --- What a user sees -------------------------------------------------------------------------
def visible_to(user: Any, queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` narrowed to the rows ``user`` may see: the one filter of every list.

    Cluster admins see everything; team roles see their teams and what belongs to them;
    anyone else (anonymous, inactive, no team) sees nothing.
    """
    if is_cluster_admin(user):
        return queryset
    if not (user.is_authenticated and user.is_active):
        return queryset.none()
    team_ids = list(team_roles(user))
    model = queryset.model
    if model is Team:
        return queryset.filter(pk__in=team_ids)
    if model in (Job, TeamQuota, Membership):
        return queryset.filter(team_id__in=team_ids)
    if model is JobEvent:
        return queryset.filter(job__team_id__in=team_ids)
    raise TypeError(f"access.visible_to does not know {model.__name__}")


def visible_teams(user: Any) -> QuerySet[Team]:
    return visible_to(user, Team.objects.all())


def visible_jobs(user: Any) -> QuerySet[Job]:
    return visible_to(user, Job.objects.all())


def can_read_cluster(user: Any) -> bool:
    """Cluster-wide facts (instance types, nodes, priority classes, the policy): staff, or
    anyone with a role in some team."""
    return is_cluster_admin(user) or bool(team_roles(user))


def can_see_free_capacity(user: Any) -> bool:
    """The cluster's free capacity per instance type (ready, used, free and pending GPUs, no
    team's jobs or names), so that users choose where to submit: staff, or anyone with a role
    in some team. A user in no team submits nowhere and sees none of it."""
    return can_read_cluster(user)


def can_view_team(user: Any, team: Team) -> bool:
    return is_cluster_admin(user) or role_in(user, team) is not None


def can_submit(user: Any, team: Team) -> bool:
    """Team admins and members submit; viewers only read."""
    return is_cluster_admin(user) or role_in(user, team) in (Role.TEAM_ADMIN, Role.MEMBER)


def can_manage_job(user: Any, job: Job) -> bool:
    """Cancel or resubmit: the submitter (still a member), a team admin of its team, or staff."""
    if is_cluster_admin(user):
        return True
    role = role_in(user, job.team_id)
    if role == Role.TEAM_ADMIN:
        return True
    return role == Role.MEMBER and job.submitter_id == user.pk


def can_manage_members(user: Any, team: Team) -> bool:
    return is_cluster_admin(user) or role_in(user, team) == Role.TEAM_ADMIN


# --- Lookups that answer 404 / 403 ------------------------------------------------------------
def get_visible_or_404(user: Any, queryset: QuerySet[M], **lookup: Any) -> M:
    """The object matching ``lookup`` among those ``user`` may see; else 404 (never 403, so a
    guessed id tells nothing about another team)."""
    try:
        return visible_to(user, queryset).get(**lookup)
    except (queryset.model.DoesNotExist, ValueError, TypeError) as exc:
        raise Http404(f"No {queryset.model._meta.verbose_name} matches {lookup}") from exc


def require(allowed: bool, why: str) -> None:
    """403 with ``why`` when a visible object may not be changed by this user."""
    if not allowed:
        raise PermissionDenied(why)
