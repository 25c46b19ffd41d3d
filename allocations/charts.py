"""Plotly figures of the capacity history, built from plain rows (STYLE.md: no ORM here).

Every builder returns a :class:`Chart`: the table it plots (``columns`` and ``rows``, exactly
what the CSV download holds) and a Plotly figure built from that table and nothing else, so the
CSV of a chart is always its data. Figures are plain dicts in Plotly's JSON schema: building
``plotly.graph_objects.Figure`` objects validates every attribute and costs far more than the
query behind the chart (tests validate the dicts with it instead).

Time-series tables are "long": one row per (time, series, value). Times are ISO 8601 strings in
UTC; GPU values are average GPUs over the row's bucket (exact GPUs for minute samples).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Row = tuple[Any, ...]

# Preemption reasons of POLICY.md section 4, in a fixed order so colours stay put.
PREEMPTION_REASONS = ("in-team", "reclaim", "reclaim-while-borrowing", "fair-share")

# Wait-time histogram bins: (label, upper bound in seconds, exclusive); the last is open.
WAIT_BINS: tuple[tuple[str, float], ...] = (
    ("< 1 min", 60),
    ("1-5 min", 300),
    ("5-15 min", 900),
    ("15-60 min", 3600),
    ("1-4 h", 4 * 3600),
    ("4-12 h", 12 * 3600),
    ("12-24 h", 24 * 3600),
    ("> 1 day", float("inf")),
)

_LAYOUT: dict[str, Any] = {
    "margin": {"l": 50, "r": 20, "t": 40, "b": 40},
    "legend": {"orientation": "h", "y": -0.15},
    "hovermode": "x unified",
    "height": 360,
}


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart: its table (what the CSV holds) and the Plotly figure drawn from that table."""

    key: str
    title: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    figure: dict[str, Any] = field(repr=False)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows(self.rows)
        return buffer.getvalue()

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "figure": self.figure, "points": len(self.rows)}


def iso(at: datetime | str) -> str:
    """A UTC time as the tables write it (``2026-11-29T16:00:00Z``)."""
    if isinstance(at, str):
        return at
    text = at.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def gpus(value: float) -> float:
    """GPU values rounded for display: averages over a bucket keep two decimals."""
    return round(float(value), 2)


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    return {**_LAYOUT, "title": {"text": title}, **extra}


def _empty_note(rows: Sequence[Row]) -> list[dict[str, Any]]:
    if rows:
        return []
    return [
        {
            "text": "No data in this range",
            "showarrow": False,
            "xref": "paper",
            "yref": "paper",
            "x": 0.5,
            "y": 0.5,
        }
    ]


def _long_series(rows: Sequence[Row]) -> dict[str, tuple[list[Any], list[Any]]]:
    """(time, series, value) rows -> {series: ([times], [values])}, in first-seen order."""
    series: dict[str, tuple[list[Any], list[Any]]] = {}
    for at, name, value in rows:
        xs, ys = series.setdefault(name, ([], []))
        xs.append(at)
        ys.append(value)
    return series


def _line_traces(rows: Sequence[Row], style: Callable[[str], Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per series of a long table, each with the keys ``style`` gives its name."""
    return [
        {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys, **style(name)}
        for name, (xs, ys) in _long_series(rows).items()
    ]


def _gpus_over_time(key: str, title: str, rows: Sequence[Row], traces: list[dict[str, Any]]) -> Chart:
    """A chart of GPUs over time, from a long (time, series, GPUs) table."""
    figure = {
        "data": traces,
        "layout": _layout(title, yaxis={"title": {"text": "GPUs"}}, annotations=_empty_note(rows)),
    }
    return Chart(key, title, ("time", "series", "gpus"), tuple(rows), figure)


def _bars_by_team(
    key: str, title: str, columns: tuple[str, ...], rows: tuple[Row, ...], bars: tuple[str, str], unit: str
) -> Chart:
    """Two bars per team, side by side: ``rows`` are (team, first bar, second bar, ...), ``bars``
    name the two bars and ``unit`` their axis."""
    names = [r[0] for r in rows]
    figure = {
        "data": [
            {"type": "bar", "name": bars[0], "x": names, "y": [r[1] for r in rows]},
            {"type": "bar", "name": bars[1], "x": names, "y": [r[2] for r in rows]},
        ],
        "layout": _layout(
            title,
            barmode="group",
            hovermode="closest",
            yaxis={"title": {"text": unit}},
            annotations=_empty_note(rows),
        ),
    }
    return Chart(key, title, columns, rows, figure)


def capacity_chart(capacity: Iterable[Mapping[str, Any]], team_usage: Iterable[Mapping[str, Any]]) -> Chart:
    """Capacity, allocated (stacked by team) and idle GPUs over time.

    ``capacity``: rows with ``at``, ``capacity``, ``idle``; ``team_usage``: rows with ``at``,
    ``team``, ``used``, grouped by team. The teams' areas stack up to the allocated GPUs.
    """
    rows: list[Row] = []
    for point in capacity:
        rows.append((iso(point["at"]), "capacity", gpus(point["capacity"])))
        rows.append((iso(point["at"]), "idle", gpus(point["idle"])))
    # Teams stack in the order given (the selectors give the biggest users first).
    rows.extend((iso(p["at"]), f"team {p['team']}", gpus(p["used"])) for p in team_usage)
    traces: list[dict[str, Any]] = []
    for name, (xs, ys) in _long_series(rows).items():
        if name.startswith("team "):
            traces.append(
                {"type": "scatter", "mode": "lines", "name": name[5:], "x": xs, "y": ys, "stackgroup": "used"}
            )
        else:
            dash = "dash" if name == "idle" else "solid"
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": name,
                    "x": xs,
                    "y": ys,
                    "line": {"color": "#222" if name == "capacity" else "#999", "dash": dash, "width": 2},
                }
            )
    return _gpus_over_time("capacity", "Capacity, allocated by team, and idle GPUs", rows, traces)


def lending_chart(teams: Iterable[Mapping[str, Any]]) -> Chart:
    """GPU-hours each team borrowed from, and lent to, other teams over the range.

    ``teams``: rows with ``team``, ``borrowed_gpu_hours``, ``lent_gpu_hours``.
    """
    rows = tuple(
        (t["team"], gpus(t["borrowed_gpu_hours"]), gpus(t["lent_gpu_hours"]))
        for t in sorted(teams, key=lambda t: t["team"])
    )
    title = "Borrowed and lent GPU-hours by team"
    columns = ("team", "borrowed_gpu_hours", "lent_gpu_hours")
    return _bars_by_team("lending", title, columns, rows, ("borrowed", "lent"), "GPU-hours")


def idle_while_waiting_chart(points: Iterable[Mapping[str, Any]]) -> Chart:
    """GPUs left idle while jobs waited: per instance type and minute min(idle, pending demand),
    summed over types (computed at sampling time: averages of idle and demand would overstate it).

    ``points``: rows with ``at``, ``idle``, ``pending``, ``idle_while_waiting``.
    """
    rows: list[Row] = []
    for p in points:
        at = iso(p["at"])
        rows.append((at, "idle while jobs waited", gpus(p["idle_while_waiting"])))
        rows.append((at, "pending demand", gpus(p["pending"])))
        rows.append((at, "idle", gpus(p["idle"])))
    rows.sort(key=lambda r: ("idle while jobs waited", "pending demand", "idle").index(r[1]))
    traces = _line_traces(
        rows,
        lambda name: (
            {"fill": "tozeroy", "line": {"color": "#d62728"}}
            if name == "idle while jobs waited"
            else {"line": {"dash": "dot"}}
        ),
    )
    return _gpus_over_time("idle_while_waiting", "GPUs left idle while jobs waited", rows, traces)


def preemptions_chart(points: Iterable[Mapping[str, Any]], *, key: str = "preemptions") -> Chart:
    """Preemptions over time, stacked by reason (POLICY.md section 4).

    ``points``: rows with ``at``, ``reason``, ``preemptions`` (a count per bucket).
    """
    order = {reason: i for i, reason in enumerate(PREEMPTION_REASONS)}
    rows = sorted(
        ((iso(p["at"]), p["reason"], int(p["preemptions"])) for p in points),
        key=lambda r: (order.get(r[1], len(order)), r[1], r[0]),
    )
    traces = [
        {"type": "bar", "name": name, "x": xs, "y": ys} for name, (xs, ys) in _long_series(rows).items()
    ]
    title = "Preemptions by reason"
    figure = {
        "data": traces,
        "layout": _layout(
            title, barmode="stack", yaxis={"title": {"text": "preemptions"}}, annotations=_empty_note(rows)
        ),
    }
    return Chart(key, title, ("time", "reason", "preemptions"), tuple(rows), figure)


# How long victims had run (``services.history.RAN_FIELDS``, then those not known), in order.
VICTIM_RUNS = ("under 10 min", "10-60 min", "over 1 h", "unknown")


def lost_work_chart(points: Iterable[Mapping[str, Any]], *, key: str = "lost_work") -> Chart:
    """GPU-hours of work thrown away by preemptions per bucket (docs/preemption.md section 2).

    ``points``: ``selectors.history.preemption_points``' cost rows (``at``, ``lost_gpu_hours``,
    one row per victim run-time band, each with its point's lost GPU-hours): one bar a point.
    """
    lost: dict[str, float] = {}
    for p in points:
        lost[iso(p["at"])] = float(p["lost_gpu_hours"])
    rows = tuple((at, round(hours, 3)) for at, hours in sorted(lost.items()))
    title = "GPU-hours lost to preemption"
    figure = {
        "data": [
            {"type": "bar", "name": "GPU-hours lost", "x": [r[0] for r in rows], "y": [r[1] for r in rows]}
        ],
        "layout": _layout(title, yaxis={"title": {"text": "GPU-hours"}}, annotations=_empty_note(rows)),
    }
    return Chart(key, title, ("time", "lost_gpu_hours"), rows, figure)


def victim_runtime_chart(points: Iterable[Mapping[str, Any]], *, key: str = "victim_runtime") -> Chart:
    """Preemptions over time, stacked by how long the victim had run since its last start: a
    tall "under 10 min" bar is churn that a minimum runtime (docs/preemption.md section 1)
    would have prevented.

    ``points``: rows with ``at``, ``ran`` (a ``VICTIM_RUNS`` band) and ``preemptions``; bands
    with none are left out.
    """
    order = {band: i for i, band in enumerate(VICTIM_RUNS)}
    rows = sorted(
        ((iso(p["at"]), p["ran"], int(p["preemptions"])) for p in points if p["preemptions"]),
        key=lambda r: (order.get(r[1], len(order)), r[1], r[0]),
    )
    traces = [
        {"type": "bar", "name": name, "x": xs, "y": ys} for name, (xs, ys) in _long_series(rows).items()
    ]
    title = "Preemptions by how long the victim had run"
    figure = {
        "data": traces,
        "layout": _layout(
            title, barmode="stack", yaxis={"title": {"text": "preemptions"}}, annotations=_empty_note(rows)
        ),
    }
    return Chart(key, title, ("time", "victim_ran", "preemptions"), tuple(rows), figure)


def fair_share_chart(teams: Iterable[Mapping[str, Any]]) -> Chart:
    """Each team's share of all borrowed GPU-hours beside its share of the fair-share weights.

    ``teams``: rows with ``team``, ``borrowed_gpu_hours``, ``weight``. Under fair share
    (POLICY.md section 3) a team's share of borrowed capacity tends towards its weight's share
    when every team wants to borrow; a bar far above its weight shows who took idle capacity.
    """
    teams = sorted(teams, key=lambda t: t["team"])
    total_borrowed = sum(float(t["borrowed_gpu_hours"]) for t in teams)
    total_weight = sum(int(t["weight"]) for t in teams)
    rows = tuple(
        (
            t["team"],
            gpus(100 * float(t["borrowed_gpu_hours"]) / total_borrowed if total_borrowed else 0),
            gpus(100 * int(t["weight"]) / total_weight if total_weight else 0),
            gpus(t["borrowed_gpu_hours"]),
            int(t["weight"]),
        )
        for t in teams
    )
    title = "Share of borrowed capacity beside fair-share weight"
    columns = ("team", "borrowed_share_percent", "weight_share_percent", "borrowed_gpu_hours", "weight")
    bars = ("share of borrowed GPU-hours (%)", "share of weight (%)")
    return _bars_by_team("fair_share", title, columns, rows, bars, "%")


def team_usage_chart(points: Iterable[Mapping[str, Any]]) -> Chart:
    """One team's quota, used, borrowed and lent GPUs over time.

    ``points``: rows with ``at``, ``quota``, ``used``, ``borrowed``, ``lent``.
    """
    names = ("quota", "used", "borrowed", "lent")
    points = points_list(points)
    rows: list[Row] = [(iso(p["at"]), name, gpus(p[name])) for name in names for p in points]
    styles = {"quota": {"line": {"color": "#222", "dash": "dash"}}, "used": {"fill": "tozeroy"}}
    traces = _line_traces(rows, lambda name: styles.get(name, {}))
    return _gpus_over_time("usage", "Quota, used, borrowed and lent GPUs", rows, traces)


def pending_chart(points: Iterable[Mapping[str, Any]]) -> Chart:
    """One team's pending demand (GPUs) and its running and pending job counts.

    ``points``: rows with ``at``, ``pending_gpus``, ``running_jobs``, ``pending_jobs``.
    """
    names = ("pending_gpus", "running_jobs", "pending_jobs")
    points = points_list(points)
    rows: list[Row] = [(iso(p["at"]), name, gpus(p[name])) for name in names for p in points]
    traces = _line_traces(
        rows,
        lambda name: (
            {"fill": "tozeroy"} if name == "pending_gpus" else {"yaxis": "y2", "line": {"dash": "dot"}}
        ),
    )
    title = "Pending demand and jobs"
    figure = {
        "data": traces,
        "layout": _layout(
            title,
            yaxis={"title": {"text": "GPUs pending"}},
            yaxis2={"title": {"text": "jobs"}, "overlaying": "y", "side": "right", "rangemode": "tozero"},
            margin={**_LAYOUT["margin"], "r": 60},
            annotations=_empty_note(rows),
        ),
    }
    return Chart("pending", title, ("time", "series", "value"), tuple(rows), figure)


def wait_time_chart(bins: Iterable[Mapping[str, Any]]) -> Chart:
    """Distribution of wait times (start minus submission) of the jobs started in the range.

    ``bins``: rows with ``wait`` (a label of :data:`WAIT_BINS`) and ``jobs``; missing bins are 0.
    """
    counts = {b["wait"]: int(b["jobs"]) for b in bins}
    unknown = set(counts) - {label for label, _ in WAIT_BINS}
    if unknown:
        raise ValueError(f"wait: unknown bin(s) {sorted(unknown)!r}")
    rows = tuple((label, counts.get(label, 0)) for label, _ in WAIT_BINS)
    title = "Wait time of started jobs"
    figure = {
        "data": [{"type": "bar", "name": "jobs", "x": [r[0] for r in rows], "y": [r[1] for r in rows]}],
        "layout": _layout(
            title,
            hovermode="closest",
            xaxis={"title": {"text": "wait (start - submission)"}},
            yaxis={"title": {"text": "jobs"}},
            annotations=_empty_note([r for r in rows if r[1]]),
        ),
    }
    return Chart("wait_time", title, ("wait", "jobs"), rows, figure)


def wait_bin(seconds: float) -> str:
    """The label of the :data:`WAIT_BINS` bin that a wait of ``seconds`` falls in."""
    for label, upper in WAIT_BINS:
        if seconds < upper:
            return label
    return WAIT_BINS[-1][0]


def points_list(points: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Materialise an iterable of points once (builders walk it once per series)."""
    return points if isinstance(points, list) else list(points)
