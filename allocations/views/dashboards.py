"""Capacity dashboards: the cluster (cluster admins) and each team (its members, and admins).

Each dashboard has a page (figures embedded, so it draws without a second request), a JSON data
endpoint that the page polls for live ranges and calls when the filters change, and a CSV per
chart holding exactly the rows that chart plots. Query parameters: ``range`` (see
``selectors.history.RANGES``), ``instance_type`` (a name) and, on the cluster, ``team``
(names, repeatable). A bad parameter gets a 400 that names it and its value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import plotly
from django.contrib.auth.decorators import login_required
from django.core.serializers.json import DjangoJSONEncoder
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from allocations import charts
from allocations.access import cluster_admin_required, get_visible_or_404, is_cluster_admin, visible_teams
from allocations.charts import Chart
from allocations.models import InstanceType, Team
from allocations.selectors import history
from allocations.selectors.fairness import team_borrowed_lately_now
from allocations.selectors.history import RANGES, Window

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class FilterError(ValueError):
    """Bad query parameters: ``errors`` maps each parameter to what is wrong with its value."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class Filters:
    window: Window
    instance_types: list[InstanceType]  # every type, for the picker
    instance_type: InstanceType | None
    teams: list[Team]  # the teams chosen (cluster dashboard); empty = all

    @property
    def instance_type_ids(self) -> list[int] | None:
        return [self.instance_type.pk] if self.instance_type else None

    @property
    def team_ids(self) -> list[int] | None:
        return [t.pk for t in self.teams] or None

    def query(self) -> dict[str, Any]:
        """The parameters as the page's links repeat them."""
        params: dict[str, Any] = {"range": self.window.key}
        if self.instance_type:
            params["instance_type"] = self.instance_type.name
        if self.teams:
            params["team"] = [t.name for t in self.teams]
        return params


def parse_filters(request: HttpRequest, *, team_choices: Sequence[Team] = ()) -> Filters:
    """The dashboard's filters from the query string; FilterError names every bad one."""
    errors: dict[str, str] = {}
    key = request.GET.get("range") or history.DEFAULT_RANGE
    window = None
    try:
        window = history.window_for(key, timezone.now())
    except ValueError as exc:
        errors["range"] = str(exc)
    instance_types = list(InstanceType.objects.order_by("name"))
    instance_type = None
    type_name = request.GET.get("instance_type") or ""
    if type_name:
        instance_type = next((t for t in instance_types if t.name == type_name), None)
        if instance_type is None:
            errors["instance_type"] = f"instance_type: unknown instance type {type_name!r}"
    chosen: list[Team] = []
    by_name = {t.name: t for t in team_choices}
    for name in request.GET.getlist("team"):
        if not name:
            continue
        if name not in by_name:
            errors["team"] = f"team: unknown team {name!r}"
        else:
            chosen.append(by_name[name])
    if errors or window is None:
        raise FilterError(errors)
    return Filters(window, instance_types, instance_type, chosen)


# --- What each dashboard shows -------------------------------------------------------------
def cluster_charts(filters: Filters) -> list[Chart]:
    """The cluster dashboard's charts (five queries, whatever the range)."""
    window, type_ids, team_ids = filters.window, filters.instance_type_ids, filters.team_ids
    capacity = history.capacity_points(window, type_ids)
    totals = history.team_totals(window, type_ids, team_ids)
    usage = history.stacked_usage(window, totals, capacity, type_ids, team_ids)
    preemptions, costs = history.preemption_points(window, capacity, type_ids, team_ids)
    return [
        charts.capacity_chart(capacity, usage),
        charts.idle_while_waiting_chart(capacity),
        # Borrowing from unallocated capacity can be told apart only over every team.
        charts.lending_chart(totals, None if team_ids else charts.unallocated_borrowed(totals)),
        charts.fair_share_chart(totals),
        charts.preemptions_chart(preemptions),
        charts.lost_work_chart(costs),
        charts.victim_runtime_chart(costs),
    ]


def team_charts(team: Team, filters: Filters) -> list[Chart]:
    """One team's charts (three queries, whatever the range)."""
    window, type_ids = filters.window, filters.instance_type_ids
    samples = history.sample_counts(window)
    points, preemptions, costs = history.team_points(window, team.pk, samples, type_ids)
    return [
        charts.team_usage_chart(points),
        charts.pending_chart(points),
        charts.wait_time_chart(history.wait_time_bins(window, team.pk, type_ids)),
        charts.preemptions_chart(preemptions),
        charts.lost_work_chart(costs),
        charts.victim_runtime_chart(costs),
    ]


# --- Responses -----------------------------------------------------------------------------
def _bad_filters(request: HttpRequest, exc: FilterError, kind: str) -> HttpResponse:
    if kind == "json":
        return JsonResponse({"errors": exc.errors}, status=400)
    if kind == "csv":
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    return render(request, "dashboards/bad_filters.html", {"errors": exc.errors}, status=400)


def _data(filters: Filters, built: list[Chart]) -> dict[str, Any]:
    return {"window": filters.window.describe(), "charts": [c.to_json() for c in built]}


def _csv(built: list[Chart], key: str, filename: str) -> HttpResponse:
    chart = next((c for c in built if c.key == key), None)
    if chart is None:
        raise Http404(f"No chart {key!r}; charts: {', '.join(c.key for c in built)}")
    response = HttpResponse(chart.to_csv(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}-{key}.csv"'
    return response


def _dashboard(
    request: HttpRequest,
    fmt: str,
    chart: str,
    charts_for: Callable[[Filters], list[Chart]],
    *,
    name: str,
    template: str,
    data_url: str,
    csv_url: Callable[[str], str],
    team_choices: Sequence[Team] = (),
    **context: Any,
) -> HttpResponse:
    """A dashboard in the format asked for: its page (``template``), its data as JSON or one
    chart's CSV (``name``: the file's, before the range). Bad filters answer 400 in that format;
    ``team_choices``: the teams its filter offers (none: no team filter)."""
    try:
        filters = parse_filters(request, team_choices=team_choices)
    except FilterError as exc:
        return _bad_filters(request, exc, fmt)
    built = charts_for(filters)
    if fmt == "json":
        return JsonResponse(_data(filters, built), encoder=DjangoJSONEncoder)
    if fmt == "csv":
        return _csv(built, chart, f"{name}-{filters.window.key}")
    return render(
        request,
        template,
        {
            "filters": filters,
            "ranges": [(key, label) for key, (label, _) in RANGES.items()],
            "charts": [(c, csv_url(c.key)) for c in built],
            "data": _data(filters, built),
            "data_url": data_url,
            "query_string": urlencode(filters.query(), doseq=True),
            "plotly_url": plotly_url(),
            "team_choices": team_choices,
            **context,
        },
    )


def plotly_url() -> str:
    """The URL of ``plotly_js``, carrying the package's version so that browsers keep it."""
    return reverse("allocations:plotly_js") + f"?v={plotly.__version__}"


@cluster_admin_required
@require_GET
def cluster_dashboard(request: HttpRequest, fmt: str = "html", chart: str = "") -> HttpResponse:
    """The cluster's capacity, usage by team, lending, fair share, preemptions and what they
    cost (GPU-hours lost, victims by how long they had run)."""
    return _dashboard(
        request,
        fmt,
        chart,
        cluster_charts,
        name="cluster",
        template="dashboards/cluster.html",
        data_url=reverse("allocations:dashboard_cluster_data"),
        csv_url=lambda key: reverse("allocations:dashboard_cluster_csv", kwargs={"chart": key}),
        team_choices=list(Team.objects.order_by("name")),
    )


@login_required
@require_GET
def team_dashboard(request: HttpRequest, team: str, fmt: str = "html", chart: str = "") -> HttpResponse:
    """One team's quota and usage, pending demand, wait times, preemptions and what they cost:
    its members (any role) and cluster admins; anyone else gets 404."""
    team_obj = get_visible_or_404(request.user, Team.objects.all(), name=team)
    return _dashboard(
        request,
        fmt,
        chart,
        lambda filters: team_charts(team_obj, filters),
        name=team_obj.name,
        template="dashboards/team.html",
        data_url=reverse("allocations:dashboard_team_data", kwargs={"team": team_obj.name}),
        csv_url=lambda key: reverse(
            "allocations:dashboard_team_csv", kwargs={"team": team_obj.name, "chart": key}
        ),
        team=team_obj,
        borrowed_lately=team_borrowed_lately_now(team_obj.name, timezone.now()) if fmt == "html" else None,
    )


@login_required
@require_GET
def dashboard_index(request: HttpRequest) -> HttpResponse:
    """The dashboards this user may open: the cluster's (admins) and one per visible team."""
    return render(
        request,
        "dashboards/index.html",
        {
            "teams": visible_teams(request.user).order_by("name"),
            "show_cluster": is_cluster_admin(request.user),
        },
    )


@require_GET
def plotly_js(request: HttpRequest) -> FileResponse:
    """Plotly.js from the installed ``plotly`` package (no CDN: the console works offline).
    The URL carries the package's version, so browsers may keep it for a year."""
    response = FileResponse(PLOTLY_JS.open("rb"), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response


urlpatterns = [
    path("dashboards/", dashboard_index, name="dashboards"),
    path("dashboards/cluster/", cluster_dashboard, name="dashboard_cluster"),
    path("dashboards/cluster/data.json", cluster_dashboard, {"fmt": "json"}, name="dashboard_cluster_data"),
    path(
        "dashboards/cluster/<slug:chart>.csv", cluster_dashboard, {"fmt": "csv"}, name="dashboard_cluster_csv"
    ),
    path("dashboards/teams/<slug:team>/", team_dashboard, name="dashboard_team"),
    path(
        "dashboards/teams/<slug:team>/data.json", team_dashboard, {"fmt": "json"}, name="dashboard_team_data"
    ),
    path(
        "dashboards/teams/<slug:team>/<slug:chart>.csv",
        team_dashboard,
        {"fmt": "csv"},
        name="dashboard_team_csv",
    ),
    path("dashboards/plotly.min.js", plotly_js, name="plotly_js"),
]
