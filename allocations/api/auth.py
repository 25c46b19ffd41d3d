"""API tokens stored hashed: make one (the key shown once), authenticate with it.

DRF's ``authtoken`` keeps keys in plain text, so anyone who reads the database (a backup, a
replica, a support dump) could act as every API user. Here the database holds SHA-256 digests
only (``ApiToken.key_hash``); a key is 20 random bytes, so a plain, unsalted hash is enough
(nothing to guess, unlike a password) and a lookup stays one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from allocations.models import ApiToken

# last_used_at is written at most this often per token: a busy client must not turn every
# GET into a write.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_create(*, user: Any) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row (digest only) and the key, which is never stored."""
    key = secrets.token_hex(20)
    token = ApiToken.objects.create(user=user, key_hash=hash_key(key), prefix=key[:8])
    return token, key


class HashedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, looked up by the key's digest."""

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        try:
            token = ApiToken.objects.select_related("user").get(key_hash=hash_key(key))
        except ApiToken.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token


class HashedTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Tells drf-spectacular that this is the ``Token`` header scheme."""

    target_class = "allocations.api.auth.HashedTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Token-based authentication with required prefix "Token"',
        }
