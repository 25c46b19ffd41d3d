"""Set-up of the throttling tests: the addresses and email addresses they send from start
with no requests counted."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.cache import cache

# Every address and email address that a throttling test sends from or for.
ADDRESSES = ["127.0.0.1", *(f"10.0.0.{n}" for n in range(1, 40))]
EMAILS = ["bob@example.com", "alice@example.com", "ghost@example.com"]


@pytest.fixture
def throttles_forgotten() -> Iterator[None]:
    """The throttles count in the cache, which outlives a test (a file, or Redis): forget the
    counts of the test addresses before and after, so that no test counts another's requests."""
    scopes = list(settings.GPUGOV_THROTTLE_RATES)
    keys = [f"throttle_{scope}_{address}" for scope in scopes for address in ADDRESSES]
    keys += [
        f"throttle_password-reset-email_{hashlib.sha256(email.encode()).hexdigest()}" for email in EMAILS
    ]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)
