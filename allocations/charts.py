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
import math
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
    # Axes push the margins out as far as their tick labels and titles need (automargin), so
    # no label is cut off; the legend sits under the x axis, clear of its labels.
    "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
    "legend": {"orientation": "h", "y": -0.2, "yanchor": "top"},
    "hovermode": "x unified",
    "height": 380,
}
_AXES = ("xaxis", "yaxis", "yaxis2")

# The legend's words for the series whose table names are identifiers (the CSV keeps those).
SERIES_LABELS = {
    "pending_gpus": "GPUs asked by pending jobs",
    "running_jobs": "running jobs",
    "pending_jobs": "pending jobs",
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
    layout = {**_LAYOUT, "title": {"text": title}, **extra}
    for axis in _AXES:
        if axis in layout or axis != "yaxis2":
            layout[axis] = {"automargin": True, **layout.get(axis, {})}
    return layout


def nice_step(largest: float, ticks: int = 5, *, whole: bool = False) -> float:
    """A tick step of 1, 2 or 5 times a power of ten that cuts 0..``largest`` into about
    ``ticks`` steps (``whole``: at least 1, for counts of jobs or preemptions)."""
    if largest <= 0:
        return 1
    raw = largest / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = float(f"{step:.12g}")  # 0.30000000000000004 -> 0.3
    return max(1, step) if whole else step


def value_axis(title: str, values: Iterable[float], *, whole: bool = False) -> dict[str, Any]:
    """A value axis from 0 with ticks at round numbers (1, 2 or 5 times a power of ten)."""
    largest = max((float(v) for v in values), default=0.0)
    return {
        "title": {"text": title},
        "rangemode": "tozero",
        "tick0": 0,
        "dtick": nice_step(largest, whole=whole),
        "automargin": True,
    }


def human_duration(seconds: float | None) -> str:
    """A duration as people say it: ``42 s``, ``5 min 3 s``, ``28 h 6 min``."""
    total = round(float(seconds or 0))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def duration_unit(largest_seconds: float) -> tuple[str, float]:
    """The unit an axis of durations up to ``largest_seconds`` reads best in: (name, seconds)."""
    if largest_seconds >= 2 * 3600:
        return "hours", 3600.0
    if largest_seconds >= 120:
        return "minutes", 60.0
    return "seconds", 1.0


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
        "layout": _layout(
            title, yaxis=value_axis("GPUs", _stacked_top(traces)), annotations=_empty_note(rows)
        ),
    }
    return Chart(key, title, ("time", "series", "gpus"), tuple(rows), figure)


def _stacked_top(traces: Sequence[Mapping[str, Any]]) -> list[float]:
    """The largest values the traces reach, a stack group's traces added up at each x."""
    stacks: dict[tuple[str, Any], float] = {}
    tops: list[float] = []
    for trace in traces:
        group = trace.get("stackgroup")
        for x, y in zip(trace["x"], trace["y"], strict=True):
            if group:
                stacks[(group, x)] = stacks.get((group, x), 0.0) + float(y)
            else:
                tops.append(float(y))
    return tops + list(stacks.values())


def _bars_by_team(
    key: str, title: str, columns: tuple[str, ...], rows: tuple[Row, ...], bars: tuple[str, str], unit: str
) -> Chart:
    """Two bars per team, side by side: ``rows`` are (team, first bar, second bar, ...), ``bars``
    name the two bars and ``unit`` their axis."""
    names = [r[0] for r in rows]
    figure = {
        "data": [
            {
                "type": "bar",
                "name": SERIES_LABELS.get(bars[0], bars[0]),
                "x": names,
                "y": [r[1] for r in rows],
            },
            {
                "type": "bar",
                "name": SERIES_LABELS.get(bars[1], bars[1]),
                "x": names,
                "y": [r[2] for r in rows],
            },
        ],
        "layout": _layout(
            title,
            barmode="group",
            hovermode="closest",
            yaxis=value_axis(unit, [v for r in rows for v in r[1:3]]),
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


# The lending chart's bar for capacity in no team's quota: it "lends" what teams borrowed of it.
UNALLOCATED = "unallocated capacity"


def unallocated_borrowed(teams: Iterable[Mapping[str, Any]]) -> float:
    """GPU-hours borrowed from capacity in no team's quota, from the rows of *every* team:
    what was borrowed is drawn from unallocated capacity first, then from lent quota, so
    ``sum(lent) + unallocated used = sum(borrowed)`` (docs/simulation.md, "Lent")."""
    rows = list(teams)
    borrowed = sum(float(t["borrowed_gpu_hours"]) for t in rows)
    lent = sum(float(t["lent_gpu_hours"]) for t in rows)
    return max(0.0, borrowed - lent)


def lending_chart(teams: Iterable[Mapping[str, Any]], unallocated_gpu_hours: float | None = None) -> Chart:
    """GPU-hours each team borrowed, and lent to other teams, over the range; and, given
    ``unallocated_gpu_hours`` (see :func:`unallocated_borrowed`), a bar for the capacity in no
    team's quota that was borrowed, so that teams borrowing far more than any team lent reads
    as what it is rather than as a contradiction.

    ``teams``: rows with ``team``, ``borrowed_gpu_hours``, ``lent_gpu_hours``.
    """
    rows = tuple(
        (t["team"], gpus(t["borrowed_gpu_hours"]), gpus(t["lent_gpu_hours"]))
        for t in sorted(teams, key=lambda t: t["team"])
    )
    if unallocated_gpu_hours is not None and gpus(unallocated_gpu_hours) > 0:
        rows += ((UNALLOCATED, 0.0, gpus(unallocated_gpu_hours)),)
    title = "Borrowed and lent GPU-hours by team, and unallocated capacity borrowed"
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
            title,
            barmode="stack",
            yaxis=value_axis("preemptions", _stacked_counts(rows), whole=True),
            annotations=_empty_note(rows),
        ),
    }
    return Chart(key, title, ("time", "reason", "preemptions"), tuple(rows), figure)


def _stacked_counts(rows: Sequence[Row]) -> list[float]:
    """The height of each stacked bar of a long (time, series, count) table."""
    totals: dict[Any, float] = {}
    for at, _, value in rows:
        totals[at] = totals.get(at, 0.0) + float(value)
    return list(totals.values())


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
    # The table's series are the legend's words: the CSV is the chart's data, as drawn.
    rows: list[Row] = [(iso(p["at"]), SERIES_LABELS[name], gpus(p[name])) for name in names for p in points]
    gpus_pending = SERIES_LABELS["pending_gpus"]
    traces = _line_traces(
        rows,
        lambda name: (
            {"fill": "tozeroy"} if name == gpus_pending else {"yaxis": "y2", "line": {"dash": "dot"}}
        ),
    )
    title = "Pending demand and jobs"
    figure = {
        "data": traces,
        "layout": _layout(
            title,
            yaxis=value_axis("GPUs pending", [r[2] for r in rows if r[1] == gpus_pending]),
            yaxis2={
                **value_axis("jobs", [r[2] for r in rows if r[1] != gpus_pending], whole=True),
                "overlaying": "y",
                "side": "right",
            },
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
            yaxis=value_axis("jobs", [r[1] for r in rows], whole=True),
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
