"""Team members through the API: team admins manage their team's members (audited), the last
team admin stays, other teams' memberships are invisible."""

from __future__ import annotations

from rest_framework.test import APIClient

from allocations.models import AuditEntry, Membership


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
