"""Plotly figures comparing the replays of a what-if run (plain rows in, ``charts.Chart`` out:
each chart's CSV is exactly the table it draws)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from allocations.charts import (
    Chart,
    Row,
    _layout,
    duration_unit,
    gpus,
    human_duration,
    iso,
    value_axis,
)

CHART_KEYS = ("running", "waiting", "team_waits", "lending")


def _over_time(
    key: str, title: str, series: str, start: datetime, policies: Sequence[Mapping[str, Any]]
) -> Chart:
    """One line per policy: the average GPUs of ``series`` in each bucket of the window."""
    rows: list[Row] = []
    traces = []
    for policy in policies:
        bucket = timedelta(seconds=policy["series"]["bucket_s"])
        values = policy["series"][series]
        xs = [iso(start + i * bucket) for i in range(len(values))]
        rows += [(x, policy["name"], gpus(v)) for x, v in zip(xs, values, strict=True)]
        traces.append({"type": "scatter", "mode": "lines", "name": policy["name"], "x": xs, "y": values})
    figure = {
        "data": traces,
        "layout": _layout(title, yaxis=value_axis("GPUs (average)", [r[2] for r in rows])),
    }
    return Chart(key, title, ("time", "policy", "gpus"), tuple(rows), figure)


def _per_team(
    key: str, title: str, fields: Sequence[tuple[str, str]], unit: str, policies: Sequence[Mapping[str, Any]]
) -> Chart:
    """Grouped bars: one bar per policy (and field) for each team."""
    teams = sorted({name for p in policies for name in p["teams"]})
    rows: list[Row] = []
    traces = []
    for policy in policies:
        for field, label in fields:
            ys = [round(float(policy["teams"].get(t, {}).get(field, 0)), 3) for t in teams]
            name = policy["name"] if len(fields) == 1 else f"{label}, {policy['name']}"
            traces.append({"type": "bar", "name": name, "x": teams, "y": ys})
            rows += [(t, policy["name"], label, y) for t, y in zip(teams, ys, strict=True)]
    figure = {
        "data": traces,
        "layout": _layout(
            title, barmode="group", hovermode="closest", yaxis=value_axis(unit, [r[3] for r in rows])
        ),
    }
    return Chart(key, title, ("team", "policy", "figure", "value"), tuple(rows), figure)


def _team_waits(policies: Sequence[Mapping[str, Any]]) -> Chart:
    """Mean wait per team and policy, in the unit the longest wait reads best in (hours,
    minutes or seconds), each bar's hover saying it as people do (``28 h 6 min``)."""
    teams = sorted({name for p in policies for name in p["teams"]})
    waits = {
        p["name"]: [float(p["teams"].get(t, {}).get("wait_mean_s", 0) or 0) for t in teams] for p in policies
    }
    unit, seconds = duration_unit(max((w for ws in waits.values() for w in ws), default=0.0))
    title = "Mean wait per team"
    rows: list[Row] = []
    traces = []
    for name, values in waits.items():
        ys = [round(w / seconds, 3) for w in values]
        traces.append(
            {
                "type": "bar",
                "name": name,
                "x": teams,
                "y": ys,
                "text": [human_duration(w) for w in values],
                "textposition": "none",
                "hovertemplate": "%{x}: %{text}<extra>%{fullData.name}</extra>",
            }
        )
        rows += [(t, name, f"mean wait ({unit})", y) for t, y in zip(teams, ys, strict=True)]
    figure = {
        "data": traces,
        "layout": _layout(
            title,
            barmode="group",
            hovermode="closest",
            yaxis=value_axis(f"mean wait ({unit})", [r[3] for r in rows]),
        ),
    }
    return Chart("team_waits", title, ("team", "policy", "figure", "value"), tuple(rows), figure)


def run_charts(start: datetime, policies: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """The run's charts, in CHART_KEYS order."""
    return [
        _over_time("running", "GPUs running over time", "running_gpus", start, policies),
        _over_time("waiting", "GPUs asked by waiting jobs over time", "waiting_gpus", start, policies),
        _team_waits(policies),
        _per_team(
            "lending",
            "Borrowed and lent GPU-hours per team",
            [("borrowed_gpu_hours", "borrowed"), ("lent_gpu_hours", "lent")],
            "GPU-hours",
            policies,
        ),
    ]
