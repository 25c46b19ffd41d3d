"""The answer to an unexpected error: a 503 that says so while the database is unreachable
(PostgreSQL restarting), so clients retry instead of reporting a bug; a plain 500 otherwise."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error as django_server_error

RETRY_AFTER_S = 10
UNAVAILABLE = "The database is unreachable for a moment; nothing was changed. Try again in a few seconds."


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it while handling the exception, so ``sys.exc_info()`` holds it."""
    error = sys.exc_info()[1]
    wants_json = request.path.startswith(("/api/", "/metrics"))
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
