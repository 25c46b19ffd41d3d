"""Plotly figures comparing the replays of a what-if run (plain rows in, ``charts.Chart`` out:
each chart's CSV is exactly the table it draws)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from allocations.charts import Chart, Row, _layout, gpus, iso

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
    figure = {"data": traces, "layout": _layout(title, yaxis={"title": {"text": "GPUs (average)"}})}
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
        "layout": _layout(title, barmode="group", hovermode="closest", yaxis={"title": {"text": unit}}),
    }
    return Chart(key, title, ("team", "policy", "figure", "value"), tuple(rows), figure)


def run_charts(start: datetime, policies: Sequence[Mapping[str, Any]]) -> list[Chart]:
    """The run's charts, in CHART_KEYS order."""
    return [
        _over_time("running", "GPUs running over time", "running_gpus", start, policies),
        _over_time("waiting", "GPUs asked by waiting jobs over time", "waiting_gpus", start, policies),
        _per_team(
            "team_waits", "Mean wait per team (s)", [("wait_mean_s", "mean wait")], "seconds", policies
        ),
        _per_team(
            "lending",
            "Borrowed and lent GPU-hours per team",
            [("borrowed_gpu_hours", "borrowed"), ("lent_gpu_hours", "lent")],
            "GPU-hours",
            policies,
        ),
    ]
