"""Login throttling (django-axes): after AXES_FAILURE_LIMIT failed logins for one username from
one address, that pair is locked out, even with the right password, on the login page and on
the API's token endpoint; other users and other addresses are not. After
AXES_ADDRESS_FAILURE_LIMIT failures from one address, whatever the usernames (password
spraying), the whole address is. The token endpoint is also limited in requests per address.
The test settings turn axes off (Django's test client logs in without a request); these tests
turn it back on."""

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


def test_token_endpoint_counts_and_honours_the_lockout(personas, axes_on, throttles_forgotten):
    client = APIClient()
    assert [token_request(client, "wrong") for _ in range(LIMIT)] == [400] * (LIMIT - 1) + [429]
    assert token_request(client, PASSWORD) == 429  # the right password, no key handed out
    # The page login from that address is locked too: one count for both doors.
    assert login(Client(), "bob", PASSWORD, ip="10.0.0.9").status_code == 429


# --- Password spraying: a few tries on each of many usernames from one address -------------------
SPRAYED = ["alice", "bob", "victor", "olga", "nobody", "admin", *(f"user{n}" for n in range(8))]


@pytest.fixture
def spraying_limits(axes_on):
    axes_on.AXES_FAILURE_LIMIT = 5
    axes_on.AXES_ADDRESS_FAILURE_LIMIT = 20
    return axes_on


def test_password_spraying_from_one_address_is_locked_out(personas, spraying_limits):
    """4 tries on each of 14 usernames stay under the per-username limit (5) every time; the
    address reaches its own limit (20) on the 20th failure, and everything from it is refused
    from then on, even the right password of a user it never tried."""
    statuses = [
        login(Client(), name, "wrong", ip="10.0.0.5").status_code for name in SPRAYED for _ in range(4)
    ]
    assert len(statuses) == 56
    assert statuses[:19] == [200] * 19
    assert set(statuses[19:]) == {429}
    assert login(Client(), "victor", PASSWORD, ip="10.0.0.5").status_code == 429
    assert login(Client(), "victor", PASSWORD, ip="10.0.0.6").status_code == 302  # another address


def test_a_successful_login_does_not_reset_the_addresss_count(personas, spraying_limits):
    """The sprayer's own account signing in between rounds clears only its own failures."""
    others = [name for name in SPRAYED if name != "alice"]
    for name in others[:4]:
        for _ in range(4):
            assert login(Client(), name, "wrong", ip="10.0.0.5").status_code == 200
    assert login(Client(), "alice", PASSWORD, ip="10.0.0.5").status_code == 302
    statuses = [login(Client(), name, "wrong", ip="10.0.0.5").status_code for name in others[4:8]]
    assert statuses == [200, 200, 200, 429]


def test_spraying_the_token_endpoint_locks_the_address_out(personas, spraying_limits, throttles_forgotten):
    spraying_limits.GPUGOV_THROTTLE_RATES = {**spraying_limits.GPUGOV_THROTTLE_RATES, "api-token": "100/hour"}
    client = APIClient()
    statuses = [
        client.post(
            "/api/v1/auth/token/",
            {"username": name, "password": "wrong"},
            format="json",
            REMOTE_ADDR="10.0.0.7",
        ).status_code
        for name in SPRAYED[:5]
        for _ in range(4)
    ]
    assert statuses == [400] * 19 + [429]
    assert login(Client(), "victor", PASSWORD, ip="10.0.0.7").status_code == 429  # one count for both doors


def test_the_lockout_answers_with_the_consoles_page_and_json_on_the_api(
    personas, axes_on, throttles_forgotten
):
    for _ in range(LIMIT):
        login(Client(), "bob", "wrong", ip="10.0.0.8")
    page = login(Client(), "bob", PASSWORD, ip="10.0.0.8")
    assert page.status_code == 429
    assert page["Retry-After"] == "900"
    html = page.content.decode()
    assert "css/gpugov.css" in html
    assert "Too many failed sign-ins for this user name or from this address: try again in 15 minutes" in html
    api = APIClient().post(
        "/api/v1/auth/token/",
        {"username": "bob", "password": PASSWORD},
        format="json",
        REMOTE_ADDR="10.0.0.8",
    )
    assert api.status_code == 429
    assert api.json()["detail"].startswith("Too many failed sign-ins for this user name or from this address")


def test_the_lockout_says_the_same_for_a_username_that_does_not_exist(personas, axes_on):
    for name in ("bob", "ghost"):
        for _ in range(LIMIT):
            last = login(Client(), name, "wrong", ip="10.0.0.9")
        assert last.status_code == 429
        if name == "bob":
            bobs = last.content
    assert last.content == bobs


# --- Behind a load balancer -----------------------------------------------------------------------
def test_behind_a_balancer_each_client_is_counted_on_its_own(personas, axes_on, settings):
    """With GPUGOV_PROXY_COUNT=1 the client is the address the balancer appended to
    X-Forwarded-For; what the client wrote there itself is ignored, so spoofing it gains nothing."""
    settings.GPUGOV_PROXY_COUNT = 1
    settings.AXES_ADDRESS_FAILURE_LIMIT = 1000

    def through_balancer(username: str, password: str, forwarded: str):
        return Client().post(
            "/accounts/login/",
            {"username": username, "password": password},
            REMOTE_ADDR="10.0.0.30",
            HTTP_X_FORWARDED_FOR=forwarded,
        )

    for n in range(LIMIT):
        # A different spoofed first hop each time: still one client, 192.0.2.1.
        through_balancer("bob", "wrong", f"198.51.100.{n}, 192.0.2.1")
    assert through_balancer("bob", PASSWORD, "192.0.2.1").status_code == 429
    assert through_balancer("bob", PASSWORD, "192.0.2.2").status_code == 302  # another client


# --- Requests per address on the token endpoint ---------------------------------------------------
def test_the_token_endpoint_is_throttled_per_address(personas, settings, throttles_forgotten):
    """Every request counts, right password or not (each checks a password, slow on purpose)."""
    settings.GPUGOV_THROTTLE_RATES = {**settings.GPUGOV_THROTTLE_RATES, "api-token": "3/hour"}

    def ask(password: str, ip: str):
        return APIClient().post(
            "/api/v1/auth/token/", {"username": "bob", "password": password}, format="json", REMOTE_ADDR=ip
        )

    assert [ask(p, "10.0.0.10").status_code for p in (PASSWORD, "wrong", PASSWORD)] == [200, 400, 200]
    refused = ask(PASSWORD, "10.0.0.10")
    assert refused.status_code == 429
    assert refused.json()["detail"].startswith("Request was throttled.")
    assert 0 < int(refused["Retry-After"]) <= 3600
    assert ask(PASSWORD, "10.0.0.11").status_code == 200  # another address
