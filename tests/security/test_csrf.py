"""CSRF on every form: each URL of the site, POSTed by a signed-in cluster admin without a
CSRF token, answers 403 from the CSRF check (before any view runs), so no view was left
``csrf_exempt`` by mistake. The URL list is walked from the resolver, so a new page is covered
the day it is added."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.conftest import PASSWORD

# A value for each URL argument; the CSRF check runs before the view, so the objects need not
# exist (only the URL has to resolve).
ARGUMENTS = {
    "pk": 1,
    "name": "team-a",
    "team": "team-a",
    "chart": "usage",
    "week": "2026-W01",
    "key": "live",
    "token": "x",
    "uidb64": "x",
    "key_id": "GKIAAAAAAAAAAAAAAAAA",
}
# Views that take POSTs without the browser's session, so without CSRF by design.
EXEMPT = {
    # API requests authenticated by a token carry no cookie to forge; DRF still checks CSRF for
    # session-authenticated API requests (test below).
    "allocations:api-token",
    # One-click unsubscribe from an email (RFC 8058): the signed token in the URL is the
    # authority, not the session, so a forged POST can do nothing the link itself could not.
    "allocations:report_unsubscribe",
    # SageMaker's API: each request is SigV4-signed by an access key, carries no cookie, and a
    # session alone is never accepted there (tests/interop/test_sagemaker_api.py).
    "allocations:sagemaker_api",
}
# DRF views that only read: a POST is refused (by DRF's session CSRF check or as a method not
# allowed) and changes nothing.
READ_ONLY_API = {"allocations:api-docs", "allocations:api-schema", "allocations:api-root"}


def site_urls() -> list[tuple[str, str]]:
    """(name, path) of every named URL outside the Django admin and the API's format suffixes."""
    found: list[tuple[str, str]] = []

    def walk(resolver: URLResolver, namespace: str) -> None:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                if entry.namespace == "admin":
                    continue
                walk(entry, f"{entry.namespace}:" if entry.namespace else namespace)
            elif isinstance(entry, URLPattern) and entry.name:
                groups = set(entry.pattern.regex.groupindex)
                if "format" in groups:
                    continue
                name = f"{namespace}{entry.name}"
                path = reverse(name, kwargs={g: ARGUMENTS[g] for g in groups} or None)
                if (name, path) not in found:
                    found.append((name, path))

    walk(get_resolver(), "")
    return found


URLS = site_urls()
CHECKED = [(name, path) for name, path in URLS if name not in EXEMPT]


@pytest.mark.parametrize(("name", "path"), CHECKED, ids=[name for name, _ in CHECKED])
def test_post_without_csrf_token_is_refused(personas, name, path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.cluster_admin)
    response = client.post(path, {"name": "x"})
    if name in READ_ONLY_API:
        assert response.status_code in (403, 405)
        return
    assert response.status_code == 403, f"{name} {path} answered {response.status_code} without a CSRF token"
    assert b"CSRF" in response.content


def test_the_walk_covers_the_forms():
    """The resolver walk finds the pages with forms (a broken walk would pass vacuously)."""
    names = {name for name, _ in URLS}
    for expected in (
        "login",
        "allocations:job_submit",
        "allocations:policy",
        "allocations:import",
        "allocations:whatif",
    ):
        assert expected in names
    assert len(URLS) > 60
    assert names >= EXEMPT  # an exemption for a URL that no longer exists is stale


def test_session_authenticated_api_write_needs_the_token(personas):
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.member)
    response = client.post("/api/v1/jobs/", {"team": "team-a"}, content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_login_form_with_its_token_works(personas):
    """The same client with a token signs in: the 403s above are the missing token's."""
    client = Client(enforce_csrf_checks=True)
    page = client.get("/accounts/login/")
    token = page.cookies["csrftoken"].value
    response = client.post(
        "/accounts/login/", {"username": "bob", "password": PASSWORD, "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
