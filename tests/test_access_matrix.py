"""Who gets what: every team page and API endpoint x every persona, with the expected status.

Personas (tests/conftest.py): the cluster admin (staff), team-a's team admin, member and viewer,
a member of team-b, a user in no team, and an anonymous visitor. "Not yours" and "missing" both
answer 404; a visible object that the role may not change answers 403; anonymous visitors are
sent to the login page (pages) or get 401 (API). A refused request changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from allocations.choices import JobState
from allocations.models import ClusterPolicy, Job, Membership, Node, PriorityClass, Team, TeamQuota
from tests import factories as f

PERSONAS = ("cluster_admin", "team_admin", "member", "viewer", "other_member", "outsider", "anonymous")
LOGIN = "login"  # a page's answer to an anonymous visitor: 302 to the login page


@dataclass
class Objects:
    member_job: Job  # pending, team-a, submitted by the member
    admin_job: Job  # pending, team-a, submitted by the team admin (not the member's own)
    finished_job: Job  # finished, team-a, submitted by the member
    viewer_membership: Membership
    quota: TeamQuota  # team-a's quota of ml.p5.48xlarge


@pytest.fixture
def objects(personas) -> Objects:
    it = personas.instance_type
    return Objects(
        member_job=f.make_job(personas.team, it, 1, submitter=personas.member, command="x"),
        admin_job=f.make_job(personas.team, it, 1, submitter=personas.team_admin, command="x"),
        finished_job=f.make_job(
            personas.team, it, 1, submitter=personas.member, command="x", state=JobState.FINISHED
        ),
        viewer_membership=Membership.objects.get(user=personas.viewer),
        quota=TeamQuota.objects.get(team=personas.team),
    )


JOB_FORM = {
    "name": "t",
    "instance_type": "ml.p5.48xlarge",
    "gpus": "1",
    "priority_class": "training",
    "command": "x",
}
JOB_BODY = {**JOB_FORM, "team": "team-a", "gpus": 1}

Url = Callable[[Objects], str]


@dataclass
class Case:
    name: str
    method: str
    url: Url
    expected: tuple[Any, ...]  # one per PERSONAS entry
    data: dict[str, Any] | None = None
    api: bool = False


def row(name, method, url, expected, data=None, api=False):
    statuses = tuple(int(x) if x.isdigit() else x for x in expected.split())
    assert len(statuses) == len(PERSONAS), name
    return Case(name, method, url, statuses, data, api)


CASES = [
    # --- pages -------------------------------------------------------------------------------
    row("my teams", "get", lambda o: "/my-teams/", "200 200 200 200 200 200 login"),
    row("queue", "get", lambda o: "/teams/team-a/", "200 200 200 200 404 404 login"),
    row("queue fragment", "get", lambda o: "/teams/team-a/live/", "200 200 200 200 404 404 login"),
    row("missing team", "get", lambda o: "/teams/team-zz/", "404 404 404 404 404 404 login"),
    row("submit form", "get", lambda o: "/teams/team-a/submit/", "200 200 200 403 404 404 login"),
    row("submit", "post", lambda o: "/teams/team-a/submit/", "302 302 302 403 404 404 login", JOB_FORM),
    row("members", "get", lambda o: "/teams/team-a/members/", "200 200 200 200 404 404 login"),
    row(
        "add member",
        "post",
        lambda o: "/teams/team-a/members/",
        "302 302 403 403 404 404 login",
        {"username": "nobody", "role": "viewer"},
    ),
    row(
        "set role",
        "post",
        lambda o: f"/teams/team-a/members/{o.viewer_membership.pk}/role/",
        "302 302 403 403 404 404 login",
        {"role": "member"},
    ),
    row(
        "remove member",
        "post",
        lambda o: f"/teams/team-a/members/{o.viewer_membership.pk}/remove/",
        "302 302 403 403 404 404 login",
    ),
    row("job page", "get", lambda o: f"/jobs/{o.member_job.pk}/", "200 200 200 200 404 404 login"),
    row("job fragment", "get", lambda o: f"/jobs/{o.member_job.pk}/live/", "200 200 200 200 404 404 login"),
    row("missing job", "get", lambda o: "/jobs/999999/", "404 404 404 404 404 404 login"),
    row(
        "cancel own job",
        "post",
        lambda o: f"/jobs/{o.member_job.pk}/cancel/",
        "302 302 302 403 404 404 login",
        {"confirm": "yes"},
    ),
    row(
        "cancel another's job",
        "post",
        lambda o: f"/jobs/{o.admin_job.pk}/cancel/",
        "302 302 403 403 404 404 login",
        {"confirm": "yes"},
    ),
    row(
        "resubmit",
        "post",
        lambda o: f"/jobs/{o.finished_job.pk}/resubmit/",
        "302 302 302 403 404 404 login",
    ),
    # --- API ---------------------------------------------------------------------------------
    row("api teams", "get", lambda o: "/api/v1/teams/", "200 200 200 200 200 200 401", api=True),
    row("api team", "get", lambda o: "/api/v1/teams/team-a/", "200 200 200 200 404 404 401", api=True),
    row("api quotas", "get", lambda o: "/api/v1/quotas/", "200 200 200 200 200 200 401", api=True),
    row(
        "api instance types",
        "get",
        lambda o: "/api/v1/instance-types/",
        "200 200 200 200 200 403 401",
        api=True,
    ),
    row("api nodes", "get", lambda o: "/api/v1/nodes/", "200 200 200 200 200 403 401", api=True),
    row(
        "api priority classes",
        "get",
        lambda o: "/api/v1/priority-classes/",
        "200 200 200 200 200 403 401",
        api=True,
    ),
    row("api policy", "get", lambda o: "/api/v1/policy/", "200 200 200 200 200 403 401", api=True),
    row("api jobs", "get", lambda o: "/api/v1/jobs/", "200 200 200 200 200 200 401", api=True),
    row(
        "api job",
        "get",
        lambda o: f"/api/v1/jobs/{o.member_job.pk}/",
        "200 200 200 200 404 404 401",
        api=True,
    ),
    row("api missing job", "get", lambda o: "/api/v1/jobs/999999/", "404 404 404 404 404 404 401", api=True),
    # Submitting names the team in the body: a team you cannot see is an unknown value (400),
    # exactly as a team that does not exist.
    row("api submit", "post", lambda o: "/api/v1/jobs/", "201 201 201 403 400 400 401", JOB_BODY, api=True),
    row(
        "api cancel own job",
        "post",
        lambda o: f"/api/v1/jobs/{o.member_job.pk}/cancel/",
        "200 200 200 403 404 404 401",
        api=True,
    ),
    row(
        "api cancel another's job",
        "post",
        lambda o: f"/api/v1/jobs/{o.admin_job.pk}/cancel/",
        "200 200 403 403 404 404 401",
        api=True,
    ),
    row(
        "api resubmit",
        "post",
        lambda o: f"/api/v1/jobs/{o.finished_job.pk}/resubmit/",
        "201 201 201 403 404 404 401",
        api=True,
    ),
    row(
        "api job events",
        "get",
        lambda o: f"/api/v1/jobs/{o.member_job.pk}/events/",
        "200 200 200 200 404 404 401",
        api=True,
    ),
    row("api event list", "get", lambda o: "/api/v1/job-events/", "200 200 200 200 200 200 401", api=True),
    row(
        "api pending reasons",
        "get",
        lambda o: "/api/v1/pending-reasons/",
        "200 200 200 200 200 200 401",
        api=True,
    ),
    row("api usage", "get", lambda o: "/api/v1/usage/", "200 200 200 200 200 200 401", api=True),
    # Cluster admins change the cluster; a visible object gives 403 to others, an invisible 404.
    row(
        "api add node",
        "post",
        lambda o: "/api/v1/nodes/",
        "201 403 403 403 403 403 401",
        {"name": "p5-extra", "instance_type": "ml.p5.48xlarge"},
        api=True,
    ),
    row(
        "api change class",
        "patch",
        lambda o: "/api/v1/priority-classes/training/",
        "200 403 403 403 403 403 401",
        {"weight": 99},
        api=True,
    ),
    row(
        "api delete class",
        "delete",
        lambda o: "/api/v1/priority-classes/experimentation/",
        "204 403 403 403 403 403 401",
        api=True,
    ),
    row(
        "api change policy",
        "patch",
        lambda o: "/api/v1/policy/",
        "200 403 403 403 403 403 401",
        {"queueing": "strict-fifo"},
        api=True,
    ),
    row(
        "api change team",
        "patch",
        lambda o: "/api/v1/teams/team-a/",
        "200 403 403 403 404 404 401",
        {"fair_share_weight": 5},
        api=True,
    ),
    row(
        "api change quota",
        "patch",
        lambda o: f"/api/v1/quotas/{o.quota.pk}/",
        "200 403 403 403 404 404 401",
        {"quota": 4},
        api=True,
    ),
    row("api memberships", "get", lambda o: "/api/v1/memberships/", "200 200 200 200 200 200 401", api=True),
    row(
        "api add member",
        "post",
        lambda o: "/api/v1/memberships/",
        "201 201 403 403 400 400 401",
        {"team": "team-a", "username": "nobody", "role": "viewer"},
        api=True,
    ),
    row(
        "api change role",
        "patch",
        lambda o: f"/api/v1/memberships/{o.viewer_membership.pk}/",
        "200 200 403 403 404 404 401",
        {"role": "member"},
        api=True,
    ),
    row(
        "api remove member",
        "delete",
        lambda o: f"/api/v1/memberships/{o.viewer_membership.pk}/",
        "204 204 403 403 404 404 401",
        api=True,
    ),
    row("api schema", "get", lambda o: "/api/schema/", "200 200 200 200 200 200 200", api=True),
    row("api docs", "get", lambda o: "/api/docs/", "200 200 200 200 200 200 200", api=True),
]


def _state() -> tuple[Any, ...]:
    """Everything a refused request must leave alone."""
    return (
        sorted(Job.objects.values_list("pk", "state")),
        sorted(Membership.objects.values_list("pk", "user_id", "role")),
        sorted(Node.objects.values_list("name", "state")),
        sorted(PriorityClass.objects.values_list("name", "weight")),
        sorted(Team.objects.values_list("name", "fair_share_weight", "active")),
        sorted(TeamQuota.objects.values_list("pk", "quota")),
        sorted(ClusterPolicy.objects.values_list("pk", "queueing")),
    )


@pytest.mark.parametrize(
    ("case", "persona", "expected"),
    [
        pytest.param(case, persona, case.expected[i], id=f"{case.name}-{persona}")
        for case in CASES
        for i, persona in enumerate(PERSONAS)
    ],
)
def test_access(personas, objects, case, persona, expected):
    client: Any = APIClient() if case.api else Client()
    if persona != "anonymous":
        client.force_login(getattr(personas, persona))
    url = case.url(objects)
    before = _state()
    if case.method == "get":
        response = client.get(url)
    else:
        send = getattr(client, case.method)
        response = send(url, case.data or {}, **({"format": "json"} if case.api else {}))
    if expected == LOGIN:
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")
    else:
        assert response.status_code == expected, response.content[:300]
    if case.method != "get" and (expected == LOGIN or expected >= 400):
        assert _state() == before, "a refused request changed something"
    if case.method != "get" and expected in (200, 201, 204, 302):
        assert _state() != before, "an accepted request changed nothing"


def test_another_teams_job_answers_exactly_like_a_missing_one(personas, objects):
    client = APIClient()
    client.force_authenticate(personas.other_member)
    theirs = client.get(f"/api/v1/jobs/{objects.member_job.pk}/")
    missing = client.get("/api/v1/jobs/999999/")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
