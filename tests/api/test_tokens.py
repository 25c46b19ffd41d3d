"""API tokens: they expire, a password change revokes them, a user holds a few at most, and
their owner (or an administrator, in the Django admin) lists and revokes them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from allocations.choices import AuditAction
from allocations.models import ApiToken, AuditEntry
from tests import factories as f
from tests.conftest import PASSWORD

TOKEN = "/api/v1/auth/token/"
NEW_PASSWORD = "another-pw-for-tests-only"


def new_key(username: str = "bob", password: str = PASSWORD) -> str:
    response = APIClient().post(TOKEN, {"username": username, "password": password}, format="json")
    assert response.status_code == 200, response.content
    return str(response.json()["token"])


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def token_of(key: str) -> ApiToken:
    return ApiToken.objects.get(prefix=key[:8])


def expire(token: ApiToken) -> None:
    """Made 31 days ago, expired yesterday (no clock is faked: the times are set)."""
    now = timezone.now()
    ApiToken.objects.filter(pk=token.pk).update(
        created_at=now - timedelta(days=31), expires_at=now - timedelta(days=1)
    )


def test_a_new_token_says_when_it_expires(personas, settings):
    settings.GPUGOV_API_TOKEN_LIFETIME_DAYS = 7
    before = timezone.now()
    response = APIClient().post(TOKEN, {"username": "bob", "password": PASSWORD}, format="json")
    body = response.json()
    assert set(body) == {"token", "id", "prefix", "created_at", "expires_at"}
    stored = ApiToken.objects.get(pk=body["id"])
    assert before + timedelta(days=7) <= stored.expires_at <= timezone.now() + timedelta(days=7)
    assert body["prefix"] == body["token"][:8] == stored.prefix


def test_an_expired_token_is_refused_with_401_saying_so(personas):
    key = new_key()
    assert with_key(key).get("/api/v1/teams/").status_code == 200
    expire(token_of(key))
    response = with_key(key).get("/api/v1/teams/")
    assert response.status_code == 401
    detail = response.json()["detail"]
    assert detail.startswith(f"Token {key[:8]}… expired at ")
    assert "POST /api/v1/auth/token/" in detail


def test_a_password_change_revokes_every_token_of_that_user(personas):
    keys = [new_key(), new_key()]
    olgas = new_key("olga")
    personas.member.set_password(NEW_PASSWORD)
    personas.member.save()
    for key in keys:
        response = with_key(key).get("/api/v1/teams/")
        assert response.status_code == 401
        assert response.json()["detail"] == (
            f"Token {key[:8]}… was revoked: the password of bob changed after it was made; "
            "ask for a new one (POST /api/v1/auth/token/)."
        )
    assert with_key(olgas).get("/api/v1/teams/").status_code == 200  # another user's stays
    assert with_key(new_key(password=NEW_PASSWORD)).get("/api/v1/teams/").status_code == 200


def test_changing_the_password_on_the_console_revokes_the_tokens(personas):
    key = new_key()
    browser = Client()
    browser.force_login(personas.member)
    response = browser.post(
        "/accounts/password_change/",
        {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 302, response.content
    assert with_key(key).get("/api/v1/teams/").status_code == 401


def test_logging_out_of_the_console_leaves_the_tokens_alone(personas):
    """Documented choice: a token belongs to a script, not to a browser session."""
    key = new_key()
    browser = Client()
    assert browser.post("/accounts/login/", {"username": "bob", "password": PASSWORD}).status_code == 302
    browser.post("/accounts/logout/")
    assert with_key(key).get("/api/v1/teams/").status_code == 200


def test_the_owner_lists_their_tokens_without_their_keys(personas):
    first, second = new_key(), new_key()
    new_key("olga")
    expire(token_of(new_key()))
    response = with_key(second).get(TOKEN)
    assert response.status_code == 200
    rows = response.json()
    assert [row["prefix"] for row in rows] == [second[:8], first[:8]]  # newest first, no expired one
    assert [row["current"] for row in rows] == [True, False]
    assert set(rows[0]) == {"id", "prefix", "created_at", "expires_at", "last_used_at", "current"}
    text = response.content.decode()
    assert first not in text and second not in text
    assert token_of(first).key_hash not in text


def test_the_browser_session_lists_the_tokens_too(personas):
    key = new_key()
    browser = APIClient()
    browser.force_login(personas.member)
    response = browser.get(TOKEN)
    assert response.status_code == 200
    assert [(row["prefix"], row["current"]) for row in response.json()] == [(key[:8], False)]


def test_listing_tokens_needs_credentials(personas):
    assert APIClient().get(TOKEN).status_code == 401
    assert APIClient().delete(TOKEN).status_code == 401


def test_the_owner_revokes_one_token(personas):
    keep, revoke = new_key(), new_key()
    client = with_key(keep)
    assert client.delete(f"{TOKEN}{token_of(revoke).pk}/").status_code == 204
    assert with_key(revoke).get("/api/v1/teams/").status_code == 401
    assert client.get("/api/v1/teams/").status_code == 200


def test_another_users_token_answers_404_like_a_missing_one(personas):
    olgas = token_of(new_key("olga"))
    client = with_key(new_key())
    theirs = client.delete(f"{TOKEN}{olgas.pk}/")
    missing = client.delete(f"{TOKEN}999999/")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert ApiToken.objects.filter(pk=olgas.pk).exists()


def test_delete_on_the_collection_revokes_all_the_owners_tokens(personas):
    keys = [new_key(), new_key()]
    olgas = new_key("olga")
    assert with_key(keys[0]).delete(TOKEN).status_code == 204
    assert not ApiToken.objects.filter(user=personas.member).exists()
    assert with_key(keys[1]).get("/api/v1/teams/").status_code == 401
    assert with_key(olgas).get("/api/v1/teams/").status_code == 200


def test_one_more_token_than_the_limit_is_refused_naming_the_limit(personas, settings):
    settings.GPUGOV_API_TOKEN_LIMIT = 2
    held = [new_key(), new_key()]
    response = APIClient().post(TOKEN, {"username": "bob", "password": PASSWORD}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "username": [
            "bob already holds 2 API tokens, the most one user may hold (GPUGOV_API_TOKEN_LIMIT=2); "
            "revoke one first (DELETE /api/v1/auth/token/<id>/)."
        ]
    }
    assert ApiToken.objects.filter(user=personas.member).count() == 2
    # The tokens held are untouched; revoking one makes room.
    assert with_key(held[0]).delete(f"{TOKEN}{token_of(held[1]).pk}/").status_code == 204
    new_key()


def test_expired_and_revoked_tokens_do_not_count_and_are_cleared(personas, settings):
    settings.GPUGOV_API_TOKEN_LIMIT = 2
    expired, stale = token_of(new_key()), token_of(new_key())
    expire(expired)
    ApiToken.objects.filter(pk=stale.pk).update(password_digest="0" * 64)  # an older password's
    new_key()
    new_key()
    assert not ApiToken.objects.filter(pk__in=[expired.pk, stale.pk]).exists()
    assert ApiToken.objects.filter(user=personas.member).count() == 2


@pytest.fixture
def admin_browser(personas) -> Client:
    """The Django admin, as a superuser (its model permissions are theirs)."""
    from django.contrib.auth import get_user_model

    browser = Client()
    browser.force_login(get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD))
    return browser


def test_an_administrator_sees_each_tokens_state_in_the_admin(personas, admin_browser):
    new_key()
    expire(token_of(new_key()))
    new_key("olga")
    personas.other_member.set_password(NEW_PASSWORD)
    personas.other_member.save()
    page = admin_browser.get("/django-admin/allocations/apitoken/").content.decode()
    assert page.count(">accepted<") == 1
    assert page.count(">expired<") == 1
    assert page.count(">revoked: password changed<") == 1


def test_an_administrator_revokes_a_token_in_the_admin(personas, admin_browser):
    key = new_key()
    token = token_of(key)
    response = admin_browser.post(f"/django-admin/allocations/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert with_key(key).get("/api/v1/teams/").status_code == 401


def test_an_administrator_revokes_every_token_of_a_user_in_the_admin(personas, admin_browser):
    keys = [new_key(), new_key()]
    olgas = new_key("olga")
    response = admin_browser.post(
        "/django-admin/allocations/apitoken/",
        {
            "action": "delete_selected",
            "_selected_action": [token_of(key).pk for key in keys],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not ApiToken.objects.filter(user=personas.member).exists()
    assert with_key(olgas).get("/api/v1/teams/").status_code == 200


def test_a_token_made_for_a_user_without_a_team_still_works(db):
    """The limit and lifetime apply to anyone; a token is not a team matter."""
    f.make_user("loner")
    assert with_key(new_key("loner")).get(TOKEN).status_code == 200


# --- The audit trail: every token made or revoked, by whom, never its key ------------------------
def token_entries() -> list[tuple[str, str, str, str, str]]:
    """(actor, action, object, old value, new value) of the tokens' audit entries, oldest first."""
    return [
        (e.actor_name, e.action, e.object_repr, e.old_value, e.new_value)
        for e in AuditEntry.objects.filter(object_type="api token").order_by("at", "id")
    ]


def test_making_a_token_is_audited_without_its_key(personas):
    key = new_key()
    token = token_of(key)
    [(actor, action, label, old, new)] = token_entries()
    assert (actor, action, label, old) == ("bob", AuditAction.CREATE, f"token {key[:8]}… of bob", "")
    assert new == (
        f"user: bob; prefix: {key[:8]}; expires_at: {token.expires_at.isoformat(timespec='seconds')}; "
        "state: accepted"
    )
    assert not AuditEntry.objects.filter(new_value__contains=key).exists()
    assert not AuditEntry.objects.filter(new_value__contains=token.key_hash).exists()


def test_the_owner_revoking_a_token_is_audited(personas):
    keep, revoke = new_key(), new_key()
    with_key(keep).delete(f"{TOKEN}{token_of(revoke).pk}/")
    deleted = [entry for entry in token_entries() if entry[1] == AuditAction.DELETE]
    assert [entry[:3] for entry in deleted] == [("bob", AuditAction.DELETE, f"token {revoke[:8]}… of bob")]
    assert deleted[0][3].startswith(f"user: bob; prefix: {revoke[:8]}; ")


def test_revoking_all_ones_tokens_audits_each(personas):
    keys = [new_key(), new_key()]
    with_key(keys[0]).delete(TOKEN)
    deleted = {entry[2] for entry in token_entries() if entry[1] == AuditAction.DELETE}
    assert deleted == {f"token {key[:8]}… of bob" for key in keys}


def test_an_administrator_revoking_tokens_is_audited_in_their_name(personas, admin_browser):
    one, two, three = new_key(), new_key(), new_key("olga")
    admin_browser.post(f"/django-admin/allocations/apitoken/{token_of(one).pk}/delete/", {"post": "yes"})
    admin_browser.post(
        "/django-admin/allocations/apitoken/",
        {
            "action": "delete_selected",
            "_selected_action": [token_of(k).pk for k in (two, three)],
            "post": "yes",
        },
    )
    deleted = [(e[0], e[2]) for e in token_entries() if e[1] == AuditAction.DELETE]
    assert sorted(deleted) == sorted(
        [
            ("root", f"token {one[:8]}… of bob"),
            ("root", f"token {two[:8]}… of bob"),
            ("root", f"token {three[:8]}… of olga"),
        ]
    )


def test_clearing_tokens_no_longer_accepted_is_audited_with_their_state(personas):
    expired, stale = token_of(new_key()), token_of(new_key())
    expire(expired)
    ApiToken.objects.filter(pk=stale.pk).update(password_digest="0" * 64)
    new_key()
    deleted = {e[2]: e[3] for e in token_entries() if e[1] == AuditAction.DELETE}
    assert deleted[f"token {expired.prefix}… of bob"].endswith("state: expired")
    assert deleted[f"token {stale.prefix}… of bob"].endswith("state: revoked: password changed")


def test_token_entries_show_on_the_console_audit_page(personas):
    key = new_key()
    browser = Client()
    browser.force_login(personas.cluster_admin)
    page = browser.get("/console/audit/", {"object_type": "api token"}).content.decode()
    assert f"token {key[:8]}… of bob" in page
