"""API tokens: made, checked and revoked here (the token endpoint, the admin and the token
authentication call these).

* A key is 20 random bytes; the database keeps only its SHA-256 digest (``hash_key``), so a
  copy of the database is no list of working keys, and a plain digest is enough (a random key
  cannot be guessed, unlike a password) while a lookup stays one indexed query.
* A token is accepted for ``GPUGOV_API_TOKEN_LIFETIME_DAYS`` after it is made.
* A token carries a digest of its owner's stored password hash; when the password changes (the
  console's password change or reset, the admin, ``manage.py changepassword``, anything that
  calls ``set_password``) the digest no longer matches and every token made before is refused.
  Checking this on each request, as Django does for sessions, holds whichever way the password
  was changed. Django re-hashing a password with more iterations after an upgrade changes the
  stored hash too, and revokes the tokens the same way.
* One user holds at most ``GPUGOV_API_TOKEN_LIMIT`` live tokens: one more is refused (a 400
  naming the limit) rather than silently revoking an older one that some script still uses.
* Every token made or revoked writes an audit entry (Console → Audit, object type "api
  token"): who acted, whose token, its prefix and expiry, never its key. A password change
  writes none here: its tokens stay until they are cleared, refused on every request.
* Logging out of the console ends the browser session only: a token is made by a script with a
  username and password, not by a session, and is revoked on its own (``DELETE`` on the token
  endpoint, or by an administrator in the Django admin).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from allocations.models import ApiToken
from allocations.services import audit

# last_used_at is written at most this often per token.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def password_digest(user: Any) -> str:
    """A digest of the user's stored password hash (itself salted and slow): it changes with
    the password, and tells nothing that the user table does not already hold."""
    return hashlib.sha256(user.password.encode()).hexdigest()


def token_lifetime() -> timedelta:
    return timedelta(days=settings.GPUGOV_API_TOKEN_LIFETIME_DAYS)


ACCEPTED, EXPIRED, PASSWORD_CHANGED = "accepted", "expired", "revoked: password changed"


def token_state(token: ApiToken, now: datetime) -> str:
    """``ACCEPTED``, ``EXPIRED`` or ``PASSWORD_CHANGED`` (``token`` with its user loaded)."""
    if now >= token.expires_at:
        return EXPIRED
    if token.password_digest != password_digest(token.user):
        return PASSWORD_CHANGED
    return ACCEPTED


def token_refusal(token: ApiToken, now: datetime) -> str | None:
    """Why ``token`` is no longer accepted, naming it and saying what to do; None when it is."""
    state = token_state(token, now)
    if state == EXPIRED:
        return (
            f"Token {token.prefix}… expired at {token.expires_at.isoformat(timespec='seconds')}; "
            "ask for a new one (POST /api/v1/auth/token/)."
        )
    if state == PASSWORD_CHANGED:
        return (
            f"Token {token.prefix}… was revoked: the password of {token.user.get_username()} "
            "changed after it was made; ask for a new one (POST /api/v1/auth/token/)."
        )
    return None


def live_tokens(user: Any, now: datetime | None = None) -> QuerySet[ApiToken]:
    """The user's tokens that are still accepted, newest first."""
    return ApiToken.objects.filter(
        user=user, expires_at__gt=now or timezone.now(), password_digest=password_digest(user)
    )


def _audit_values(token: ApiToken, now: datetime) -> dict[str, Any]:
    """What the trail keeps of a token: whose, which (its prefix), until when, and its state.
    Never the key, which is not stored anyway."""
    return {
        "user": token.user.get_username(),
        "prefix": token.prefix,
        "expires_at": token.expires_at,
        "state": token_state(token, now),
    }


def _audit_label(token: ApiToken) -> str:
    return f"token {token.prefix}… of {token.user.get_username()}"


def _revoke(actor: Any, tokens: QuerySet[ApiToken], now: datetime) -> int:
    """Delete ``tokens``, one audit entry each (read before the rows go)."""
    rows = list(tokens.select_related("user"))
    for token in rows:
        audit.record_delete(
            actor=actor, obj=token, values=_audit_values(token, now), object_repr=_audit_label(token)
        )
    ApiToken.objects.filter(pk__in=[token.pk for token in rows]).delete()
    return len(rows)


def api_token_create(*, user: Any, actor: Any = None) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row (digest only) and the key, which is never stored.
    ``actor`` is who asked (the user themselves when omitted: a token is made by exchanging
    its owner's password).

    1. Lock the user's row, so that two requests at once cannot both pass the limit.
    2. Delete the user's tokens that are no longer accepted (expired, or from an old password):
       they do not count towards the limit and could never be used again. Each is audited.
    3. Refuse when the user already holds the most live tokens allowed.
    4. Make the token and audit it.
    """
    limit = settings.GPUGOV_API_TOKEN_LIMIT
    now = timezone.now()
    with transaction.atomic():
        # 1.
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        actor = user if actor is None else actor
        # 2.
        live = live_tokens(user, now)
        _revoke(actor, ApiToken.objects.filter(user=user).exclude(pk__in=live.values("pk")), now)
        # 3.
        held = live.count()
        if held >= limit:
            raise ValidationError(
                {
                    "username": (
                        f"{user.get_username()} already holds {held} API tokens, the most one user "
                        f"may hold (GPUGOV_API_TOKEN_LIMIT={limit}); revoke one first "
                        "(DELETE /api/v1/auth/token/<id>/)."
                    )
                },
                code="token_limit",
            )
        key = secrets.token_hex(20)
        token = ApiToken.objects.create(
            user=user,
            key_hash=hash_key(key),
            prefix=key[:8],
            expires_at=now + token_lifetime(),
            password_digest=password_digest(user),
        )
        # 4.
        audit.record_create(
            actor=actor, obj=token, values=_audit_values(token, now), object_repr=_audit_label(token)
        )
    return token, key


def api_token_revoke(*, actor: Any, token: ApiToken) -> None:
    """``actor`` revokes one token: its row is deleted, so its key matches nothing any more,
    and the trail says who did it."""
    api_tokens_revoke(actor=actor, tokens=ApiToken.objects.filter(pk=token.pk))


def api_tokens_revoke(*, actor: Any, tokens: QuerySet[ApiToken]) -> int:
    """``actor`` revokes every token of ``tokens`` (a user's, or an administrator's selection),
    one audit entry each; how many."""
    with transaction.atomic():
        return _revoke(actor, tokens, timezone.now())


def api_token_touch(*, token: ApiToken, now: datetime) -> None:
    """Record that ``token`` was used, at most once per ``LAST_USED_RESOLUTION``: a busy client
    must not turn every GET into a write."""
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
