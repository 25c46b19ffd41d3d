"""Access keys for SageMaker's API (``/aws/sagemaker/``): made, found and revoked here (the
access keys page, ``manage.py issue_access_key`` and the SigV4 check call these).

* An access key id is ``GKIA`` and 16 base32 characters (the shape of AWS's ``AKIA...`` ids,
  with a prefix no AWS scanner mistakes for a real AWS key).
* SigV4 signs each request with an HMAC keyed by the secret, so the server needs the secret
  itself to check a signature: a one-way hash, as for API tokens, cannot work. The secret is
  therefore not stored but derived: ``HMAC-SHA256(SECRET_KEY, "gpugov-access-key" + id + salt)``
  with a random per-key ``salt`` kept in the row. A copy of the database alone is no list of
  working secrets; someone holding ``SECRET_KEY`` as well can derive them (as they could forge
  sessions already). Changing ``SECRET_KEY`` revokes every access key. Revoking one deletes its
  row, and with it the salt.
* The secret is shown once, when the key is made; it can be derived again but no page shows it.
* One user holds at most ``GPUGOV_ACCESS_KEY_LIMIT`` keys (AWS's limit is 2 as well).
* Every key made or revoked writes an audit entry (object type "access key"): who acted,
  whose key, its id, never its secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction

from allocations.models import AccessKey
from allocations.services import audit

ID_PREFIX = "GKIA"
# last_used_at is written at most this often per key.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def _new_key_id() -> str:
    return ID_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode()


def secret_for(key: AccessKey) -> str:
    """The key's secret access key, derived (40 characters, as AWS's are)."""
    message = f"gpugov-access-key:{key.access_key_id}:{key.salt}".encode()
    digest = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()[:40]


def _audit_values(key: AccessKey) -> dict[str, Any]:
    return {"user": key.user.get_username(), "access_key_id": key.access_key_id}


def _audit_label(key: AccessKey) -> str:
    return f"access key {key.access_key_id} of {key.user.get_username()}"


def access_key_create(*, user: Any, actor: Any) -> tuple[AccessKey, str]:
    """A new access key for ``user``: the row and its secret (to show once). ``actor`` is who
    asked (None: a command, "system" in the trail). Refused past ``GPUGOV_ACCESS_KEY_LIMIT``."""
    limit = settings.GPUGOV_ACCESS_KEY_LIMIT
    with transaction.atomic():
        # Lock the user's row, so that two requests at once cannot both pass the limit.
        user = get_user_model().objects.select_for_update().get(pk=user.pk)
        held = AccessKey.objects.filter(user=user).count()
        if held >= limit:
            raise ValidationError(
                {
                    "user": (
                        f"{user.get_username()} already holds {held} access keys, the most one user may "
                        f"hold (GPUGOV_ACCESS_KEY_LIMIT={limit}); revoke one first."
                    )
                },
                code="access_key_limit",
            )
        key = AccessKey.objects.create(user=user, access_key_id=_new_key_id(), salt=secrets.token_hex(16))
        audit.record_create(actor=actor, obj=key, values=_audit_values(key), object_repr=_audit_label(key))
    return key, secret_for(key)


def access_key_revoke(*, actor: Any, key: AccessKey) -> None:
    """``actor`` revokes ``key``: its row (and salt) is deleted, and the trail says who did it."""
    with transaction.atomic():
        audit.record_delete(actor=actor, obj=key, values=_audit_values(key), object_repr=_audit_label(key))
        AccessKey.objects.filter(pk=key.pk).delete()


def access_key_find(access_key_id: str) -> AccessKey | None:
    """The key with this id and its user, or None."""
    return AccessKey.objects.select_related("user").filter(access_key_id=access_key_id).first()


def access_key_touch(*, key: AccessKey, now: datetime) -> None:
    """Record that ``key`` was used, at most once per ``LAST_USED_RESOLUTION``."""
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        AccessKey.objects.filter(pk=key.pk).update(last_used_at=now)
