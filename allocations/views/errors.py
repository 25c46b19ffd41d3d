"""The answers to errors: the product's 404, in debug too, and for an unexpected error a 503
that says so while the database is unreachable (PostgreSQL restarting), so clients retry
instead of reporting a bug; a plain 500 otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.defaults import server_error as django_server_error

RETRY_AFTER_S = 10
UNAVAILABLE = "The database is unreachable for a moment; nothing was changed. Try again in a few seconds."


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/metrics"))


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: one page for "missing" and "not yours" alike; it never shows the lookup
    that failed, which would tell them apart (``access.get_visible_or_404``)."""
    if _wants_json(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return render(request, "404.html", status=404)


class NotFoundMiddleware:
    """A view's Http404 answered by ``page_not_found`` whatever DEBUG says.

    With DEBUG on (``make run``) Django would answer with its technical 404 page: the URL
    patterns and the lookup that failed, for a page of a team the user may not see. A URL that
    matches no pattern never reaches a view and keeps Django's own answer.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it while handling the exception, so ``sys.exc_info()`` holds it."""
    error = sys.exc_info()[1]
    wants_json = _wants_json(request)
    if isinstance(error, OperationalError | InterfaceError):
        # No template: rendering the site's layout would ask the database again.
        if wants_json:
            response: HttpResponse = JsonResponse({"detail": UNAVAILABLE}, status=503)
        else:
            response = HttpResponse(
                f"<!doctype html><title>gpugov: unavailable</title><h1>Unavailable</h1><p>{UNAVAILABLE}</p>",
                status=503,
            )
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
    if wants_json:
        return JsonResponse({"detail": "Internal server error."}, status=500)
    return django_server_error(request)
