"""The cluster right now: the capacity page's use beside quotas (used within quota, borrowed and
from where, lent, idle, pending and the oldest wait), the nodes and node pages (jobs on each node,
history of states), the free capacity members see, and bounded queries on all of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from allocations import access
from allocations.backends.base import BackendNode
from allocations.choices import NodeState
from allocations.models import Cluster, Node, NodeStateChange
from allocations.selectors.live import cluster_now, free_capacity, node_jobs
from allocations.services import policy as services
from allocations.services.loop import _Changes, _sync_nodes, run_allocation_cycle
from tests import factories as f
from tests.conftest import PASSWORD, Personas

pytestmark = pytest.mark.django_db


def signed_in(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def running(personas: Personas, team: Any, gpus: int, node: Node, name: str, **fields: Any) -> Any:
    return f.make_job(
        team,
        personas.instance_type,
        gpus,
        name=name,
        state="running",
        nodes=[[node.name, gpus]],
        started_at=timezone.now() - timedelta(minutes=5),
        **fields,
    )


@pytest.fixture
def busy(personas: Personas) -> Personas:
    """24 ready GPUs (three nodes of 8), quotas 8 + 8: 8 GPUs unallocated. team-a runs 20
    (8 within quota, 12 borrowed: 8 from unallocated capacity, 4 from team-b's unused quota);
    team-b runs 2 and waits for 4 since ten minutes ago."""
    personas.nodes += f.make_nodes(personas.instance_type, 1)
    n1, n2, n3 = personas.nodes
    running(personas, personas.team, 8, n1, "a-one")
    running(personas, personas.team, 8, n2, "a-two")
    running(personas, personas.team, 4, n3, "a-three")
    running(personas, personas.other_team, 2, n3, "secret-b-job")
    f.make_job(
        personas.other_team,
        personas.instance_type,
        4,
        name="secret-b-waits",
        submitted_at=timezone.now() - timedelta(minutes=10),
    )
    return personas


# --- Numbers --------------------------------------------------------------------------------------
def test_use_beside_quota_on_a_known_fixture(busy):
    (row,) = cluster_now(timezone.now())
    teams = {t.team: t.usage for t in row.teams}
    a, b = teams["team-a"], teams["team-b"]
    assert (a.quota, a.used_within_quota, a.borrowed, a.lent, a.idle_quota) == (8, 8, 12, 0, 0)
    assert (b.quota, b.used_within_quota, b.borrowed, b.lent, b.idle_quota) == (8, 2, 0, 4, 2)
    assert (b.pending_gpus, a.pending_gpus) == (4, 0)
    assert (row.usage.capacity, row.usage.allocated, row.usage.idle) == (24, 22, 2)
    assert (row.borrowed, row.borrowed_from_unallocated, row.borrowed_from_quota) == (12, 8, 4)
    assert [t.team for t in row.lenders] == ["team-b"]
    waited = timezone.now() - row.oldest_pending
    assert timedelta(minutes=9) < waited < timedelta(minutes=11)
    assert {t.team: t.oldest_pending is not None for t in row.teams} == {"team-a": False, "team-b": True}


def test_capacity_page_shows_use_borrowing_sources_and_waits(busy):
    html = signed_in(busy.cluster_admin).get("/").content.decode()
    assert 'data-live-url="/console/live/"' in html  # polled by static/js/live.js
    fragment = signed_in(busy.cluster_admin).get(reverse("allocations:capacity_live")).content.decode()
    for page in (html, fragment):
        assert "22 of 24 ready GPUs" in page
        assert "12 GPUs: 4 lent from teams' quota, 8 from unallocated capacity" in page
        assert "4 GPUs in 1 job, oldest waiting 10" in page
        assert "50% = 4 GPUs" in page  # borrow cap beside the use
    assert "<html" not in fragment


def test_over_committed_types_stay_marked_on_the_live_page(busy):
    services.node_update(actor=None, node=busy.nodes[0], state=NodeState.DOWN, reason="PSU")
    services.node_update(actor=None, node=busy.nodes[1], state=NodeState.DOWN, reason="PSU")
    fragment = signed_in(busy.cluster_admin).get(reverse("allocations:capacity_live")).content.decode()
    assert "over-committed" in fragment
    assert "Quotas of ml.p5.48xlarge add up to 16 GPUs, more than its 8 ready GPUs." in fragment


# --- Nodes ----------------------------------------------------------------------------------------
def test_nodes_page_shows_each_nodes_use_by_job_and_team(busy):
    html = signed_in(busy.cluster_admin).get(reverse("allocations:nodes")).content.decode()
    n3 = busy.nodes[2]
    assert f'href="/console/nodes/{n3.pk}/"' in html
    assert "6 / 8" in html  # a-three (4) and secret-b-job (2)
    assert "a-three</a> (team-a, 4)" in html and "secret-b-job</a> (team-b, 2)" in html


def test_node_page_lists_its_jobs_and_its_history_of_states(busy):
    n3 = busy.nodes[2]
    admin = signed_in(busy.cluster_admin)
    admin.post(reverse("allocations:node_state", kwargs={"pk": n3.pk}), {"state": "draining", "reason": "fw"})
    admin.post(reverse("allocations:node_state", kwargs={"pk": n3.pk}), {"state": "ready", "reason": ""})
    response = admin.get(reverse("allocations:node_detail", kwargs={"pk": n3.pk}))
    assert [job.name for job in response.context["jobs"]] == ["a-three", "secret-b-job"]
    history = [(c.old_state, c.state, c.reason, c.actor_name) for c in response.context["history"]]
    assert history == [("draining", "ready", "", "admin"), ("ready", "draining", "fw", "admin")]
    html = response.content.decode()
    assert "6 of 8" in html and f'href="/console/nodes/{n3.pk}/edit/"' in html


def test_a_node_added_by_an_administrator_starts_its_history(personas):
    node = services.node_create(
        actor=personas.cluster_admin, name="fresh", instance_type=personas.instance_type
    )
    change = NodeStateChange.objects.get(node=node)
    assert (change.old_state, change.state, change.source, change.actor_name) == (
        "",
        "ready",
        "admin",
        "admin",
    )


class ReportingCluster:
    """What an external cluster reports (only ``list_nodes`` is read by the node sync)."""

    def __init__(self, nodes: list[BackendNode]) -> None:
        self.nodes = nodes

    def list_nodes(self) -> list[BackendNode]:
        return self.nodes


def test_the_loops_node_sync_records_state_changes_the_cluster_reports(personas):
    now = timezone.now()
    n1, n2 = personas.nodes
    reported = [
        BackendNode(n1.name, personas.instance_type.name, 8, NodeState.DOWN, "Not responding"),
        BackendNode(n2.name, personas.instance_type.name, 8, NodeState.READY),
        BackendNode("new-node", personas.instance_type.name, 8, NodeState.READY),
    ]
    _sync_nodes(ReportingCluster(reported), now, _Changes())  # type: ignore[arg-type]
    rows = {(c.node.name, c.old_state, c.state, c.reason, c.source) for c in NodeStateChange.objects.all()}
    assert rows == {
        (n1.name, "ready", "down", "Not responding", "cluster"),
        ("new-node", "", "ready", "", "cluster"),
    }


def test_the_simulated_clusters_failures_are_in_the_history(personas):
    Cluster.objects.filter(pk=1).update(backend_settings={"node_failure_rate": 60, "seed": 3})
    run_allocation_cycle(trigger="test")
    changes = NodeStateChange.objects.filter(old_state="ready", state="down", source="cluster")
    assert changes.count() == 2


# --- Free capacity for members --------------------------------------------------------------------
def test_who_may_see_free_capacity(personas):
    for persona in ("cluster_admin", "team_admin", "member", "viewer", "other_member"):
        assert access.can_see_free_capacity(getattr(personas, persona)), persona
    assert not access.can_see_free_capacity(personas.outsider)


def test_free_capacity_counts_free_gpus_and_how_they_lie_on_nodes(busy):
    (row,) = free_capacity()
    assert (row.ready_gpus, row.used_gpus, row.free_gpus, row.pending_gpus) == (24, 22, 2, 4)
    assert (row.largest_free_on_a_node, row.free_nodes, row.nodes_ready) == (2, 0, 3)


@pytest.mark.parametrize("url", ["/my-teams/", "/teams/team-a/submit/"])
def test_a_member_sees_free_capacity_and_no_other_teams_jobs(busy, url):
    html = signed_in(busy.member).get(url).content.decode()
    assert 'id="free-capacity"' in html
    assert '<td class="num free">2</td>' in html
    for secret in ("secret-b-job", "secret-b-waits", "team-b", "Team B"):
        assert secret not in html, secret


def test_a_user_in_no_team_sees_no_capacity(busy):
    html = signed_in(busy.outsider).get("/my-teams/").content.decode()
    assert 'id="free-capacity"' not in html


@pytest.mark.parametrize("persona", ["member", "team_admin", "viewer", "other_member", "outsider"])
def test_members_get_403_on_the_live_console_pages_and_see_no_job_names(busy, persona):
    client = signed_in(getattr(busy, persona))
    for url in (
        "/",
        reverse("allocations:capacity_live"),
        reverse("allocations:nodes"),
        reverse("allocations:node_detail", kwargs={"pk": busy.nodes[2].pk}),
    ):
        response = client.get(url, follow=True)
        assert response.status_code in (403, 200), url  # "/" sends non-staff to their teams
        assert "secret-b-job" not in response.content.decode(), url
        if url != "/":
            assert response.status_code == 403, url


# --- Bounded queries ------------------------------------------------------------------------------
def grow(personas: Personas, n: int) -> None:
    """``n`` more teams, each with a quota, a member, a node with a running job and a pending job."""
    other_type = f.make_instance_type("ml.g5.12xlarge", 4)
    for i in range(n):
        team = f.make_team(f"grown-{n}-{i}", {personas.instance_type: 1, other_type: 2})
        f.make_member(f.make_user(f"user-{n}-{i}"), team)
        (node,) = f.make_nodes(other_type, 1)
        f.make_job(team, other_type, 2, state="running", nodes=[[node.name, 2]], started_at=timezone.now())
        f.make_job(team, other_type, 4)
        NodeStateChange.objects.create(node=node, at=timezone.now(), state="ready", source="cluster")


def test_the_live_pages_run_as_many_queries_at_two_sizes(busy, django_assert_num_queries):
    admin, member = signed_in(busy.cluster_admin), signed_in(busy.member)
    pages = [
        (admin, "/"),
        (admin, reverse("allocations:capacity_live")),
        (admin, reverse("allocations:nodes")),
        (admin, reverse("allocations:node_detail", kwargs={"pk": busy.nodes[2].pk})),
        (member, "/my-teams/"),
        (member, "/teams/team-a/submit/"),
    ]

    def counts() -> list[int]:
        found = []
        for client, url in pages:
            with CaptureQueriesContext(connection) as captured:
                assert client.get(url).status_code == 200, url
            found.append(len(captured.captured_queries))
        return found

    grow(busy, 2)
    small = counts()
    grow(busy, 15)
    for (client, url), expected in zip(pages, small, strict=True):
        with django_assert_num_queries(expected):
            assert client.get(url).status_code == 200, url
    assert node_jobs() and len(small) == len(pages)
