"""Access keys for SageMaker's API: made on the access keys page and by ``manage.py
issue_access_key``, limited per user, revoked by their owner, audited without the secret
(docs/security.md "Access keys")."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from allocations.models import AccessKey, AuditEntry
from allocations.services import access_keys
from tests.conftest import PASSWORD, Personas

pytestmark = pytest.mark.django_db


def signed_in(user: object) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)  # type: ignore[attr-defined]
    return client


def test_the_page_makes_a_key_and_shows_its_secret_once(personas: Personas) -> None:
    client = signed_in(personas.member)
    made = client.post("/access-keys/")
    key = AccessKey.objects.get(user=personas.member)
    secret = access_keys.secret_for(key)
    assert secret.encode() in made.content
    assert len(secret) == 40
    listed = client.get("/access-keys/")
    assert key.access_key_id.encode() in listed.content
    assert secret.encode() not in listed.content
    entry = AuditEntry.objects.get(object_type="access key")
    assert entry.action == "create" and key.access_key_id in entry.new_value
    assert secret not in entry.new_value


def test_the_secret_is_not_stored(personas: Personas) -> None:
    key, secret = access_keys.access_key_create(user=personas.member, actor=personas.member)
    row = AccessKey.objects.filter(pk=key.pk).values().get()
    assert secret not in str(row)
    with override_settings(SECRET_KEY="another-django-key-for-tests-only"):
        assert access_keys.secret_for(key) != secret  # a new SECRET_KEY revokes every key


@override_settings(GPUGOV_ACCESS_KEY_LIMIT=1)
def test_one_key_past_the_limit_is_refused_naming_it(personas: Personas) -> None:
    client = signed_in(personas.member)
    client.post("/access-keys/")
    refused = client.post("/access-keys/", follow=True)
    assert b"GPUGOV_ACCESS_KEY_LIMIT=1" in refused.content
    assert AccessKey.objects.filter(user=personas.member).count() == 1


def test_the_owner_revokes_a_key_and_another_user_gets_404(personas: Personas) -> None:
    key, _ = access_keys.access_key_create(user=personas.member, actor=personas.member)
    other = signed_in(personas.other_member)
    assert other.post(f"/access-keys/{key.access_key_id}/revoke/").status_code == 404
    assert AccessKey.objects.filter(pk=key.pk).exists()
    owner = signed_in(personas.member)
    assert owner.post(f"/access-keys/{key.access_key_id}/revoke/").status_code == 302
    assert not AccessKey.objects.filter(pk=key.pk).exists()
    assert AuditEntry.objects.filter(
        object_type="access key", action="delete", actor=personas.member
    ).exists()


def test_the_page_requires_signing_in() -> None:
    assert Client().get("/access-keys/").status_code == 302


def test_manage_py_issues_a_key_in_credentials_file_form(personas: Personas) -> None:
    out = io.StringIO()
    call_command("issue_access_key", "bob", stdout=out, stderr=io.StringIO())
    key = AccessKey.objects.get(user=personas.member)
    assert f"aws_access_key_id = {key.access_key_id}" in out.getvalue()
    secret_line = next(
        line for line in out.getvalue().splitlines() if line.startswith("aws_secret_access_key")
    )
    assert secret_line.endswith(f" {access_keys.secret_for(key)}")
    assert AuditEntry.objects.get(object_type="access key").actor_name == "system"
    with pytest.raises(CommandError, match="no user 'nobody-at-all'"):
        call_command("issue_access_key", "nobody-at-all", stdout=io.StringIO())
