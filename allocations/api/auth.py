"""API tokens stored hashed: authenticate with one, and show one without its key.

DRF's ``authtoken`` keeps keys in plain text, so anyone who reads the database (a backup, a
replica, a support dump) could act as every API user. Here the database holds SHA-256 digests
only (``ApiToken.key_hash``). Tokens are made and revoked by ``services/tokens.py``, which
also says when one is no longer accepted (expired, or its owner's password changed).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions, serializers
from rest_framework.authentication import TokenAuthentication

from allocations.models import ApiToken
from allocations.services.tokens import api_token_create, api_token_touch, hash_key, token_refusal

# The name that the chaos and fuzz tests' set-up imports.
token_create = api_token_create


class HashedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, looked up by the key's digest; an expired or revoked
    token answers 401 saying which and why."""

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        try:
            token = ApiToken.objects.select_related("user").get(key_hash=hash_key(key))
        except ApiToken.DoesNotExist:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        now = timezone.now()
        refusal = token_refusal(token, now)
        if refusal is not None:
            raise exceptions.AuthenticationFailed(refusal)
        api_token_touch(token=token, now=now)
        return token.user, token


class ApiTokenSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """One of your tokens, without its key (which is never stored)."""

    current = serializers.SerializerMethodField(help_text="The token this request authenticated with")

    class Meta:
        model = ApiToken
        fields = ["id", "prefix", "created_at", "expires_at", "last_used_at", "current"]
        read_only_fields = fields

    def get_current(self, token: ApiToken) -> bool:
        request = self.context.get("request")
        return bool(request is not None and getattr(request, "auth", None) == token)


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    """A new token: its key, shown this once, and when it expires."""

    token = serializers.SerializerMethodField(help_text="The key: send it as 'Authorization: Token <key>'")

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", "id", "prefix", "created_at", "expires_at"]
        read_only_fields = fields

    def get_token(self, token: ApiToken) -> str:
        return str(self.context["key"])


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
