"""Who may see or change what: the only place that decides (STYLE.md).

Cluster administrators are Django staff users: they see and change everything. Team roles
(team admin, member, viewer) come from Membership rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def is_cluster_admin(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def cluster_admin_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Console pages: login first, then cluster administrators only (403 for everyone else)."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_cluster_admin(request.user):
            raise PermissionDenied("The console is for cluster administrators.")
        return view(request, *args, **kwargs)

    return wrapper
