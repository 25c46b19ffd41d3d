"""The jobs API: submit with field errors that name the field and the value, list filters,
cancel/resubmit, events, token auth, and query counts that do not grow with the jobs."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.choices import JobEventKind, JobState
from allocations.models import ApiToken, Job, JobEvent
from tests import factories as f
from tests.conftest import PASSWORD
from tests.races import race_behind_a_lock

JOBS = "/api/v1/jobs/"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def body(**overrides):
    data = {
        "team": "team-a",
        "name": "train",
        "instance_type": "ml.p5.48xlarge",
        "gpus": 4,
        "command": "python train.py",
    }
    data.update(overrides)
    return data


def test_submit_creates_a_pending_job_with_the_lowest_class_by_default(personas):
    response = client_for(personas.member).post(JOBS, body(requested_duration=600), format="json")
    assert response.status_code == 201, response.content
    data = response.json()
    assert (data["team"], data["gpus"], data["state"], data["priority_class"], data["submitter"]) == (
        "team-a",
        4,
        "pending",
        "experimentation",
        "bob",
    )
    job = Job.objects.get(pk=data["id"])
    assert job.events.get().kind == JobEventKind.SUBMITTED


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"gpus": -2}, "gpus", ["-2"]),
        ({"gpus": 0}, "gpus", ["0"]),
        ({"gpus": "many"}, "gpus", ["many"]),
        ({"instance_type": "ml.nope.1"}, "instance_type", ["ml.nope.1"]),
        ({"priority_class": "urgent"}, "priority_class", ["urgent"]),
        ({"gpus": 12}, "gpus", ["8 GPUs per node", "12"]),
        ({"gpus": 24}, "gpus", ["team-a", "12"]),
        ({"requested_duration": -5}, "requested_duration", ["-5"]),
        ({"requested_duration": "1h"}, "requested_duration", ["1h"]),
        ({"requested_duration": 10**9}, "requested_duration", [str(10**9)]),
        ({"team": "team-zz"}, "team", ["team-zz"]),
        ({"name": ""}, "name", []),
        ({"command": "", "image": ""}, "command", []),
    ],
)
def test_bad_input_answers_400_naming_the_field_and_the_value(personas, overrides, field, words):
    response = client_for(personas.member).post(JOBS, body(**overrides), format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    text = " ".join(str(message) for message in errors[field])
    for word in words:
        assert word in text, (word, text)
    assert not Job.objects.exists()


def test_every_invalid_field_is_reported_at_once(personas):
    response = client_for(personas.member).post(
        JOBS, body(gpus=-1, instance_type="x", priority_class="y", requested_duration=0), format="json"
    )
    assert response.status_code == 400
    assert {"gpus", "instance_type", "priority_class", "requested_duration"} <= set(response.json())


def test_a_malformed_body_answers_400_not_500(personas):
    client = client_for(personas.member)
    response = client.post(JOBS, data="{not json", content_type="application/json")
    assert response.status_code == 400
    response = client.post(JOBS, data=[1, 2], format="json")
    assert response.status_code == 400


def test_list_shows_only_the_jobs_of_visible_teams(personas):
    mine = f.make_job(personas.team, personas.instance_type, 1)
    theirs = f.make_job(personas.other_team, personas.instance_type, 1)
    ids = {row["id"] for row in client_for(personas.member).get(JOBS).json()["results"]}
    assert ids == {mine.pk}
    ids = {row["id"] for row in client_for(personas.cluster_admin).get(JOBS).json()["results"]}
    assert ids == {mine.pk, theirs.pk}


def test_list_filters(personas):
    now = timezone.now()
    old = f.make_job(
        personas.team,
        personas.instance_type,
        1,
        submitted_at=now - timedelta(days=2),
        priority_class=personas.priority_classes["training"],
    )
    running = f.make_job(personas.team, personas.instance_type, 2, state=JobState.RUNNING)
    other_type = f.make_instance_type("ml.g5.xlarge", 1)
    small = f.make_job(personas.team, other_type, 1)
    client = client_for(personas.team_admin)

    def ids(query: str) -> set[int]:
        response = client.get(JOBS + query)
        assert response.status_code == 200, response.content
        return {row["id"] for row in response.json()["results"]}

    assert ids("?team=team-a") == {old.pk, running.pk, small.pk}
    assert ids("?team=team-b") == set()
    assert ids("?state=running") == {running.pk}
    assert ids("?state=running&state=pending") == {old.pk, running.pk, small.pk}
    assert ids("?instance_type=ml.g5.xlarge") == {small.pk}
    assert ids("?priority_class=training") == {old.pk}
    after = (now - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"?submitted_after={after}") == {running.pk, small.pk}
    assert ids(f"?submitted_before={after}") == {old.pk}


@pytest.mark.parametrize(
    ("query", "field"), [("?state=bogus", "state"), ("?submitted_after=yesterday", "submitted_after")]
)
def test_bad_filters_answer_400_naming_the_filter(personas, query, field):
    response = client_for(personas.member).get(JOBS + query)
    assert response.status_code == 400
    assert field in response.json()


def test_cancel_then_resubmit(personas):
    client = client_for(personas.member)
    job_id = client.post(JOBS, body(), format="json").json()["id"]
    response = client.post(f"{JOBS}{job_id}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    response = client.post(f"{JOBS}{job_id}/cancel/")
    assert response.status_code == 400 and "state" in response.json()
    response = client.post(f"{JOBS}{job_id}/resubmit/")
    assert response.status_code == 201
    assert response.json()["id"] != job_id and response.json()["state"] == "pending"
    kinds = [e["kind"] for e in client.get(f"{JOBS}{job_id}/events/").json()]
    assert kinds == ["submitted", "cancelled"]


def test_a_member_cannot_cancel_another_members_job_of_the_team(personas):
    job = f.make_job(personas.team, personas.instance_type, 1, submitter=personas.team_admin)
    response = client_for(personas.member).post(f"{JOBS}{job.pk}/cancel/")
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_pending_reasons_list_the_engines_words(personas):
    job = f.make_job(
        personas.team,
        personas.instance_type,
        4,
        pending_reason_code="borrow-limit",
        pending_reason_message="team-a uses 12 of its 12 GPU limit; 4 more needed",
    )
    f.make_job(personas.other_team, personas.instance_type, 4, pending_reason_code="fragmented")
    rows = client_for(personas.member).get("/api/v1/pending-reasons/").json()["results"]
    assert rows == [
        {
            "job": job.pk,
            "name": job.name,
            "team": "team-a",
            "instance_type": "ml.p5.48xlarge",
            "gpus": 4,
            "code": "borrow-limit",
            "message": "team-a uses 12 of its 12 GPU limit; 4 more needed",
        }
    ]
    assert client_for(personas.member).get("/api/v1/pending-reasons/?code=nonsense").status_code == 400


def test_usage_per_team_and_instance_type(personas):
    f.make_job(personas.team, personas.instance_type, 10, state=JobState.RUNNING, nodes=[["a", 8], ["b", 2]])
    rows = client_for(personas.member).get("/api/v1/usage/").json()
    assert len(rows) == 1
    row = rows[0]
    assert (row["team"], row["quota"], row["used"], row["borrowed"]) == ("team-a", 8, 10, 2)
    other = client_for(personas.other_member).get("/api/v1/usage/").json()
    assert [(r["team"], r["used"], r["lent"]) for r in other] == [("team-b", 0, 2.0)]
    assert client_for(personas.member).get("/api/v1/usage/?instance_type=nope").status_code == 400


def test_token_auth(personas):
    client = APIClient()
    response = client.post("/api/v1/auth/token/", {"username": "bob", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    stored = ApiToken.objects.get(user=personas.member)
    assert stored.key_hash == hashlib.sha256(token.encode()).hexdigest()  # the key itself is not kept
    assert token not in (stored.key_hash, stored.prefix)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/teams/").json()["results"][0]["name"] == "team-a"
    client.credentials(HTTP_AUTHORIZATION="Token wrong")
    assert client.get("/api/v1/teams/").status_code == 401


def test_anonymous_requests_answer_401(personas):
    response = APIClient().get(JOBS)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


def _make_jobs(personas, count: int) -> None:
    now = timezone.now()
    jobs = Job.objects.bulk_create(
        Job(
            team=personas.team if i % 2 else personas.other_team,
            submitter=personas.member,
            instance_type=personas.instance_type,
            gpus=1,
            name=f"bulk-{i}",
            priority_class=personas.priority_classes["training"],
            submitted_at=now - timedelta(seconds=i),
            state=JobState.PENDING,
        )
        for i in range(count)
    )
    JobEvent.objects.bulk_create(JobEvent(job=job, kind=JobEventKind.SUBMITTED, at=now) for job in jobs)


@pytest.mark.parametrize(
    "url", [JOBS, JOBS + "?state=pending&team=team-a", "/api/v1/pending-reasons/", "/api/v1/job-events/"]
)
def test_list_query_count_does_not_grow_with_the_jobs(personas, url):
    counts = []
    for total in (10, 1000):
        Job.objects.all().delete()
        _make_jobs(personas, total)
        # A fresh user object, as each real request loads: roles are cached per request.
        client = client_for(type(personas.member).objects.get(pk=personas.member.pk))
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


@pytest.mark.parametrize(
    "changes",
    [
        {"gpus": [8]},
        {"gpus": 2**70},
        {"gpus": 1.5},
        {"gpus": None},
        {"team": {"name": "team-a"}},
        {"name": "x" * 500},
        {"instance_type": None},
        {"priority_class": ["training"]},
        {"requested_duration": 1.5},
        {"requested_duration": 2**70},
        {"command": {"run": "x"}},
        {"image": "i" * 1000},
    ],
)
def test_odd_values_answer_400_never_500(personas, changes):
    response = client_for(personas.member).post(JOBS, body(**changes), format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()) & set(changes), response.json()
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "url",
    [JOBS + "abc/", JOBS + "?page=abc", JOBS + "?submitted_before=2026-13-45", "/api/v1/nodes/no-such-node/"],
)
def test_odd_urls_answer_4xx_never_500(personas, url):
    response = client_for(personas.member).get(url)
    assert 400 <= response.status_code < 500


# --- Resubmit with an Idempotency-Key -----------------------------------------------------------
def _ended_job(personas) -> Job:
    return f.make_job(
        personas.team,
        personas.instance_type,
        2,
        state=JobState.FAILED,
        command="x",
        submitter=personas.member,
    )


def test_a_resubmit_repeated_with_its_idempotency_key_answers_200_with_the_first_job(personas):
    job = _ended_job(personas)
    client = client_for(personas.member)
    first = client.post(f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="retry-me")
    again = client.post(f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="retry-me")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    other = client.post(f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="another")
    unkeyed = client.post(f"{JOBS}{job.pk}/resubmit/")
    assert (other.status_code, unkeyed.status_code) == (201, 201)
    assert len({first.json()["id"], other.json()["id"], unkeyed.json()["id"]}) == 3
    # The key belongs to its user: a team admin's request with it is a resubmit of their own.
    admin = client_for(personas.team_admin).post(f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="retry-me")
    assert admin.status_code == 201 and admin.json()["id"] != first.json()["id"]


def test_a_bad_idempotency_key_answers_400_naming_the_header(personas):
    job = _ended_job(personas)
    response = client_for(personas.member).post(f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="x" * 300)
    assert response.status_code == 400 and "Idempotency-Key" in response.json()
    assert not Job.objects.filter(state=JobState.PENDING).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_resubmits_with_one_key_make_one_job(personas):
    """Ten requests with one key, each past its check for an earlier job before any inserts:
    the Job table is locked against writes until all ten wait on it, then released. The unique
    constraint lets one insert win; the nine others answer 200 with its job."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent inserts need PostgreSQL (SQLite lets one writer in at a time)")
    job = _ended_job(personas)
    answers: list[tuple[int, int]] = []

    def resubmit() -> None:
        response = client_for(personas.member).post(
            f"{JOBS}{job.pk}/resubmit/", HTTP_IDEMPOTENCY_KEY="double-click"
        )
        answers.append((response.status_code, response.json()["id"]))

    assert race_behind_a_lock(Job._meta.db_table, [resubmit] * 10), (
        "the ten requests did not all reach their insert"
    )
    assert sorted(status for status, _ in answers) == [200] * 9 + [201], answers
    assert len({pk for _, pk in answers}) == 1
    assert Job.objects.filter(state=JobState.PENDING).count() == 1
