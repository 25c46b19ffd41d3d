"""Request rates per client address (and per email address for password resets).

Each throttle counts requests in Django's cache (Redis in production) over a sliding window, at
the rate ``GPUGOV_THROTTLE_RATES[scope]`` ("<count>/<second|minute|hour|day>"). They are DRF
throttles, so the API uses them as they are; the password reset pages, which are Django views,
ask the same classes and answer with the console's 429 page (``throttled_page``).

The address is ``security.client_address``, the one django-axes counts too, so that one
setting (``GPUGOV_PROXY_COUNT``) makes both see the client rather than a load balancer.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.throttling import SimpleRateThrottle

from allocations.security import client_address


class AddressThrottle(SimpleRateThrottle):
    """Requests from one client address, whoever they claim to be."""

    scope = ""

    def get_rate(self) -> str:
        try:
            return str(settings.GPUGOV_THROTTLE_RATES[self.scope])
        except KeyError:
            raise ImproperlyConfigured(f"GPUGOV_THROTTLE_RATES has no rate for {self.scope!r}") from None

    def parse_rate(self, rate: str | None) -> tuple[int | None, int | None]:
        try:
            return super().parse_rate(rate)  # type: ignore[no-any-return]
        except (ValueError, KeyError, IndexError):
            raise ImproperlyConfigured(
                f"GPUGOV_THROTTLE_RATES[{self.scope!r}]={rate!r} is not '<count>/<second|minute|hour|day>'"
            ) from None

    def ident(self, request: Any) -> str:
        return client_address(request)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return str(self.cache_format % {"scope": self.scope, "ident": self.ident(request)})

    def wait_seconds(self) -> int:
        """Whole seconds until the next request is allowed (at least one)."""
        wait = self.wait()
        return max(1, math.ceil(self.duration if wait is None else wait))


class ApiTokenThrottle(AddressThrottle):
    """``POST /api/v1/auth/token/``: each request checks a password (slow on purpose) and may
    make a key, so an address gets a few per hour; failures are locked out by axes besides."""

    scope = "api-token"


class PasswordResetAddressThrottle(AddressThrottle):
    """Reset requests from one address: each may send an email."""

    scope = "password-reset-address"


class PasswordResetEmailThrottle(AddressThrottle):
    """Reset requests for one email address, from anywhere: an inbox is not flooded. Counted
    for any address typed, existing or not, so being throttled tells nothing about accounts."""

    scope = "password-reset-email"

    def __init__(self, email: str) -> None:
        super().__init__()
        # A digest: the cache key neither holds the address nor depends on its characters.
        self.email_key = hashlib.sha256(email.strip().lower().encode()).hexdigest()

    def ident(self, request: Any) -> str:
        return self.email_key


class PasswordResetConfirmThrottle(AddressThrottle):
    """Visits of reset links (and new passwords set through them) from one address."""

    scope = "password-reset-confirm"


def throttled_page(request: HttpRequest, throttle: AddressThrottle, what: str) -> HttpResponse:
    """The console's 429 page: what was refused and when to try again."""
    seconds = throttle.wait_seconds()
    response = render(
        request,
        "registration/throttled.html",
        {"what": what, "minutes": max(1, math.ceil(seconds / 60))},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response
