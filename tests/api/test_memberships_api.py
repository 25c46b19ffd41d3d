"""Team members through the API: team admins manage their team's members (audited), the last
team admin stays, other teams' memberships are invisible."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from allocations.models import AuditEntry, Membership
from tests import factories as f
from tests.races import race_behind_a_lock


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_members_see_their_teams_members_only(personas):
    rows = client_for(personas.member).get("/api/v1/memberships/").json()["results"]
    assert sorted((r["team"], r["username"], r["role"]) for r in rows) == [
        ("team-a", "alice", "team-admin"),
        ("team-a", "bob", "member"),
        ("team-a", "victor", "viewer"),
    ]
    assert client_for(personas.cluster_admin).get("/api/v1/memberships/?team=team-b").json()["count"] == 1


def test_a_team_admin_adds_changes_and_removes_a_member(personas):
    client = client_for(personas.team_admin)
    response = client.post(
        "/api/v1/memberships/", {"team": "team-a", "username": "nobody", "role": "viewer"}, format="json"
    )
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert (
        client.patch(f"/api/v1/memberships/{pk}/", {"role": "member"}, format="json").json()["role"]
        == "member"
    )
    assert client.delete(f"/api/v1/memberships/{pk}/").status_code == 204
    assert not Membership.objects.filter(pk=pk).exists()
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "create",
        "update",
        "delete",
    ]


def test_bad_member_input_answers_400_naming_the_field(personas):
    client = client_for(personas.team_admin)
    cases = [
        ({"team": "team-a", "username": "ghost"}, "username", "ghost"),
        ({"team": "team-a", "username": "bob"}, "username", "already a member"),
        ({"team": "team-a", "username": "nobody", "role": "boss"}, "role", "boss"),
        ({"team": "team-b", "username": "nobody"}, "team", "team-b"),
    ]
    for body, field, word in cases:
        response = client.post("/api/v1/memberships/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert word in " ".join(response.json()[field]), response.json()
    assert Membership.objects.count() == 4


def test_the_last_team_admin_stays(personas):
    own = Membership.objects.get(user=personas.team_admin)
    client = client_for(personas.team_admin)
    response = client.patch(f"/api/v1/memberships/{own.pk}/", {"role": "member"}, format="json")
    assert response.status_code == 400 and "last team admin" in str(response.json())
    assert client.delete(f"/api/v1/memberships/{own.pk}/").status_code == 400
    own.refresh_from_db()
    assert own.role == "team-admin"


def test_a_membership_cannot_move_to_another_user(personas):
    membership = Membership.objects.get(user=personas.viewer)
    response = client_for(personas.team_admin).patch(
        f"/api/v1/memberships/{membership.pk}/", {"username": "nobody"}, format="json"
    )
    assert response.status_code == 400 and "username" in response.json()
    membership.refresh_from_db()
    assert membership.user == personas.viewer


# --- The last team admin under concurrent requests (PostgreSQL) ---------------------------------
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("first", "second"), [("demote", "demote"), ("remove", "remove"), ("demote", "remove")]
)
def test_two_admins_demoted_or_removed_at_once_leave_one(personas, first, second):
    """One of a team's two admins, in two tabs, demotes or removes themselves and the other at
    once: each request alone is allowed, together they must leave one admin, and the one
    refused is a 400, not a deadlock. The audit table is locked meanwhile, so that neither
    request can commit before the other has gone as far as it can: the window a race needs."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL (SQLite lets one writer in at a time)")
    admin = personas.cluster_admin
    f.make_member(admin, personas.team, "team-admin")
    theirs = Membership.objects.get(user=personas.team_admin)
    own = Membership.objects.get(user=admin)
    answers: dict[str, int] = {}

    def change(membership: Membership, how: str) -> None:
        client = APIClient(raise_request_exception=False)
        client.force_authenticate(admin)
        url = f"/api/v1/memberships/{membership.pk}/"
        if how == "demote":
            response = client.patch(url, {"role": "member"}, format="json")
        else:
            response = client.delete(url)
        answers[f"{how} {membership.user.username}"] = response.status_code

    # The audit table is locked until both wait, then released to let their entries be written.
    both_in = race_behind_a_lock(
        AuditEntry._meta.db_table, [lambda: change(theirs, first), lambda: change(own, second)], wait_s=30
    )
    assert both_in, "the two requests were not both waiting for a lock"
    assert Membership.objects.filter(team=personas.team, role="team-admin").count() == 1, answers
    assert sorted(status // 100 for status in answers.values()) == [2, 4], answers


def test_a_team_admin_cannot_add_staff_and_cannot_tell_them_from_unknown_names(personas):
    gone = f.make_user("gone")
    gone.is_active = False
    gone.save()
    client = client_for(personas.team_admin)
    answers = {}
    for name in ("admin", "gone", "ghost"):
        response = client.post("/api/v1/memberships/", {"team": "team-a", "username": name}, format="json")
        assert response.status_code == 400, name
        answers[name] = [e.replace(name, "NAME") for e in response.json()["username"]]
    assert answers["ghost"] == ["No user called NAME can be added to this team."]
    assert answers["admin"] == answers["gone"] == answers["ghost"]
    assert Membership.objects.count() == 4


def test_a_cluster_admin_adds_staff_to_a_team(personas):
    f.make_user("operator", staff=True)
    response = client_for(personas.cluster_admin).post(
        "/api/v1/memberships/", {"team": "team-a", "username": "operator"}, format="json"
    )
    assert response.status_code == 201, response.content
