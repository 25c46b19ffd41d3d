"""The admin console: access (login, staff only), forms whose errors name the field, the
over-commit warning with its numbers, and the audit trail the pages write."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from allocations.models import AuditEntry, Job, Membership, Node, PriorityClass, Team, TeamQuota
from allocations.services import policy as services
from tests import factories as f
from tests.conftest import PASSWORD, Personas

pytestmark = pytest.mark.django_db


def console_urls(p: Personas) -> dict[str, str]:
    """Every console page (GET) with the arguments it needs."""
    team = p.team.name
    member = Membership.objects.get(user=p.member, team=p.team).pk
    return {
        "console_teams": reverse("allocations:console_teams"),
        "team_create": reverse("allocations:team_create"),
        "team_detail": reverse("allocations:team_detail", kwargs={"name": team}),
        "team_delete": reverse("allocations:team_delete", kwargs={"name": team}),
        "member_add": reverse("allocations:member_add", kwargs={"name": team}),
        "member_update": reverse("allocations:member_update", kwargs={"name": team, "pk": member}),
        "priority_classes": reverse("allocations:priority_classes"),
        "priority_class_edit": reverse(
            "allocations:priority_class_edit", kwargs={"pk": p.priority_classes["training"].pk}
        ),
        "policy": reverse("allocations:policy"),
        "nodes": reverse("allocations:nodes"),
        "capacity_live": reverse("allocations:capacity_live"),
        "node_detail": reverse("allocations:node_detail", kwargs={"pk": p.nodes[0].pk}),
        "node_edit": reverse("allocations:node_edit", kwargs={"pk": p.nodes[0].pk}),
        "node_state": reverse("allocations:node_state", kwargs={"pk": p.nodes[0].pk}),
        "instance_types": reverse("allocations:instance_types"),
        "instance_type_edit": reverse("allocations:instance_type_edit", kwargs={"pk": p.instance_type.pk}),
        "console_jobs": reverse("allocations:console_jobs"),
        "audit": reverse("allocations:audit"),
    }


CONSOLE_PAGES = [
    "console_teams",
    "team_create",
    "team_detail",
    "team_delete",
    "member_add",
    "member_update",
    "priority_classes",
    "priority_class_edit",
    "policy",
    "nodes",
    "capacity_live",
    "node_detail",
    "node_edit",
    "node_state",
    "instance_types",
    "instance_type_edit",
    "console_jobs",
    "audit",
]


def test_the_access_tests_cover_every_console_page():
    """A new console page must join CONSOLE_PAGES, so that the 403 and login tests cover it."""
    from allocations.views import console

    assert {pattern.name for pattern in console.urlpatterns} == {"home", *CONSOLE_PAGES}


NON_STAFF = ["team_admin", "member", "viewer", "other_member", "outsider"]


def signed_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@pytest.fixture
def admin(personas: Personas) -> Client:
    return signed_in(personas.cluster_admin)


@pytest.mark.parametrize("page", CONSOLE_PAGES)
@pytest.mark.parametrize("persona", NON_STAFF)
@pytest.mark.parametrize("method", ["get", "post"])
def test_non_staff_get_403_on_every_console_page(personas, page, persona, method):
    client = signed_in(getattr(personas, persona))
    response = getattr(client, method)(console_urls(personas)[page])
    assert response.status_code == 403
    assert "The console is for cluster administrators." in response.content.decode()
    assert Team.objects.filter(name="team-a").exists()  # nothing was changed on the way
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("page", CONSOLE_PAGES)
def test_anonymous_is_sent_to_login(personas, page):
    url = console_urls(personas)[page]
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


READABLE_PAGES = [
    p
    for p in CONSOLE_PAGES
    if p not in {"team_delete", "member_add", "member_update", "node_state", "capacity_live"}
]


@pytest.mark.parametrize("page", READABLE_PAGES)
def test_cluster_admin_sees_every_console_page_with_the_nav(personas, admin, page):
    response = admin.get(console_urls(personas)[page])
    assert response.status_code == 200
    html = response.content.decode()
    for label in (
        "Capacity",
        "Teams",
        "Priority classes",
        "Policy",
        "Nodes",
        "Instance types",
        "Jobs",
        "Audit",
    ):
        assert f">{label}</a>" in html
    assert "test-cluster" in html
    assert 'action="/accounts/logout/"' in html


def test_home_is_capacity_for_staff_and_my_teams_for_others(personas, admin):
    response = admin.get("/")
    assert response.status_code == 200
    assert "Capacity and quotas" in response.content.decode()
    response = signed_in(personas.member).get("/")
    assert response.status_code == 302
    assert response["Location"] == reverse("allocations:my_teams")
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_capacity_page_shows_quota_sums_and_borrow_caps(personas, admin):
    html = admin.get("/").content.decode()
    assert "16 of 16 GPUs" in html  # two ready nodes of 8
    assert "50% = 4 GPUs" in html
    assert "over-committed" not in html


def test_degraded_backend_shows_a_banner_with_the_error(personas, admin):
    personas.cluster.backend_healthy = False
    personas.cluster.backend_error = "slurmctld: connection refused"
    personas.cluster.save()
    html = admin.get(reverse("allocations:nodes")).content.decode()
    assert 'id="backend-degraded"' in html
    assert "slurmctld: connection refused" in html
    login_page = Client().get(reverse("login")).content.decode()
    assert "connection refused" not in login_page  # nothing about the cluster before sign-in


def team_post(team: Team | None, quotas: dict[str, dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """The POST of the team form: its settings and one quota row per instance type."""
    data: dict[str, Any] = {
        "name": team.name if team else "new-team",
        "display_name": team.display_name if team else "New team",
        "active": "on",
        "fair_share_weight": 1,
        "sharing": "lend-and-borrow",
        "preempt_team_tasks": "lower-priority",
        "reclaim": "any",
        "preempt_while_borrowing": "",
        "preempt_while_borrowing_max_priority": "",
        **settings,
    }
    from allocations.models import InstanceType

    types = list(InstanceType.objects.all())
    data.update({"quota-TOTAL_FORMS": len(types), "quota-INITIAL_FORMS": len(types)})
    for i, instance_type in enumerate(types):
        row = {
            "instance_type": instance_type.pk,
            "quota": 0,
            "borrow_limit_kind": "percent",
            "borrow_limit_percent": 50,
            "borrow_limit": "",
            "lend_limit": "",
            **quotas.get(instance_type.name, {}),
        }
        data.update({f"quota-{i}-{key}": value for key, value in row.items()})
    return data


def test_creating_a_team_over_capacity_warns_with_both_numbers(personas, admin):
    data = team_post(None, {"ml.p5.48xlarge": {"quota": 24}}, name="vision")
    response = admin.post(reverse("allocations:team_create"), data, follow=True)
    assert response.redirect_chain[-1][0] == reverse("allocations:team_detail", kwargs={"name": "vision"})
    html = response.content.decode()
    warning = "Quotas of ml.p5.48xlarge add up to 40 GPUs, more than its 16 ready GPUs."
    assert warning in [str(m) for m in response.context["messages"]]
    assert warning in html
    assert TeamQuota.objects.get(team__name="vision").quota == 24
    created = AuditEntry.objects.filter(action="create").values_list("object_type", "object_repr")
    assert set(created) == {("team", "vision"), ("team quota", "vision / ml.p5.48xlarge")}
    assert all(e.actor_name == "admin" for e in AuditEntry.objects.all())


def test_negative_quota_error_names_the_field_and_value(personas, admin):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": -3}})
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "ml.p5.48xlarge, Quota:</strong> Quota must be 0 or more GPUs; got -3." in html
    assert TeamQuota.objects.get(team=personas.team).quota == 8
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize(
    ("settings", "quota", "message"),
    [
        ({"fair_share_weight": 101}, {}, "Fair-share weight must be at most 100; got 101."),
        ({"name": "Team_A"}, {}, "got &#x27;Team_A&#x27;"),
        ({"name": "a" * 41}, {}, "Name (a DNS label) must be at most 40 characters; got 41."),
        ({"name": ""}, {}, "Name (a DNS label) is required."),
        ({"name": "team-b"}, {}, "A team named &#x27;team-b&#x27; already exists."),
        (
            {"fair_share_weight": "lots"},
            {},
            "Fair-share weight must be a whole number; got &#x27;lots&#x27;.",
        ),
        ({"reclaim": "never", "preempt_while_borrowing": "lower-priority"}, {}, "needs reclaim"),
        ({}, {"lend_limit": 9}, "Lend limit must be at most the quota (8 GPUs); got 9."),
        ({}, {"borrow_limit_kind": "absolute"}, "Give the borrow limit in GPUs"),
    ],
)
def test_team_form_errors_name_the_field(personas, admin, settings, quota, message):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8, **quota}}, **settings)
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not AuditEntry.objects.exists()
    assert Team.objects.get(pk=personas.team.pk).fair_share_weight == 1


def test_saving_a_team_audits_each_changed_field(personas, admin):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 6, "lend_limit": 2}}, fair_share_weight=4)
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 302
    rows = set(AuditEntry.objects.values_list("object_repr", "field", "old_value", "new_value"))
    assert rows == {
        ("team-a", "fair_share_weight", "1", "4"),
        ("team-a / ml.p5.48xlarge", "quota", "8", "6"),
        ("team-a / ml.p5.48xlarge", "lend_limit", "(none)", "2"),
    }


def test_a_team_is_saved_whole_or_not_at_all(personas, admin, monkeypatch):
    """A quota row refused by the service (past the form's checks: say a concurrent change)
    leaves the team's settings and the rows before it as they were, and audits nothing."""
    from allocations.models import InstanceType
    from allocations.services import policy as services

    g5 = InstanceType.objects.create(name="ml.g5.12xlarge", gpus_per_node=4)
    real = services.team_quota_set

    def refuse_g5(**kwargs):
        if kwargs["instance_type"] == g5:
            raise ValidationError({"quota": "Quota refused for this test; got 2."})
        return real(**kwargs)

    monkeypatch.setattr(services, "team_quota_set", refuse_g5)
    data = team_post(
        personas.team,
        {"ml.p5.48xlarge": {"quota": 6}, "ml.g5.12xlarge": {"quota": 2}},
        fair_share_weight=4,
        display_name="Renamed",
    )
    response = admin.post(reverse("allocations:team_detail", kwargs={"name": "team-a"}), data)
    assert response.status_code == 200
    assert "Quota refused for this test; got 2." in response.content.decode()
    team = Team.objects.get(pk=personas.team.pk)
    assert (team.fair_share_weight, team.display_name) == (1, personas.team.display_name)
    assert TeamQuota.objects.get(team=team, instance_type__name="ml.p5.48xlarge").quota == 8
    assert not AuditEntry.objects.exists()


def test_members_are_added_changed_and_removed(personas, admin):
    # olga too is a team admin of team-b, so that bob may go (a team keeps one).
    Membership.objects.filter(user=personas.other_member).update(role="team-admin")
    url = reverse("allocations:member_add", kwargs={"name": "team-b"})
    admin.post(url, {"username": "bob", "role": "viewer", "weekly_report": "on"})
    membership = Membership.objects.get(team=personas.other_team, user=personas.member)
    assert membership.role == "viewer"
    response = admin.post(url, {"username": "ghost", "role": "member"}, follow=True)
    assert "User name: There is no user named &#x27;ghost&#x27;." in response.content.decode()
    update = reverse("allocations:member_update", kwargs={"name": "team-b", "pk": membership.pk})
    admin.post(update, {"action": "save", f"m{membership.pk}-role": "team-admin"})
    assert Membership.objects.get(pk=membership.pk).role == "team-admin"
    admin.post(update, {"action": "remove"})
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert list(AuditEntry.objects.order_by("id").values_list("object_type", "action")) == [
        ("membership", "create"),
        ("membership", "update"),
        ("membership", "update"),  # weekly_report was unticked in the role form
        ("membership", "delete"),
    ]
    last = Membership.objects.get(user=personas.other_member)
    update = reverse("allocations:member_update", kwargs={"name": "team-b", "pk": last.pk})
    response = admin.post(update, {"action": "remove"}, follow=True)
    assert "olga is the last team admin of team-b." in response.content.decode()
    assert Membership.objects.filter(pk=last.pk).exists()


def test_priority_class_form(personas, admin):
    url = reverse("allocations:priority_classes")
    response = admin.post(url, {"name": "urgent", "weight": 101})
    assert "Weight must be at most 100; got 101." in response.content.decode()
    response = admin.post(url, {"name": "urgent", "weight": 95, "description": "pager"})
    assert response.status_code == 302
    assert PriorityClass.objects.get(name="urgent").weight == 95


def test_node_state_change_and_overcommit_warning(personas, admin):
    node = personas.nodes[0]
    response = admin.post(
        reverse("allocations:node_state", kwargs={"pk": node.pk}),
        {"state": "down", "reason": "PSU failed", "next": "https://evil.example/"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == reverse("allocations:nodes")
    node.refresh_from_db()
    assert (node.state, node.reason) == ("down", "PSU failed")
    warning = "Quotas of ml.p5.48xlarge add up to 16 GPUs, more than its 8 ready GPUs."
    assert warning in [str(m) for m in response.context["messages"]]
    entries = set(AuditEntry.objects.values_list("field", "old_value", "new_value"))
    assert entries == {("state", "ready", "down"), ("reason", "(none)", "PSU failed")}


def test_node_form_refuses_more_gpus_than_the_type_has(personas, admin):
    response = admin.post(
        reverse("allocations:nodes"),
        {
            "new-name": "huge",
            "new-instance_type": personas.instance_type.pk,
            "new-gpus": 16,
            "new-state": "ready",
        },
    )
    assert "A node of ml.p5.48xlarge has at most 8 GPUs; got 16." in response.content.decode()
    assert not Node.objects.filter(name="huge").exists()


def test_policy_page_saves_each_form_separately(personas, admin):
    url = reverse("allocations:policy")
    response = admin.post(
        url,
        {
            "form": "cluster",
            "cluster-name": "prod",
            "cluster-backend_kind": "simulated",
            "cluster-backend_settings": "{not json",
            "cluster-time_zone": "Mars/Base",
        },
    )
    html = response.content.decode()
    assert "Backend settings must be valid JSON" in html
    response = admin.post(
        url,
        {
            "form": "cluster",
            "cluster-name": "prod",
            "cluster-backend_kind": "simulated",
            "cluster-backend_settings": "{}",
            "cluster-time_zone": "Mars/Base",
        },
    )
    assert "Time zone must be an IANA name such as Europe/Berlin or UTC; got &#x27;Mars/Base&#x27;." in (
        response.content.decode()
    )
    response = admin.post(
        url,
        {
            "form": "policy",
            "policy-idle_allocation": "first-come-first-serve",
            "policy-task_ranking": "priority",
            "policy-queueing": "strict-fifo",
        },
    )
    assert response.status_code == 302
    personas.cluster.policy.refresh_from_db()
    assert (personas.cluster.policy.idle_allocation, personas.cluster.policy.share_unallocated) == (
        "first-come-first-serve",
        False,
    )


def test_jobs_page_filters_and_paginates(personas, admin):
    for _ in range(55):
        f.make_job(personas.team, personas.instance_type, 8)
    f.make_job(personas.other_team, personas.instance_type, 8, name="other-teams-job", state="running")
    url = reverse("allocations:console_jobs")
    first = admin.get(url)
    assert len(first.context["page"]) == 50
    assert first.context["page"].paginator.count == 56
    running = admin.get(url, {"state": "running"})
    assert [j.name for j in running.context["page"]] == ["other-teams-job"]
    team_a = admin.get(url, {"team": "team-a", "page": 2})
    assert len(team_a.context["page"]) == 5
    assert "?team=team-a&amp;page=1" in team_a.content.decode()
    assert Job.objects.count() == 56


def test_audit_page_filters(personas, admin):
    services.team_update(actor=personas.cluster_admin, team=personas.team, fair_share_weight=3)
    services.priority_class_update(
        actor=None, priority_class=personas.priority_classes["training"], weight=60
    )
    url = reverse("allocations:audit")
    every = admin.get(url).context["page"]
    assert len(every) == 2
    by_type = admin.get(url, {"object_type": "team"}).context["page"]
    assert [(e.object_repr, e.field, e.old_value, e.new_value) for e in by_type] == [
        ("team-a", "fair_share_weight", "1", "3")
    ]
    by_actor = admin.get(url, {"actor": "system"}).context["page"]
    assert [e.object_repr for e in by_actor] == ["training"]
    by_object = admin.get(url, {"object": "train"}).context["page"]
    assert [e.field for e in by_object] == ["weight"]
    assert len(admin.get(url, {"since": "2000-01-01", "until": "2000-01-02"}).context["page"]) == 0
    response = admin.get(url, {"since": "yesterday"})
    assert "From: From must be a date like 2026-01-31." in response.content.decode()
    response = admin.get(url, {"since": "2030-01-02", "until": "2030-01-01"})
    assert "must not be before From" in response.content.decode()


def test_capacity_page_query_count_does_not_grow(personas, admin, django_assert_max_num_queries):
    admin.get("/")  # warm the session
    other_type = f.make_instance_type("ml.g5.12xlarge", 4)
    for i in range(15):
        f.make_team(f"extra-{i}", {personas.instance_type: 1, other_type: 2})
    f.make_nodes(other_type, 20)
    # The overview (3), the live jobs' snapshot (7), the team count, the session and the user.
    with django_assert_max_num_queries(14):
        assert admin.get("/").status_code == 200
    with django_assert_max_num_queries(12):
        assert admin.get(reverse("allocations:console_teams")).status_code == 200


# --- Django's admin (secondary): saves go through the services; history is read-only ------------
@pytest.fixture
def superuser_client(personas: Personas) -> Client:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    client = Client()
    assert client.login(username="root", password=PASSWORD)
    return client


def test_django_admin_lists_every_model(personas, superuser_client):
    f.make_job(personas.team, personas.instance_type, 8)
    services.team_update(actor=None, team=personas.team, fair_share_weight=2)
    for model in [
        "cluster",
        "clusterpolicy",
        "instancetype",
        "node",
        "priorityclass",
        "team",
        "membership",
        "teamquota",
        "job",
        "jobevent",
        "auditentry",
    ]:
        assert superuser_client.get(f"/django-admin/allocations/{model}/").status_code == 200, model


def test_django_admin_saves_through_the_service_and_audits(personas, superuser_client):
    url = f"/django-admin/allocations/team/{personas.team.pk}/change/"
    data = team_post(personas.team, {}, fair_share_weight=7)
    data = {k: v for k, v in data.items() if not k.startswith("quota-")}
    data.update(
        {
            "quotas-TOTAL_FORMS": 1,
            "quotas-INITIAL_FORMS": 1,
            "quotas-MIN_NUM_FORMS": 0,
            "quotas-MAX_NUM_FORMS": 1000,
            "quotas-0-id": TeamQuota.objects.get(team=personas.team).pk,
        }
    )
    bad = superuser_client.post(url, {**data, "fair_share_weight": 101})
    assert bad.status_code == 200
    assert "Fair-share weight must be at most 100; got 101." in bad.content.decode()
    response = superuser_client.post(url, data)
    assert response.status_code == 302
    entry = AuditEntry.objects.get()
    assert (entry.actor_name, entry.field, entry.old_value, entry.new_value) == (
        "root",
        "fair_share_weight",
        "1",
        "7",
    )


def test_django_admin_history_is_read_only(personas, superuser_client):
    services.team_update(actor=None, team=personas.team, fair_share_weight=2)
    entry = AuditEntry.objects.get()
    url = f"/django-admin/allocations/auditentry/{entry.pk}/change/"
    assert "Save" not in superuser_client.get(url).content.decode().split("<form")[-1]
    superuser_client.post(url, {"new_value": "forged"})
    assert AuditEntry.objects.get().new_value == "2"
    assert (
        superuser_client.post(f"/django-admin/allocations/auditentry/{entry.pk}/delete/").status_code == 403
    )


GARBAGE = ["", "-1", "99999999999999999999999", "x" * 300, "<script>"]
TEAM_FIELDS = [
    "name",
    "fair_share_weight",
    "sharing",
    "reclaim",
    "preempt_while_borrowing",
    "preempt_while_borrowing_max_priority",
    "allowed_priority_classes",
    "default_priority_class",
    "max_gpus_per_job",
    "max_pending_jobs_per_member",
    "max_pending_jobs",
    "max_running_gpus_per_member",
    "quota-0-quota",
    "quota-0-borrow_limit_kind",
    "quota-0-borrow_limit_percent",
    "quota-0-borrow_limit",
    "quota-0-lend_limit",
    "quota-0-instance_type",
    "quota-TOTAL_FORMS",
]


@pytest.mark.parametrize("field", TEAM_FIELDS)
def test_bad_input_to_the_team_page_is_an_error_never_a_crash(personas, admin, field):
    for value in GARBAGE:
        team = Team.objects.get(pk=personas.team.pk)  # a digits-only name is valid: it may be renamed
        url = reverse("allocations:team_detail", kwargs={"name": team.name})
        data = {**team_post(team, {}), field: value}
        response = admin.post(url, data)
        assert response.status_code in (200, 302), (field, value)
        if response.status_code == 200:
            assert 'class="errors' in response.content.decode(), (field, value)


@pytest.mark.parametrize(
    ("url_name", "data"),
    [
        ("nodes", {"new-name": "n", "new-instance_type": "999", "new-gpus": "x", "new-state": "melted"}),
        ("instance_types", {"name": "ML P5", "gpus_per_node": "0", "price_per_gpu_hour": "NaN"}),
        ("priority_classes", {"name": "x" * 300, "weight": "-5"}),
        ("policy", {"form": "policy", "policy-idle_allocation": "random", "policy-queueing": "lifo"}),
        ("policy", {"form": "cluster", "cluster-backend_settings": "[1]", "cluster-backend_kind": "k8s"}),
    ],
)
def test_bad_input_to_other_forms_is_an_error_never_a_crash(personas, admin, url_name, data):
    response = admin.post(reverse(f"allocations:{url_name}"), data)
    assert response.status_code == 200
    assert 'class="errors' in response.content.decode()
    assert not AuditEntry.objects.exists()


def test_list_pages_query_count_does_not_grow_with_rows(personas, admin):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    pages = [
        reverse("allocations:console_jobs"),
        reverse("allocations:team_detail", kwargs={"name": "team-a"}),
        reverse("allocations:audit"),
        reverse("allocations:nodes"),
        reverse("allocations:priority_classes"),
    ]

    def queries() -> list[int]:
        counts = []
        for url in pages:
            with CaptureQueriesContext(connection) as captured:
                assert admin.get(url).status_code == 200
            counts.append(len(captured.captured_queries))
        return counts

    f.make_job(personas.team, personas.instance_type, 8)  # one row each, so that only growth differs
    services.team_update(actor=personas.cluster_admin, team=personas.team, fair_share_weight=50)
    before = queries()
    for i in range(20):
        user = f.make_user(f"user-{i}")
        f.make_member(user, personas.team, "member")
        f.make_job(
            personas.team, personas.instance_type, 8, submitter=user, state="running", nodes=[["n", 8]]
        )
        services.team_update(actor=personas.cluster_admin, team=personas.team, fair_share_weight=i + 2)
    f.make_nodes(personas.instance_type, 20)
    assert queries() == before


def test_nav_shows_console_links_to_staff_only_and_skips_pages_that_do_not_exist(personas, rf):
    from allocations import context_processors

    request = rf.get("/console/teams/team-a/")
    request.user = personas.member
    member_labels = [link["label"] for link in context_processors.console(request)["nav"]]
    assert "My teams" in member_labels
    assert not {"Capacity", "Teams", "Audit"} & set(member_labels)

    request.user = personas.cluster_admin
    links = context_processors.console(request)["nav"]
    assert [link["label"] for link in links][:8] == [label for _, label in context_processors.CONSOLE_NAV]
    assert [link["label"] for link in links if link["active"]] == ["Teams"]
    assert context_processors._links(request, [("allocations:no_such_page", "Nowhere")]) == []
