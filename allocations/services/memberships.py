"""Writes of team memberships, the only ones: adding a user to a team, changing a member's role
or weekly report, removing a member. The console, the team pages, the API, the admin, the
report subscriptions and the demo all come here, so the rules hold whichever way a change
comes in:

* one membership per user and team;
* a team admin adds active users who are neither staff nor superusers (a cluster admin adds
  any active user), and a name they may not add gets the answer of a name nobody has, so the
  form tells no one which names exist;
* a team keeps at least one team admin: the last one can be neither demoted nor removed.

Adding, changing and removing are audited. Each locks the team's row first
(``select_for_update``), so the changes of one team's members run one after the other: two
requests that each demote or remove one of two team admins cannot both find the other still
there (tests/api/test_memberships_api.py races them on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet

from allocations.access import is_cluster_admin
from allocations.choices import Role
from allocations.models import Membership, Team
from allocations.services import audit

MEMBERSHIP_FIELDS = ("role", "weekly_report")


# --- Who may be added ---------------------------------------------------------------------------
def addable_users(actor: Any) -> QuerySet[Any]:
    """The users ``actor`` may add to a team they manage, to look a name up among: active
    accounts and, unless ``actor`` is a cluster admin (or the system, None), no staff or
    superuser: those powers are given by cluster admins, in the console."""
    users = get_user_model().objects.filter(is_active=True)
    if actor is None or is_cluster_admin(actor):
        return users
    return users.filter(is_staff=False, is_superuser=False)


def not_addable_message(username: str) -> str:
    """The answer for a name that ``addable_users`` does not hold, whether or not it exists."""
    return f"No user called {username!r} can be added to this team."


def _may_add(actor: Any, user: Any) -> bool:
    if not user.is_active:
        return False
    return actor is None or is_cluster_admin(actor) or not (user.is_staff or user.is_superuser)


# --- Rules --------------------------------------------------------------------------------------
def _last_team_admin_problem(membership: Membership, new_role: str | None) -> str:
    """Why ``membership`` may not become ``new_role`` (None: be removed), or "" when it may:
    a team keeps a team admin, so that it can always manage itself."""
    if membership.role != Role.TEAM_ADMIN or new_role == Role.TEAM_ADMIN:
        return ""
    others = Membership.objects.filter(team=membership.team_id, role=Role.TEAM_ADMIN).exclude(
        pk=membership.pk
    )
    if others.exists():
        return ""
    return f"{membership.user.get_username()} is the last team admin of {membership.team.name}."


def validate_membership(values: Mapping[str, Any], current: Membership | None = None) -> None:
    """A role of a user in a team: one membership per user and team, and (``current``, the
    membership being changed) the last team admin keeps the role. The console's forms run it
    too, so that a person sees the same message before the change is tried."""
    errors: dict[str, list[str]] = {}
    role = values.get("role")
    if role not in Role.values:
        errors.setdefault("role", []).append(f"Role must be one of {', '.join(Role.values)}; got {role!r}.")
    elif current is not None and (problem := _last_team_admin_problem(current, role)):
        errors.setdefault("role", []).append(problem)
    if not isinstance(values.get("weekly_report", True), bool):
        errors.setdefault("weekly_report", []).append(
            f"Weekly report must be true or false; got {values.get('weekly_report')!r}."
        )
    user, team = values.get("user"), values.get("team")
    if (
        current is None
        and user is not None
        and team is not None
        and Membership.objects.filter(user=user, team=team).exists()
    ):
        errors.setdefault("user", []).append(f"{user.get_username()} is already a member of {team.name}.")
    if errors:
        raise ValidationError(errors)


# --- Locks --------------------------------------------------------------------------------------
def _lock_team(team_id: int) -> None:
    """Hold the team's row until the transaction ends: every write of the team's members takes
    it first, so each one's checks see the others' results."""
    list(Team.objects.select_for_update().filter(pk=team_id).values_list("pk", flat=True))


def _locked(membership: Membership) -> Membership:
    """``membership`` read afresh under its team's lock; refused if it was removed meanwhile.
    Its own row only is locked (``of``): a plain ``select_for_update`` would lock the joined
    user row too, and two requests of one admin could deadlock (the audit entry of one, which
    names the admin, waiting for the admin's user row that the other holds)."""
    _lock_team(membership.team_id)
    fresh = (
        Membership.objects.select_for_update(of=("self",))
        .select_related("team", "user")
        .filter(pk=membership.pk)
        .first()
    )
    if fresh is None:
        raise ValidationError(
            f"{membership.user.get_username()} is no longer a member of {membership.team.name}."
        )
    return fresh


# --- Writes -------------------------------------------------------------------------------------
def membership_add(
    *, actor: Any, team: Team, user: Any, role: str = Role.MEMBER, weekly_report: bool = True
) -> Membership:
    """Give ``user`` a role in ``team``; refused, on ``user``, when they have one there already
    or are not ``actor``'s to add (``addable_users``)."""
    values = {"role": role, "weekly_report": weekly_report}
    with transaction.atomic():
        _lock_team(team.pk)
        if not _may_add(actor, user):
            raise ValidationError({"user": not_addable_message(user.get_username())})
        validate_membership({**values, "user": user, "team": team})
        membership = Membership.objects.create(team=team, user=user, **values)
        audit.record_create(actor=actor, obj=membership, values=values)
    return membership


def membership_update(*, actor: Any, membership: Membership, **changes: Any) -> Membership:
    """Change a member's role or weekly report (``MEMBERSHIP_FIELDS``), one audit entry per
    changed field; the last team admin of a team cannot be demoted."""
    audit.refuse_unknown(changes, MEMBERSHIP_FIELDS)
    with transaction.atomic():
        locked = _locked(membership)
        audit.apply_changes(
            actor=actor, obj=locked, fields=MEMBERSHIP_FIELDS, changes=changes, validate=validate_membership
        )
    return locked


def membership_remove(*, actor: Any, membership: Membership) -> None:
    """Take a user out of a team (their jobs stay with the team); never its last team admin."""
    with transaction.atomic():
        locked = _locked(membership)
        problem = _last_team_admin_problem(locked, None)
        if problem:
            raise ValidationError({"role": problem})
        audit.record_delete(actor=actor, obj=locked, values=audit.field_values(locked, MEMBERSHIP_FIELDS))
        locked.delete()


# --- Weekly reports (a user's own choice: not audited) ------------------------------------------
def membership_weekly_reports_choose(*, user: Any, team_ids: Iterable[int]) -> None:
    """Send ``user`` the weekly report of the teams in ``team_ids`` and of none of their others."""
    team_ids = set(team_ids)
    with transaction.atomic():
        memberships = Membership.objects.filter(user=user)
        memberships.filter(team_id__in=team_ids).update(weekly_report=True)
        memberships.exclude(team_id__in=team_ids).update(weekly_report=False)


def membership_weekly_report_stop(*, user: Any, team: Team) -> None:
    """Stop ``team``'s weekly report to ``user`` (idempotent; nothing when not a member)."""
    Membership.objects.filter(user=user, team=team).update(weekly_report=False)
