"""The charts of a weekly report: ``allocations.charts.Chart`` (a table and a Plotly figure drawn
from it), built from the report's dataclasses. No database here."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from allocations.charts import Chart, gpus, lending_chart

from .figures import ClusterReport, DailyRow, TeamReport, WeekUsage
from .weeks import Week

# Images in mail clients: a fixed size that reads on a phone and on a desktop.
WIDTH, HEIGHT = 640, 300
_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 20, "t": 40, "b": 60},
    "legend": {"orientation": "h", "y": -0.2},
    "width": WIDTH,
    "height": HEIGHT,
    "font": {"family": "Arial, Helvetica, sans-serif", "size": 12},
    "paper_bgcolor": "#ffffff",
    "plot_bgcolor": "#ffffff",
    "yaxis": {"title": {"text": "GPU-hours"}, "gridcolor": "#e5e5e5", "rangemode": "tozero"},
}
# The four ways a quota's GPU-hours went (POLICY.md section 2), with fixed colours.
SERIES = (
    ("used_within_quota", "used within quota", "#1f77b4"),
    ("borrowed", "borrowed", "#ff7f0e"),
    ("lent", "lent", "#2ca02c"),
    ("idle_quota", "idle quota", "#c7c7c7"),
)


def _bars(title: str, key: str, label: str, rows: list[tuple[str, str, float]]) -> Chart:
    """Stacked bars from (x, series, GPU-hours) rows."""
    traces = []
    for series, name, colour in SERIES:
        xs = [r[0] for r in rows if r[1] == series]
        ys = [r[2] for r in rows if r[1] == series]
        traces.append({"type": "bar", "name": name, "x": xs, "y": ys, "marker": {"color": colour}})
    figure = {"data": traces, "layout": {**_LAYOUT, "title": {"text": title}, "barmode": "stack"}}
    return Chart(key, title, (label, "series", "gpu_hours"), tuple(rows), figure)


def trend_chart(trend: Iterable[WeekUsage]) -> Chart:
    """GPU-hours per week over the trend's eight weeks: used within quota, borrowed, lent, idle."""
    rows = [(w.week, series, gpus(getattr(w.usage, series))) for w in trend for series, _, _ in SERIES]
    return _bars("GPU-hours per week (8 weeks)", "trend", "week", rows)


def daily_chart(daily: Iterable[DailyRow], week: Week) -> Chart:
    """GPU-hours per local day of the week (every day, zeros too), all instance types together."""
    sums: dict[tuple[str, str], float] = defaultdict(float)
    days = [day.strftime("%a %d %b") for day in week.days()]
    for row in daily:
        day = row.day.strftime("%a %d %b")
        for series, _, _ in SERIES:
            sums[(day, series)] += getattr(row.usage, series)
    rows = [(day, series, gpus(sums[(day, series)])) for day in days for series, _, _ in SERIES]
    return _bars("GPU-hours per day", "daily", "day", rows)


def capacity_trend_chart(report: ClusterReport) -> Chart:
    """The cluster's ready capacity and the GPU-hours idle while jobs waited, per week."""
    rows = tuple((week, gpus(capacity), gpus(idle)) for week, capacity, idle in report.trend_capacity)
    title = "Capacity and GPU-hours idle while jobs waited (8 weeks)"
    figure = {
        "data": [
            {"type": "bar", "name": "capacity", "x": [r[0] for r in rows], "y": [r[1] for r in rows],
             "marker": {"color": "#c7c7c7"}},
            {"type": "bar", "name": "idle while jobs waited", "x": [r[0] for r in rows],
             "y": [r[2] for r in rows], "marker": {"color": "#d62728"}},
        ],
        "layout": {**_LAYOUT, "title": {"text": title}, "barmode": "overlay"},
    }  # fmt: skip
    columns = ("week", "capacity_gpu_hours", "idle_while_waiting_gpu_hours")
    return Chart("capacity_trend", title, columns, rows, figure)


def team_charts(report: TeamReport) -> list[Chart]:
    return [trend_chart(report.trend), daily_chart(report.daily, report.week)]


def cluster_charts(report: ClusterReport) -> list[Chart]:
    """The cluster's trend, who lent and borrowed (the dashboards' chart), and capacity."""
    lending = lending_chart(
        (
            {"team": t.team, "borrowed_gpu_hours": t.usage.borrowed, "lent_gpu_hours": t.usage.lent}
            for t in report.teams
            if t.usage.borrowed or t.usage.lent
        ),
        report.borrowed_from_unallocated,
    )
    lending.figure["layout"].update(width=WIDTH, height=HEIGHT, paper_bgcolor="#ffffff")
    daily = [row for team in report.teams for row in team.daily]
    return [trend_chart(report.trend), daily_chart(daily, report.week), lending, capacity_trend_chart(report)]
