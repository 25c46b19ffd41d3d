"""Membership services (``services/memberships.py``), the one module that writes memberships:
adding, changing and removing are audited; the last team admin stays; a team admin adds only
users they may; the weekly report choices. Concurrent requests: tests/api/test_memberships_api.py."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from allocations.choices import Role
from allocations.models import AuditEntry, Job, Membership
from allocations.services import jobs as job_services
from allocations.services import memberships as services
from tests import factories as f


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
    assert caught.value.message_dict["user"] == ["bob is already a member of team-a."]


@pytest.mark.parametrize("kind", ["staff", "superuser", "inactive"])
def test_a_team_admin_cannot_add_staff_superusers_or_inactive_users(personas, kind):
    user = f.make_user("someone", staff=kind == "staff")
    user.is_superuser = kind == "superuser"
    user.is_active = kind != "inactive"
    user.save()
    with pytest.raises(ValidationError) as caught:
        services.membership_add(actor=personas.team_admin, team=personas.team, user=user)
    assert caught.value.message_dict["user"] == [services.not_addable_message("someone")]
    assert not Membership.objects.filter(user=user).exists()


def test_a_cluster_admin_and_the_system_add_staff(personas):
    operator = f.make_user("operator", staff=True)
    services.membership_add(actor=personas.cluster_admin, team=personas.team, user=operator)
    services.membership_add(actor=None, team=personas.other_team, user=operator)
    assert Membership.objects.filter(user=operator).count() == 2


def test_addable_users_hides_staff_from_team_admins_only(personas):
    assert "admin" not in set(services.addable_users(personas.team_admin).values_list("username", flat=True))
    assert "admin" in set(services.addable_users(personas.cluster_admin).values_list("username", flat=True))


def test_membership_update_is_audited_with_old_and_new(personas):
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    services.membership_update(actor=personas.team_admin, membership=membership, role=Role.TEAM_ADMIN)
    entry = AuditEntry.objects.get()
    assert (entry.field, entry.old_value, entry.new_value) == ("role", "member", "team-admin")


def test_membership_update_refuses_an_unknown_role_or_setting(personas):
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    with pytest.raises(ValidationError) as caught:
        services.membership_update(actor=personas.team_admin, membership=membership, role="boss")
    assert "boss" in " ".join(caught.value.message_dict["role"])
    with pytest.raises(ValidationError) as caught:
        services.membership_update(actor=personas.team_admin, membership=membership, team=personas.other_team)
    assert "team" in caught.value.message_dict
    assert AuditEntry.objects.count() == 0


def test_the_last_team_admin_can_be_neither_demoted_nor_removed(personas):
    membership = Membership.objects.get(user=personas.team_admin, team=personas.team)
    with pytest.raises(ValidationError) as caught:
        services.membership_update(actor=personas.cluster_admin, membership=membership, role=Role.MEMBER)
    assert caught.value.message_dict["role"] == ["alice is the last team admin of team-a."]
    with pytest.raises(ValidationError):
        services.membership_remove(actor=personas.cluster_admin, membership=membership)
    membership.refresh_from_db()
    assert membership.role == Role.TEAM_ADMIN
    # With a second admin, either may go.
    services.membership_update(
        actor=personas.team_admin,
        membership=Membership.objects.get(user=personas.member),
        role=Role.TEAM_ADMIN,
    )
    services.membership_remove(actor=personas.cluster_admin, membership=membership)
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_the_console_form_gives_the_last_admin_rule_on_the_role_field(personas):
    from allocations.forms.policy import MembershipRoleForm

    membership = Membership.objects.get(user=personas.team_admin)
    form = MembershipRoleForm({"role": "viewer", "weekly_report": "on"}, instance=membership)
    assert not form.is_valid()
    assert form.errors["role"] == ["alice is the last team admin of team-a."]


def test_membership_remove_keeps_the_users_jobs_with_the_team(personas):
    job = job_services.job_submit(
        user=personas.member,
        team=personas.team,
        name="train",
        instance_type=personas.instance_type,
        gpus=4,
        command="python train.py",
    )
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    services.membership_remove(actor=personas.team_admin, membership=membership)
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert Job.objects.get(pk=job.pk).team == personas.team
    assert AuditEntry.objects.get().action == "delete"


def test_removing_a_membership_removed_meanwhile_is_refused(personas):
    membership = Membership.objects.get(user=personas.member, team=personas.team)
    Membership.objects.filter(pk=membership.pk).delete()
    with pytest.raises(ValidationError, match="bob is no longer a member of team-a"):
        services.membership_remove(actor=personas.team_admin, membership=membership)


def test_a_membership_in_another_team_the_system_adds(personas):
    """The console's and the demo's path: any user, any role, audited as the system."""
    membership = services.membership_add(
        actor=None, team=personas.other_team, user=personas.member, role="viewer"
    )
    with pytest.raises(ValidationError) as caught:
        services.membership_add(actor=None, team=personas.other_team, user=personas.member)
    assert caught.value.message_dict["user"] == ["bob is already a member of team-b."]
    services.membership_update(actor=None, membership=membership, role="team-admin")
    entry = AuditEntry.objects.get(object_type="membership", action="update")
    assert (entry.old_value, entry.new_value, entry.actor_name) == ("viewer", "team-admin", "system")


def test_weekly_report_choices_touch_only_the_users_memberships(personas):
    f.make_member(personas.member, personas.other_team, "viewer")
    services.membership_weekly_reports_choose(user=personas.member, team_ids={personas.other_team.pk})
    reports = dict(Membership.objects.filter(user=personas.member).values_list("team__name", "weekly_report"))
    assert reports == {"team-a": False, "team-b": True}
    services.membership_weekly_report_stop(user=personas.member, team=personas.other_team)
    assert not Membership.objects.filter(user=personas.member, weekly_report=True).exists()
    assert Membership.objects.filter(weekly_report=True).count() == 3  # the other members' stay on
