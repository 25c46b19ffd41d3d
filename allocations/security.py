"""Response headers that the browser enforces, and who may keep trying to sign in.

* The Content-Security-Policy: Django 5.2 has no built-in CSP, so this small middleware sets one
  header on every response. Scripts come only from our own origin (``static/js/``, Plotly
  served by the dashboards view): no inline ``<script>`` and no ``on*=`` handler anywhere in
  ``templates/``; a form that wants a confirmation says so with ``data-confirm``
  (``static/js/confirm.js``).
* django-axes' lockout, per username and address (``AXES_FAILURE_LIMIT``) and per address
  whatever the usernames (``AXES_ADDRESS_FAILURE_LIMIT``), with its answer (a page, or JSON
  under ``/api/``), and the client's address that it and every throttle count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

# Each directive with why it is not just 'self':
# - style-src 'unsafe-inline': Plotly.js injects <style> elements and style attributes when it
#   draws a chart; styles cannot run code, so this does not reopen script injection.
# - img-src data:: Plotly's mode bar and Swagger UI draw icons from data: URIs.
# - frame-ancestors 'none': the console is never framed (clickjacking), like X-Frame-Options.
DEFAULT_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def policy_header(policy: dict[str, str]) -> str:
    return "; ".join(f"{directive} {sources}" for directive, sources in policy.items())


class ContentSecurityPolicyMiddleware:
    """Adds ``Content-Security-Policy`` to every response that has none yet.

    ``settings.CONTENT_SECURITY_POLICY`` (a directive -> sources mapping) replaces the default;
    a view may set its own header, which is kept.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.header = policy_header(getattr(settings, "CONTENT_SECURITY_POLICY", DEFAULT_POLICY))

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.header
        return response


# --- Sign-in lockout --------------------------------------------------------------------------
def client_address(request: HttpRequest) -> str:
    """The client's address (``AXES_CLIENT_IP_CALLABLE``, and the throttles' ident).

    Behind ``GPUGOV_PROXY_COUNT`` load balancers that each append the address they saw to
    ``X-Forwarded-For``, the client is the entry that many places from the right: entries
    further left were sent by the client itself and prove nothing.
    """
    proxies = settings.GPUGOV_PROXY_COUNT
    if proxies > 0:
        forwarded = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        forwarded = [hop for hop in forwarded if hop]
        if forwarded:
            return forwarded[-min(proxies, len(forwarded))]
    return str(request.META.get("REMOTE_ADDR", ""))


class AddressLimitAxesHandler(AxesDatabaseHandler):
    """django-axes' database handler with a second limit: the failures from one address, over
    every username, against ``AXES_ADDRESS_FAILURE_LIMIT``.

    The per-username limit alone lets one address try a few passwords on each of many users
    (password spraying). Axes has a single failure limit for all its lockout parameters, and an
    ``ip_address`` parameter would also be reset by any successful login from that address (the
    sprayer's own account), so the address is counted here instead. A success still resets only
    its own username and address pair.
    """

    def get_failures(self, request: Any, credentials: dict[str, Any] | None = None) -> int:
        failures = super().get_failures(request, credentials)
        attempts = AccessAttempt.objects.filter(ip_address=request.axes_ip_address)
        if settings.AXES_COOLOFF_TIME is not None:
            attempts = attempts.filter(attempt_time__gte=get_cool_off_threshold(request))
        from_address = attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
        if from_address >= settings.AXES_ADDRESS_FAILURE_LIMIT:
            # Reported as the per-username limit reached, so that axes refuses every username.
            return max(failures, get_failure_limit(request, credentials))
        return failures


LOCKED_OUT = (
    "Too many failed sign-ins for this user name or from this address: "
    "try again in {minutes} minutes, or ask an administrator to lift the lockout."
)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """Axes' answer to a locked-out attempt (``AXES_LOCKOUT_CALLABLE``): 429, as JSON under
    ``/api/`` and as a console page elsewhere. It says the same whether the username exists."""
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else 0
    message = (
        LOCKED_OUT.format(minutes=minutes)
        if minutes
        else "Too many failed sign-ins: ask an administrator to lift the lockout."
    )
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message}, status=429)
    else:
        response = render(request, "registration/locked_out.html", {"message": message}, status=429)
    if minutes:
        response["Retry-After"] = str(minutes * 60)
    return response
