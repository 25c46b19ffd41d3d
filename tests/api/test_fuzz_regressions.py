"""Faults the schemathesis run found on PostgreSQL, each reproduced: none may answer 500."""

from __future__ import annotations

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
