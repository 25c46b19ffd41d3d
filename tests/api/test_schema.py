"""The OpenAPI schema generates without a warning, and the interactive docs work offline."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command


def test_schema_generates_and_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    paths = set(schema["paths"])
    for expected in (
        "/api/v1/jobs/",
        "/api/v1/jobs/{id}/cancel/",
        "/api/v1/jobs/{id}/events/",
        "/api/v1/teams/",
        "/api/v1/quotas/",
        "/api/v1/priority-classes/",
        "/api/v1/policy/",
        "/api/v1/nodes/",
        "/api/v1/pending-reasons/",
        "/api/v1/usage/",
        "/api/v1/auth/token/",
    ):
        assert expected in paths
    schemes = schema["components"]["securitySchemes"]
    assert {"tokenAuth", "cookieAuth"} <= set(schemes)


@pytest.mark.django_db
def test_docs_load_swagger_ui_from_our_own_static_files(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "cdn." not in html and "unpkg" not in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


@pytest.mark.django_db
def test_schema_is_served(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert b"openapi: 3" in response.content
