"""Response headers that the browser enforces: the Content-Security-Policy.

Django 5.2 has no built-in CSP, so this small middleware sets one header on every response.
Scripts come only from our own origin (``static/js/``, Plotly served by the dashboards view):
no inline ``<script>`` and no ``on*=`` handler anywhere in ``templates/``; a form that wants a
confirmation says so with ``data-confirm`` (``static/js/confirm.js``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

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
