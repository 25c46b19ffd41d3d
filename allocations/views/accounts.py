"""Password reset, throttled: Django's own views, forms and emails, in the console's look
(``templates/registration/``), with each request counted before it can send an email.

These pages are public, so each is limited per client address, and a reset request also per
email address typed (an inbox cannot be flooded from many addresses). The email count is kept
for any address, existing or not, and the page after a request is the same either way, so
neither the answer nor the throttling tells whether an account uses that email. Over a limit,
the console's 429 page says what was refused and when to try again.

``gpugov_site/urls.py`` puts these patterns before ``django.contrib.auth.urls``: same names,
so Django's other views and the reset email link here.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import path

from allocations.throttles import (
    PasswordResetAddressThrottle,
    PasswordResetConfirmThrottle,
    PasswordResetEmailThrottle,
    throttled_page,
)


class PasswordResetView(auth_views.PasswordResetView):
    """Asks for an email address and sends it a reset link (when an account uses it)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        by_address = PasswordResetAddressThrottle()
        if not by_address.allow_request(request, self):
            return throttled_page(request, by_address, "password reset requests from your address")
        by_email = PasswordResetEmailThrottle(str(request.POST.get("email", "")))
        if not by_email.allow_request(request, self):
            return throttled_page(request, by_email, "password reset requests for this email address")
        return super().post(request, *args, **kwargs)


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """The emailed link, then the new password: every request counted per address."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        throttle = PasswordResetConfirmThrottle()
        if not throttle.allow_request(request, self):
            return throttled_page(request, throttle, "password reset link visits from your address")
        return super().dispatch(request, *args, **kwargs)


urlpatterns = [
    path("password_reset/", PasswordResetView.as_view(), name="password_reset"),
    path("reset/<uidb64>/<token>/", PasswordResetConfirmView.as_view(), name="password_reset_confirm"),
]
