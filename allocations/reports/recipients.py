"""Who receives which weekly report, and the signed unsubscribe links.

* a team's report goes to its team admins and members (not viewers) whose
  ``Membership.weekly_report`` is on;
* the cluster report goes to cluster admins (active staff users) unless their
  ``ReportPreference.cluster_report`` is off.

Only active users with an email address receive anything. A report is named by its key:
``cluster`` or ``team:<team id>`` (ids, not names: a renamed team keeps its subscribers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.core import signing

from allocations.choices import Role
from allocations.models import Membership, ReportPreference, Team

CLUSTER = "cluster"
UNSUBSCRIBE_SALT = "gpugov.reports.unsubscribe"


def team_key(team_id: int) -> str:
    return f"team:{team_id}"


@dataclass(frozen=True, slots=True)
class Recipient:
    """One report to one person."""

    report: str  # cluster | team:<id>
    team: str  # the team's name, empty for the cluster report
    team_id: int | None
    user_id: int
    username: str
    email: str


def recipients(*, teams: list[str] | None = None, cluster: bool = True) -> list[Recipient]:
    """Every (report, recipient) pair, team reports first (two queries).

    ``teams``: only these teams' reports (None: every active team's); ``cluster``: include
    the cluster report.
    """
    memberships = Membership.objects.filter(
        weekly_report=True,
        role__in=[Role.TEAM_ADMIN, Role.MEMBER],
        user__is_active=True,
        team__active=True,
    ).exclude(user__email="")
    if teams is not None:
        memberships = memberships.filter(team__name__in=teams)
    found = [
        Recipient(team_key(team_id), team, team_id, user_id, username, email)
        for team_id, team, user_id, username, email in memberships.values_list(
            "team_id", "team__name", "user_id", "user__username", "user__email"
        ).order_by("team__name", "user__username")
    ]
    if cluster:
        opted_out = ReportPreference.objects.filter(cluster_report=False).values("user_id")
        admins = (
            get_user_model()
            .objects.filter(is_active=True, is_staff=True)
            .exclude(email="")
            .exclude(pk__in=opted_out)
            .order_by("username")
        )
        found += [
            Recipient(CLUSTER, "", None, pk, username, email)
            for pk, username, email in admins.values_list("pk", "username", "email")
        ]
    return found


def unsubscribe_token(user_id: int, report: str) -> str:
    """A signed token naming the user and the report. No timestamp: old emails keep working,
    and a preview shows the very link the email carries."""
    return signing.Signer(salt=UNSUBSCRIBE_SALT).sign_object({"u": user_id, "r": report}, compress=True)


@dataclass(frozen=True, slots=True)
class UnsubscribeTarget:
    user: Any
    report: str
    team: Team | None

    @property
    def title(self) -> str:
        return "the cluster report" if self.team is None else f"the weekly report of team {self.team.name}"


def read_unsubscribe_token(token: str) -> UnsubscribeTarget:
    """The user and report a token names; ValueError (naming ``token``) when it is forged,
    malformed, or names a user or team that no longer exists."""
    try:
        data = signing.Signer(salt=UNSUBSCRIBE_SALT).unsign_object(token)
        user_id, report = int(data["u"]), str(data["r"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"token: {token[:60]!r} is not a valid unsubscribe link") from exc
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise ValueError(f"token: the user of this link (id {user_id}) no longer exists")
    if report == CLUSTER:
        return UnsubscribeTarget(user, report, None)
    kind, _, team_id = report.partition(":")
    team = Team.objects.filter(pk=int(team_id)).first() if kind == "team" and team_id.isdigit() else None
    if team is None:
        raise ValueError(f"token: the report of this link ({report!r}) no longer exists")
    return UnsubscribeTarget(user, report, team)
