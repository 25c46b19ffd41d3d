"""Object-level attempts across teams: a member of team-a guesses team-b's ids and names in
every job, membership, quota and team URL of the pages and the API, and abuses the list
filters (``?team=team-b``). Each attempt answers 404 (like a missing object, so that ids
cannot be probed) and changes nothing; no list returns a row of team-b."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from allocations.choices import JobEventKind, JobState, Role
from allocations.models import AuditEntry, Job, JobEvent, Membership, TeamQuota
from tests import factories as f


@pytest.fixture
def theirs(personas):
    """team-b's objects, and a member of team-a who tries to reach them."""
    it = personas.instance_type
    job = f.make_job(personas.other_team, it, 1, submitter=personas.other_member, command="secret-b")
    running = f.make_job(
        personas.other_team,
        it,
        2,
        submitter=personas.other_member,
        state=JobState.RUNNING,
        nodes=[[personas.nodes[0].name, 2]],
    )
    finished = f.make_job(
        personas.other_team, it, 1, submitter=personas.other_member, state=JobState.FINISHED
    )
    JobEvent.objects.create(job=job, kind=JobEventKind.SUBMITTED, at=job.submitted_at, message="b event")
    return {
        "job": job,
        "running": running,
        "finished": finished,
        "event": JobEvent.objects.get(job=job),
        "membership": Membership.objects.get(user=personas.other_member),
        "quota": TeamQuota.objects.get(team=personas.other_team),
    }


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def snapshot_of_team_b(personas) -> str:
    """Everything of team-b that an attempt could change, to compare before and after."""
    team = personas.other_team
    return json.dumps(
        {
            "jobs": list(Job.objects.filter(team=team).order_by("pk").values("pk", "state", "gpus", "name")),
            "members": list(Membership.objects.filter(team=team).order_by("pk").values("pk", "role")),
            "quotas": list(TeamQuota.objects.filter(team=team).values("pk", "quota", "lend_limit")),
            "team": [team.name, team.fair_share_weight, team.active],
        },
        default=str,
    )


PAGE_ATTEMPTS = [
    ("get", "/jobs/{job}/"),
    ("get", "/jobs/{job}/live/"),
    ("post", "/jobs/{job}/cancel/"),
    ("post", "/jobs/{running}/cancel/"),
    ("post", "/jobs/{finished}/resubmit/"),
    ("get", "/teams/team-b/"),
    ("get", "/teams/team-b/live/"),
    ("get", "/teams/team-b/submit/"),
    ("post", "/teams/team-b/submit/"),
    ("get", "/teams/team-b/members/"),
    ("post", "/teams/team-b/members/{membership}/role/"),
    ("post", "/teams/team-b/members/{membership}/remove/"),
    # Their membership id under our own team's URL: the pair must match, not only the id.
    ("post", "/teams/team-a/members/{membership}/role/"),
    ("post", "/teams/team-a/members/{membership}/remove/"),
    ("get", "/dashboards/teams/team-b/"),
    ("get", "/dashboards/teams/team-b/data.json"),
    ("get", "/dashboards/teams/team-b/usage.csv"),
    ("get", "/reports/2026-W01/teams/team-b/"),
]

API_ATTEMPTS = [
    ("get", "/api/v1/jobs/{job}/"),
    ("get", "/api/v1/jobs/{job}/events/"),
    ("post", "/api/v1/jobs/{job}/cancel/"),
    ("post", "/api/v1/jobs/{running}/cancel/"),
    ("post", "/api/v1/jobs/{finished}/resubmit/"),
    ("get", "/api/v1/job-events/{event}/"),
    ("get", "/api/v1/teams/team-b/"),
    ("patch", "/api/v1/teams/team-b/"),
    ("delete", "/api/v1/teams/team-b/"),
    ("get", "/api/v1/quotas/{quota}/"),
    ("patch", "/api/v1/quotas/{quota}/"),
    ("delete", "/api/v1/quotas/{quota}/"),
    ("get", "/api/v1/memberships/{membership}/"),
    ("patch", "/api/v1/memberships/{membership}/"),
    ("delete", "/api/v1/memberships/{membership}/"),
]

BODY = {
    "role": Role.TEAM_ADMIN,
    "name": "x",
    "instance_type": "ml.p5.48xlarge",
    "gpus": "1",
    "priority_class": "training",
    "command": "x",
    "quota": 0,
    "fair_share_weight": 100,
}


@pytest.mark.parametrize("persona", ["team_admin", "member", "viewer"])
@pytest.mark.parametrize(("method", "url"), PAGE_ATTEMPTS, ids=[f"{m} {u}" for m, u in PAGE_ATTEMPTS])
def test_pages_answer_404_for_another_teams_objects(personas, theirs, persona, method, url):
    before = snapshot_of_team_b(personas)
    audit_before = AuditEntry.objects.count()
    client = signed_in(getattr(personas, persona))
    path = url.format(**{k: v.pk for k, v in theirs.items()})
    response = getattr(client, method)(path, BODY) if method == "post" else client.get(path)
    assert response.status_code == 404, f"{method} {path} as {persona}: {response.status_code}"
    assert b"secret-b" not in response.content
    assert snapshot_of_team_b(personas) == before
    assert AuditEntry.objects.count() == audit_before


@pytest.mark.parametrize("persona", ["team_admin", "member", "viewer"])
@pytest.mark.parametrize(("method", "url"), API_ATTEMPTS, ids=[f"{m} {u}" for m, u in API_ATTEMPTS])
def test_api_answers_404_for_another_teams_objects(personas, theirs, persona, method, url):
    before = snapshot_of_team_b(personas)
    client = api_as(getattr(personas, persona))
    path = url.format(**{k: v.pk for k, v in theirs.items()})
    response = getattr(client, method)(path, BODY, format="json")
    assert response.status_code == 404, (
        f"{method} {path} as {persona}: {response.status_code} {response.content!r}"
    )
    assert b"secret-b" not in response.content
    assert snapshot_of_team_b(personas) == before


def test_guessing_ids_cannot_tell_theirs_from_missing(personas, theirs):
    """The answer for team-b's job and for an id that does not exist are the same."""
    client = api_as(personas.member)
    mine = client.get(f"/api/v1/jobs/{theirs['job'].pk}/")
    missing = client.get("/api/v1/jobs/999999/")
    assert (mine.status_code, mine.json()) == (missing.status_code, missing.json())
    page = signed_in(personas.member)
    assert page.get(f"/jobs/{theirs['job'].pk}/").status_code == page.get("/jobs/999999/").status_code == 404


def test_submitting_into_another_team_is_refused(personas, theirs):
    before = Job.objects.filter(team=personas.other_team).count()
    response = api_as(personas.member).post(
        "/api/v1/jobs/",
        {"team": "team-b", "name": "x", "instance_type": "ml.p5.48xlarge", "gpus": 1, "command": "x"},
        format="json",
    )
    assert response.status_code in (400, 404)
    assert "team" in response.json() or response.status_code == 404
    assert Job.objects.filter(team=personas.other_team).count() == before


def test_a_team_admin_cannot_add_themself_to_another_team(personas, theirs):
    response = api_as(personas.team_admin).post(
        "/api/v1/memberships/", {"team": "team-b", "user": "alice", "role": "team-admin"}, format="json"
    )
    assert response.status_code in (400, 403, 404)
    assert not Membership.objects.filter(team=personas.other_team, user=personas.team_admin).exists()


LISTS = [
    "/api/v1/jobs/",
    "/api/v1/job-events/",
    "/api/v1/quotas/",
    "/api/v1/memberships/",
    "/api/v1/pending-reasons/",
    "/api/v1/usage/",
    "/api/v1/teams/",
]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "query", ["?team=team-b", "?team=team-b&team=team-a", "?team__name=team-b", "?team=team-b%00"]
)
def test_filters_never_return_another_teams_rows(personas, theirs, url, query):
    response = api_as(personas.member).get(url + query)
    assert response.status_code in (200, 400)
    text = response.content.decode()
    assert "team-b" not in text or (response.status_code == 400 and '"team-b"' not in text)
    assert "secret-b" not in text
    assert "olga" not in text


def test_the_team_filter_does_return_their_own_rows(personas, theirs):
    """The filter works (the test above is not vacuous): team-b's member sees team-b's job."""
    response = api_as(personas.other_member).get("/api/v1/jobs/?team=team-b")
    assert [row["command"] for row in response.json()["results"]].count("secret-b") == 1


@pytest.mark.parametrize("url", ["/my-teams/", "/dashboards/", "/teams/team-a/", "/teams/team-a/live/"])
def test_pages_of_our_own_do_not_show_their_jobs(personas, theirs, url):
    response = signed_in(personas.member).get(url)
    assert response.status_code == 200
    assert b"secret-b" not in response.content


def test_the_event_filter_cannot_tell_their_job_from_a_missing_one(personas, theirs):
    """``?job=<id>`` answers the same for another team's job as for an id that does not exist,
    so the filter cannot be used to probe which job ids exist."""
    client = api_as(personas.member)
    theirs_answer = client.get(f"/api/v1/job-events/?job={theirs['job'].pk}")
    missing_answer = client.get("/api/v1/job-events/?job=999999")
    assert theirs_answer.status_code == missing_answer.status_code == 400
    assert theirs_answer.json() == {"job": [f"No job you can see has the id {theirs['job'].pk}."]}
    assert missing_answer.json() == {"job": ["No job you can see has the id 999999."]}
    # The filter still works on a job of one's own team.
    mine = f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member)
    JobEvent.objects.create(job=mine, kind=JobEventKind.SUBMITTED, at=mine.submitted_at, message="a event")
    rows = client.get(f"/api/v1/job-events/?job={mine.pk}").json()["results"]
    assert [row["message"] for row in rows] == ["a event"]


def test_the_usage_filter_cannot_tell_an_outsider_which_instance_types_exist(personas):
    """Someone with no team reads no cluster facts: a real instance type is as unknown to them
    as a made-up one."""
    client = api_as(personas.outsider)
    real = client.get("/api/v1/usage/?instance_type=ml.p5.48xlarge")
    made_up = client.get("/api/v1/usage/?instance_type=ml.p6.48xlarge")
    assert real.status_code == made_up.status_code == 400
    assert real.json() == {"instance_type": ["No instance type is called 'ml.p5.48xlarge'."]}
    assert made_up.json() == {"instance_type": ["No instance type is called 'ml.p6.48xlarge'."]}


def test_every_api_filter_that_names_a_row_offers_only_the_rows_the_user_sees():
    """The same cause elsewhere: a filter by a related row (``?job=<id>``) validates the value
    against its choices, and choices of every row would tell which ids exist. Each such filter
    of the API, declared or made by django-filter from ``Meta.fields``, reads its choices per
    request (a callable given the request), as ``job`` does."""
    import django_filters

    from allocations.api.urls import router

    checked = []
    for prefix, viewset, _ in router.registry:
        filterset = getattr(viewset, "filterset_class", None)
        if filterset is None:
            continue
        for name, field in filterset.base_filters.items():
            if isinstance(field, django_filters.ModelChoiceFilter | django_filters.ModelMultipleChoiceFilter):
                checked.append(f"{prefix}?{name}")
                assert callable(field.queryset), f"/api/v1/{prefix}/?{name}= offers every row as a choice"
    assert "job-events?job" in checked
