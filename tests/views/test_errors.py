"""An unreachable database answers 503 with Retry-After, not a bare 500 (the chaos run restarts
PostgreSQL and counts any 500 as a failure)."""

from __future__ import annotations

import pytest
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import path


def database_down(request: HttpRequest) -> HttpResponse:
    raise OperationalError("connection failed: the database system is shutting down")


def bug(request: HttpRequest) -> HttpResponse:
    raise ZeroDivisionError("a bug")


urlpatterns = [
    path("api/v1/down/", database_down),
    path("teams/down/", database_down),
    path("teams/bug/", bug),
]
handler500 = "allocations.views.errors.server_error"

pytestmark = [pytest.mark.urls(__name__)]


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


@override_settings(DEBUG=False)
def test_the_api_answers_503_with_retry_after_while_the_database_is_down(client: Client) -> None:
    response = client.get("/api/v1/down/")
    assert response.status_code == 503
    assert response["Retry-After"] == "10"
    assert "database is unreachable" in response.json()["detail"]


@override_settings(DEBUG=False)
def test_a_page_answers_503_saying_why_while_the_database_is_down(client: Client) -> None:
    response = client.get("/teams/down/")
    assert response.status_code == 503
    assert b"nothing was changed" in response.content


@override_settings(DEBUG=False)
def test_any_other_error_is_still_a_500(client: Client) -> None:
    assert client.get("/teams/bug/").status_code == 500
