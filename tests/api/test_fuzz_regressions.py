"""Cases from the schemathesis run on PostgreSQL and from an outside probe: none may answer 500."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def admin_client(personas):
    client = APIClient()
    client.force_authenticate(personas.cluster_admin)
    return client


@pytest.fixture
def member_client(personas):
    client = APIClient()
    client.force_authenticate(personas.member)
    return client


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/nodes/", {"name": "n1", "instance_type": "\x00"}, "instance_type"),
        (
            "/api/v1/jobs/",
            {"team": "team-a", "name": "x", "instance_type": "\x00", "gpus": 1, "command": "true"},
            "instance_type",
        ),
        (
            "/api/v1/jobs/",
            {
                "team": "te\x00am",
                "name": "x",
                "instance_type": "ml.p5.48xlarge",
                "gpus": 1,
                "command": "true",
            },
            "team",
        ),
    ],
)
def test_a_name_with_a_nul_character_is_a_field_error(admin_client, path, body, field):
    response = admin_client.post(path, body, format="json")
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("path", ["/api/v1/job-events/", "/api/v1/jobs/"])
@pytest.mark.parametrize("param", ["after", "before", "submitted_after", "submitted_before"])
def test_a_time_filter_with_an_offset_postgresql_refuses_still_answers(member_client, path, param):
    # +17:47 is a valid offset for Python but out of range for PostgreSQL.
    response = member_client.get(path, {param: "0017-08-09T17:14:03.4+17:47"})
    assert response.status_code in (200, 400)


def test_a_time_whose_utc_falls_before_year_one_is_refused(member_client):
    response = member_client.get("/api/v1/job-events/", {"after": "0001-01-01T00:00:00+05:00"})
    assert response.status_code == 400
    assert "after" in response.json()


# A body nested 1,000 levels deep (2 KB) would make the JSON parser recurse past Python's limit;
# it is refused with 400, also before sign-in.
DEEP_ARRAYS = "[" * 1000 + "]" * 1000
DEEP_OBJECTS = '{"a": ' * 1000 + "1" + "}" * 1000


@pytest.mark.parametrize("body", [DEEP_ARRAYS, DEEP_OBJECTS], ids=["arrays", "objects"])
def test_deeply_nested_json_to_the_token_endpoint_is_a_400_before_sign_in(db, body):
    response = APIClient().post("/api/v1/auth/token/", body, content_type="application/json")
    assert response.status_code == 400
    assert "nested more than 64 levels deep" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/v1/jobs/"),
        ("post", "/api/v1/teams/"),
        ("patch", "/api/v1/policy/"),
        ("put", "/api/v1/teams/team-a/"),
    ],
)
@pytest.mark.parametrize("body", [DEEP_ARRAYS, DEEP_OBJECTS], ids=["arrays", "objects"])
def test_deeply_nested_json_to_an_endpoint_is_a_400(admin_client, method, path, body):
    response = getattr(admin_client, method)(path, body, content_type="application/json")
    assert response.status_code == 400
    assert "nested more than 64 levels deep" in response.json()["detail"]


def test_json_nested_as_deep_as_allowed_is_read(admin_client):
    """The bound refuses nesting, not brackets inside strings or a wide document."""
    body = json.dumps({"name": "[" * 500 + "{" * 500, "gpus": [[[[1]]]] * 500})
    response = admin_client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    errors = response.json()
    assert "gpus" in errors and "detail" not in errors


def test_a_number_too_long_for_python_is_a_400_naming_it(admin_client):
    body = '{"team": "team-a", "gpus": ' + "9" * 5001 + "}"
    response = admin_client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "a number of 5001 digits" in detail and "99999999" in detail and len(detail) < 300
