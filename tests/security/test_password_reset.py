"""The password reset pages: in the console's look, throttled per client address and per email
address typed, and telling nothing about whether an account uses that email. Driven through
the real pages, with the email Django sends (kept in memory by the test settings)."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

RESET = "/accounts/password_reset/"
NEW_PASSWORD = "another-pw-for-tests-only"


@pytest.fixture
def rates(settings, throttles_forgotten):
    """Small limits, so that a test reaches them in a few requests."""

    def set_rates(**rates: str) -> None:
        settings.GPUGOV_THROTTLE_RATES = {**settings.GPUGOV_THROTTLE_RATES, **rates}

    return set_rates


def ask_reset(email: str, ip: str):
    return Client().post(RESET, {"email": email}, REMOTE_ADDR=ip)


@pytest.mark.parametrize(
    ("path", "heading"),
    [
        (RESET, "Reset your password"),
        ("/accounts/password_reset/done/", "Check your email"),
        ("/accounts/reset/MQ/not-a-token/", "This link no longer works"),
        ("/accounts/reset/done/", "Password changed"),
    ],
)
def test_the_reset_pages_have_the_consoles_look(db, throttles_forgotten, path, heading):
    response = Client().get(path, REMOTE_ADDR="10.0.0.20")
    assert response.status_code == 200
    html = response.content.decode()
    assert "css/gpugov.css" in html and f"<h1>{heading}</h1>" in html
    assert "Django administration" not in html and "Django site admin" not in html


def test_the_login_page_links_to_the_reset(db):
    assert 'href="/accounts/password_reset/"' in Client().get("/accounts/login/").content.decode()


def test_reset_requests_are_throttled_per_address(personas, rates):
    rates(**{"password-reset-address": "2/hour"})
    for email in ("bob@example.com", "ghost@example.com"):
        assert ask_reset(email, "10.0.0.21").status_code == 302
    refused = ask_reset("alice@example.com", "10.0.0.21")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 3600
    html = refused.content.decode()
    assert "css/gpugov.css" in html
    assert "Too many password reset requests from your address. Try again in 60 minutes." in html
    assert len(mail.outbox) == 1  # bob's; none for the refused request
    assert ask_reset("alice@example.com", "10.0.0.22").status_code == 302  # another address


def test_reset_requests_are_throttled_per_email_from_any_address(personas, rates):
    rates(**{"password-reset-email": "2/hour"})
    assert ask_reset("bob@example.com", "10.0.0.23").status_code == 302
    assert ask_reset(" Bob@Example.com", "10.0.0.24").status_code == 302  # the same inbox
    refused = ask_reset("bob@example.com", "10.0.0.25")
    assert refused.status_code == 429
    assert "Too many password reset requests for this email address." in refused.content.decode()
    assert len(mail.outbox) == 2
    assert ask_reset("alice@example.com", "10.0.0.25").status_code == 302  # another email


def test_neither_the_answer_nor_the_throttling_tells_whether_the_email_exists(personas, rates):
    rates(**{"password-reset-email": "1/hour"})
    answers = {}
    for email, ip in (("bob@example.com", "10.0.0.26"), ("ghost@example.com", "10.0.0.27")):
        first, second = ask_reset(email, ip), ask_reset(email, ip)
        answers[email] = [
            (first.status_code, first["Location"]),
            (second.status_code, second.content),
        ]
    assert answers["bob@example.com"] == answers["ghost@example.com"]
    assert answers["bob@example.com"][1][0] == 429
    assert [message.to for message in mail.outbox] == [["bob@example.com"]]


def test_visits_of_reset_links_are_throttled_per_address(db, rates):
    rates(**{"password-reset-confirm": "2/hour"})
    link = "/accounts/reset/MQ/not-a-token/"
    assert [Client().get(link, REMOTE_ADDR="10.0.0.28").status_code for _ in range(2)] == [200, 200]
    refused = Client().get(link, REMOTE_ADDR="10.0.0.28")
    assert refused.status_code == 429
    assert "Too many password reset link visits from your address." in refused.content.decode()
    assert Client().get(link, REMOTE_ADDR="10.0.0.29").status_code == 200


def test_a_reset_through_the_pages_sets_the_password_and_revokes_the_tokens(personas, throttles_forgotten):
    key = APIClient().post("/api/v1/auth/token/", {"username": "bob", "password": PASSWORD}, format="json")
    key = key.json()["token"]
    assert ask_reset("bob@example.com", "10.0.0.30").status_code == 302
    link = re.search(r"http://[^/\s]+(/accounts/reset/[^/\s]+/[^/\s]+/)", mail.outbox[0].body).group(1)
    browser = Client()
    form = browser.get(link, follow=True, REMOTE_ADDR="10.0.0.30")
    assert "<h1>Choose a new password</h1>" in form.content.decode()
    done = browser.post(
        form.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
        REMOTE_ADDR="10.0.0.30",
    )
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    assert Client().login(username="bob", password=NEW_PASSWORD)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/teams/").status_code == 401
