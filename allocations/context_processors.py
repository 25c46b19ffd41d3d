"""Template context of every page: the product's navigation and the cluster's name and health."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from allocations.access import is_cluster_admin
from allocations.selectors.policy import get_cluster

# The console's pages, for cluster administrators.
CONSOLE_NAV = [
    ("allocations:home", "Capacity"),
    ("allocations:console_teams", "Teams"),
    ("allocations:priority_classes", "Priority classes"),
    ("allocations:policy", "Policy"),
    ("allocations:nodes", "Nodes"),
    ("allocations:instance_types", "Instance types"),
    ("allocations:console_jobs", "Jobs"),
    ("allocations:audit", "Audit"),
]
# Pages other surfaces add; a link shows only once its URL name exists.
STAFF_EXTRA_NAV = [
    ("allocations:cycles", "Cycles"),
    ("allocations:export", "Import/export"),
    ("allocations:whatif", "What-if"),
]
# Pages every signed-in user may open (they show each user what their roles allow).
MEMBER_NAV = [
    ("allocations:my_teams", "My teams"),
    ("allocations:dashboards", "Dashboards"),
    ("allocations:reports", "Reports"),
]


def _links(request: HttpRequest, entries: list[tuple[str, str]]) -> list[dict[str, Any]]:
    links = []
    for name, label in entries:
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue
        # "/" is active only on itself; any other section also covers its sub-pages.
        active = request.path == url if url == "/" else request.path.startswith(url)
        links.append({"url": url, "label": label, "active": active})
    return links


def console(request: HttpRequest) -> dict[str, Any]:
    """``nav`` (links the user may follow), ``cluster`` (name, backend health) for base.html."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav": [], "cluster": get_cluster()}
    entries = MEMBER_NAV
    if is_cluster_admin(user):
        entries = CONSOLE_NAV + STAFF_EXTRA_NAV + MEMBER_NAV
    return {"nav": _links(request, entries), "cluster": get_cluster()}
