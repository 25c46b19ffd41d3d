"""A page that is not yours answers the product's 404, in debug too (``make run``): Django's
technical 404 page would show the URL configuration and the lookup that failed. Another team's
page and a missing one must look the same; the API keeps answering JSON."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings
from rest_framework.test import APIClient

from allocations.models import Job, Membership
from tests import factories as f


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def assert_the_products_404(response) -> None:
    assert response.status_code == 404
    assert [t.name for t in response.templates][:1] == ["404.html"]
    html = response.content.decode()
    assert "Not found" in html
    # What the technical page shows: the URL patterns tried and the failed lookup.
    for leak in ("URLconf", "django-admin/", "matches", "Raised by", "DEBUG = True"):
        assert leak not in html, leak


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize(
    "path",
    [
        "/teams/team-b/",
        "/teams/team-b/members/",
        "/teams/no-such-team/",
        "/jobs/{theirs}/",
        "/jobs/999999/",
        "/teams/team-a/members/{their_membership}/remove/",
    ],
)
def test_a_page_you_may_not_see_answers_the_products_404(personas, path, debug):
    theirs = f.make_job(personas.other_team, personas.instance_type, 1, submitter=personas.other_member)
    their_membership = Membership.objects.get(user=personas.other_member)
    url = path.format(theirs=theirs.pk, their_membership=their_membership.pk)
    client = client_for(personas.member)
    with override_settings(DEBUG=debug):
        response = client.post(url) if url.endswith("/remove/") else client.get(url)
    assert_the_products_404(response)
    assert Job.objects.filter(pk=theirs.pk).exists()


@override_settings(DEBUG=True)
def test_another_teams_page_and_a_missing_one_are_the_same_page(personas):
    client = client_for(personas.member)

    def page(name: str) -> str:
        html = client.get(f"/teams/{name}/").content.decode().replace(name, "NAME")
        return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)  # masked anew each time

    assert page("team-b") == page("team-z")


@override_settings(DEBUG=True)
def test_the_api_still_answers_json_404_in_debug(personas):
    theirs = f.make_job(personas.other_team, personas.instance_type, 1, submitter=personas.other_member)
    client = APIClient()
    client.force_authenticate(personas.member)
    response = client.get(f"/api/v1/jobs/{theirs.pk}/")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert "detail" in response.json()
