"""What a page tells its user after a change it asked a service for: the service's refusal in
its own words, or what was done (Django's messages, shown on the next page)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest


def run_and_tell(request: HttpRequest, done: str, service: Callable[..., Any], **kwargs: Any) -> bool:
    """Call ``service(**kwargs)``; tell the user ``done``, or the messages of its ValidationError.

    True when the service made the change, False when it refused it.
    """
    try:
        service(**kwargs)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return False
    messages.success(request, done)
    return True
