"""Login throttling (django-axes): after AXES_FAILURE_LIMIT failed logins for one username from
one address, that pair is locked out, even with the right password, on the login page and on
the API's token endpoint; other users and other addresses are not. The test settings turn axes
off (Django's test client logs in without a request); these tests turn it back on."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

LIMIT = 3


@pytest.fixture
def axes_on(settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = LIMIT
    return settings


def login(client: Client, username: str, password: str, ip: str = "10.0.0.1"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=ip)


def test_the_nth_bad_login_locks_the_username_out(personas, axes_on):
    client = Client()
    for _ in range(LIMIT - 1):
        assert login(client, "bob", "wrong").status_code == 200  # the form again, with its error
    response = login(client, "bob", "wrong")
    assert response.status_code == 429
    # Locked: even the right password is refused now, from that address.
    response = login(client, "bob", PASSWORD)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_lockout_is_per_username_and_address(personas, axes_on):
    client = Client()
    for _ in range(LIMIT):
        login(client, "bob", "wrong")
    assert login(Client(), "alice", PASSWORD).status_code == 302  # another user, same address
    assert login(Client(), "bob", PASSWORD, ip="10.0.0.2").status_code == 302  # another address


def test_fewer_failures_than_the_limit_do_not_lock(personas, axes_on):
    client = Client()
    for _ in range(LIMIT - 1):
        login(client, "bob", "wrong")
    assert login(client, "bob", PASSWORD).status_code == 302


def token_request(client: APIClient, password: str) -> int:
    response = client.post(
        "/api/v1/auth/token/",
        {"username": "bob", "password": password},
        format="json",
        REMOTE_ADDR="10.0.0.9",
    )
    assert b'"token"' not in response.content or response.status_code == 200
    return int(response.status_code)


def test_token_endpoint_counts_and_honours_the_lockout(personas, axes_on):
    client = APIClient()
    assert [token_request(client, "wrong") for _ in range(LIMIT)] == [400] * (LIMIT - 1) + [429]
    assert token_request(client, PASSWORD) == 429  # the right password, no key handed out
    # The page login from that address is locked too: one count for both doors.
    assert login(Client(), "bob", PASSWORD, ip="10.0.0.9").status_code == 429
