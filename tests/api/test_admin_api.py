"""Cluster admins change the cluster through the API (the policy services validate and audit);
every other persona is refused and nothing changes; bad values answer 400 naming the field."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from allocations.models import AuditEntry, ClusterPolicy, Node, PriorityClass, Team, TeamQuota
from tests import factories as f


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_admin_adds_a_node_with_the_types_gpus_by_default_and_it_is_audited(personas):
    response = client_for(personas.cluster_admin).post(
        "/api/v1/nodes/", {"name": "p5-extra", "instance_type": "ml.p5.48xlarge"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["gpus"] == 8 and response.json()["state"] == "ready"
    assert AuditEntry.objects.filter(object_type="node", action="create").count() == 1


def test_admin_drains_a_node(personas):
    node = personas.nodes[0]
    response = client_for(personas.cluster_admin).patch(
        f"/api/v1/nodes/{node.name}/", {"state": "draining", "reason": "maintenance"}, format="json"
    )
    assert response.status_code == 200, response.content
    node.refresh_from_db()
    assert (node.state, node.reason) == ("draining", "maintenance")
    entry = AuditEntry.objects.get(field="state")
    assert (entry.old_value, entry.new_value) == ("ready", "draining")


@pytest.mark.parametrize(
    ("url", "method", "data", "field", "word"),
    [
        ("/api/v1/nodes/", "post", {"name": "x", "instance_type": "ml.none"}, "instance_type", "ml.none"),
        (
            "/api/v1/nodes/",
            "post",
            {"name": "x", "instance_type": "ml.p5.48xlarge", "state": "gone"},
            "state",
            "gone",
        ),
        ("/api/v1/priority-classes/", "post", {"name": "urgent", "weight": 101}, "weight", "101"),
        ("/api/v1/priority-classes/", "post", {"name": "Not A Label", "weight": 5}, "name", "Not A Label"),
        ("/api/v1/policy/", "patch", {"queueing": "lifo"}, "queueing", "lifo"),
        ("/api/v1/teams/", "post", {"name": "Team_C"}, "name", "Team_C"),
        ("/api/v1/teams/team-a/", "patch", {"fair_share_weight": -1}, "fair_share_weight", "-1"),
        (
            "/api/v1/quotas/",
            "post",
            {"team": "team-a", "instance_type": "ml.p5.48xlarge", "quota": 4, "lend_limit": 9},
            "lend_limit",
            "9",
        ),
    ],
)
def test_bad_values_answer_400_naming_the_field_and_value(personas, url, method, data, field, word):
    audit_before = AuditEntry.objects.count()
    response = getattr(client_for(personas.cluster_admin), method)(url, data, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert word in " ".join(map(str, errors[field])), errors
    assert AuditEntry.objects.count() == audit_before


def test_admin_changes_the_policy(personas):
    response = client_for(personas.cluster_admin).patch(
        "/api/v1/policy/", {"queueing": "strict-fifo"}, format="json"
    )
    assert response.status_code == 200 and response.json()["queueing"] == "strict-fifo"
    assert ClusterPolicy.objects.get().queueing == "strict-fifo"


def test_admin_sets_a_quota_creating_then_changing_it(personas):
    client = client_for(personas.cluster_admin)
    other_type = f.make_instance_type("ml.g5.xlarge", 1)
    body = {"team": "team-a", "instance_type": "ml.g5.xlarge", "quota": 2}
    assert client.post("/api/v1/quotas/", body, format="json").status_code == 201
    assert client.post("/api/v1/quotas/", {**body, "quota": 3}, format="json").status_code == 201
    quota = TeamQuota.objects.get(team=personas.team, instance_type=other_type)
    assert quota.quota == 3
    response = client.patch(f"/api/v1/quotas/{quota.pk}/", {"borrow_limit_kind": "unlimited"}, format="json")
    assert response.status_code == 200, response.content
    response = client.patch(f"/api/v1/quotas/{quota.pk}/", {"team": "team-b"}, format="json")
    assert response.status_code == 400 and "team" in response.json()


def test_admin_creates_and_deletes_a_team_but_a_team_with_jobs_is_kept(personas):
    client = client_for(personas.cluster_admin)
    assert (
        client.post("/api/v1/teams/", {"name": "team-c", "fair_share_weight": 3}, format="json").status_code
        == 201
    )
    assert Team.objects.get(name="team-c").fair_share_weight == 3
    assert client.delete("/api/v1/teams/team-c/").status_code == 204
    f.make_job(personas.team, personas.instance_type, 1)
    response = client.delete("/api/v1/teams/team-a/")
    assert response.status_code == 400 and "deactivate" in str(response.json())
    assert Team.objects.filter(name="team-a").exists()


@pytest.mark.parametrize("persona", ["team_admin", "member", "viewer", "other_member"])
@pytest.mark.parametrize(
    ("method", "url", "data"),
    [
        ("post", "/api/v1/nodes/", {"name": "n", "instance_type": "ml.p5.48xlarge"}),
        ("patch", "/api/v1/priority-classes/training/", {"weight": 99}),
        ("delete", "/api/v1/priority-classes/training/", None),
        ("patch", "/api/v1/policy/", {"queueing": "strict-fifo"}),
        ("post", "/api/v1/instance-types/", {"name": "ml.x", "gpus_per_node": 4}),
    ],
)
def test_only_cluster_admins_change_cluster_facts(personas, persona, method, url, data):
    response = getattr(client_for(getattr(personas, persona)), method)(url, data, format="json")
    assert response.status_code == 403
    assert not AuditEntry.objects.exists()
    assert PriorityClass.objects.get(name="training").weight == 70
    assert Node.objects.count() == 2


@pytest.mark.parametrize(
    ("persona", "expected"), [("team_admin", 403), ("member", 403), ("other_member", 404)]
)
def test_team_settings_are_changed_by_cluster_admins_only(personas, persona, expected):
    client = client_for(getattr(personas, persona))
    assert (
        client.patch("/api/v1/teams/team-a/", {"fair_share_weight": 9}, format="json").status_code == expected
    )
    quota = TeamQuota.objects.get(team=personas.team)
    assert client.patch(f"/api/v1/quotas/{quota.pk}/", {"quota": 1}, format="json").status_code == expected
    assert Team.objects.get(name="team-a").fair_share_weight == 1
    assert TeamQuota.objects.get(pk=quota.pk).quota == 8


@pytest.mark.parametrize(
    ("data", "field", "word"),
    [
        ({"fair_share_half_life_s": -1}, "fair_share_half_life_s", "-1"),
        ({"fair_share_half_life_s": "soon"}, "fair_share_half_life_s", "soon"),
        ({"fair_share_history_percent": 101}, "fair_share_history_percent", "101"),
    ],
)
def test_bad_fairness_over_time_answers_400_naming_field_and_value(personas, data, field, word):
    response = client_for(personas.cluster_admin).patch("/api/v1/policy/", data, format="json")
    assert response.status_code == 400, response.content
    assert word in " ".join(map(str, response.json()[field]))
    assert ClusterPolicy.objects.get().fair_share_history_percent == 0


def test_admin_turns_fairness_over_time_on(personas):
    response = client_for(personas.cluster_admin).patch(
        "/api/v1/policy/", {"fair_share_half_life_s": 86400, "fair_share_history_percent": 50}, format="json"
    )
    assert response.status_code == 200, response.content
    assert (response.json()["fair_share_half_life_s"], response.json()["fair_share_history_percent"]) == (
        86400,
        50,
    )
    audited = set(AuditEntry.objects.values_list("field", "new_value"))
    assert {("fair_share_half_life_s", "86400"), ("fair_share_history_percent", "50")} <= audited
