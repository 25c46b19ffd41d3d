"""Chart builders: plain rows in, Plotly figures out, no database (pytest-django would refuse
any query here). Every figure must be valid Plotly and plot exactly its CSV's rows."""

from __future__ import annotations

import csv
import io
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import plotly.graph_objects as go
import pytest

from allocations import charts
from allocations.charts import Chart

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
TIMES = [T0 + timedelta(minutes=i) for i in range(3)]


def _csv_rows(chart: Chart) -> list[list[str]]:
    return list(csv.reader(io.StringIO(chart.to_csv())))


def _long_traces(chart: Chart) -> dict[str, list[tuple[Any, Any]]]:
    return {t["name"]: list(zip(t["x"], t["y"], strict=True)) for t in chart.figure["data"]}


def _assert_long_table_is_the_figure(chart: Chart, rename: dict[str, str] | None = None) -> None:
    """(time, series, value) rows, grouped by series, are exactly the traces' points."""
    rename = rename or {}
    from_rows: dict[str, list[tuple[Any, Any]]] = {}
    for at, series, value in chart.rows:
        from_rows.setdefault(rename.get(series, series), []).append((at, value))
    assert from_rows == _long_traces(chart)
    header, *body = _csv_rows(chart)
    assert tuple(header) == chart.columns
    assert body == [[str(v) for v in row] for row in chart.rows]


def _assert_valid_plotly(chart: Chart) -> None:
    go.Figure(chart.figure)  # raises on any attribute Plotly does not know


def test_capacity_chart_stacks_each_team_under_capacity_and_idle() -> None:
    capacity = [{"at": at, "capacity": 16, "idle": 16 - 2 * i} for i, at in enumerate(TIMES)]
    usage = [
        {"at": at, "team": team, "used": i} for team in ("team-a", "team-b") for i, at in enumerate(TIMES)
    ]
    chart = charts.capacity_chart(capacity, usage)
    _assert_valid_plotly(chart)
    _assert_long_table_is_the_figure(chart, {"team team-a": "team-a", "team team-b": "team-b"})
    traces = {t["name"]: t for t in chart.figure["data"]}
    assert traces["team-a"]["stackgroup"] == traces["team-b"]["stackgroup"] == "used"
    assert "stackgroup" not in traces["capacity"]
    assert traces["idle"]["y"] == [16, 14, 12]
    assert traces["capacity"]["x"][0] == "2026-11-02T10:00:00Z"


def test_idle_while_waiting_chart_plots_the_sampled_minimum_not_one_of_averages() -> None:
    points = [{"at": T0, "idle": 4, "pending": 6, "idle_while_waiting": 1.5}]
    chart = charts.idle_while_waiting_chart(points)
    _assert_valid_plotly(chart)
    _assert_long_table_is_the_figure(chart)
    assert _long_traces(chart)["idle while jobs waited"] == [("2026-11-02T10:00:00Z", 1.5)]


def test_lending_and_fair_share_charts_are_one_bar_per_team() -> None:
    teams = [
        {"team": "team-b", "borrowed_gpu_hours": 30.0, "lent_gpu_hours": 0.0, "weight": 1},
        {"team": "team-a", "borrowed_gpu_hours": 10.0, "lent_gpu_hours": 40.0, "weight": 3},
    ]
    lending = charts.lending_chart(teams)
    _assert_valid_plotly(lending)
    assert lending.rows == (("team-a", 10.0, 40.0), ("team-b", 30.0, 0.0))
    borrowed, lent = lending.figure["data"]
    assert list(zip(borrowed["x"], borrowed["y"], lent["y"], strict=True)) == list(lending.rows)

    share = charts.fair_share_chart(teams)
    _assert_valid_plotly(share)
    # 10 of 40 borrowed GPU-hours is 25 %; weight 3 of 4 is 75 %.
    assert share.rows == (("team-a", 25.0, 75.0, 10.0, 3), ("team-b", 75.0, 25.0, 30.0, 1))
    bars = share.figure["data"]
    assert [r[1] for r in share.rows] == bars[0]["y"] and [r[2] for r in share.rows] == bars[1]["y"]
    assert _csv_rows(share)[1] == ["team-a", "25.0", "75.0", "10.0", "3"]


def test_borrowing_from_unallocated_capacity_has_a_bar_of_its_own() -> None:
    # Teams borrowed 800 GPU-hours and lent 0.4: the rest came from capacity in no quota.
    teams = [
        {"team": "team-a", "borrowed_gpu_hours": 500.0, "lent_gpu_hours": 0.4},
        {"team": "team-b", "borrowed_gpu_hours": 300.0, "lent_gpu_hours": 0.0},
    ]
    assert charts.unallocated_borrowed(teams) == pytest.approx(799.6)
    chart = charts.lending_chart(teams, charts.unallocated_borrowed(teams))
    _assert_valid_plotly(chart)
    assert chart.rows[-1] == ("unallocated capacity", 0.0, 799.6)
    _, lent = chart.figure["data"]
    assert lent["name"] == "lent" and lent["x"][-1] == "unallocated capacity" and lent["y"][-1] == 799.6
    assert _csv_rows(chart)[-1] == ["unallocated capacity", "0.0", "799.6"]
    # Nothing borrowed from it (or not known: a filtered set of teams): no bar.
    assert [r[0] for r in charts.lending_chart(teams).rows] == ["team-a", "team-b"]
    assert len(charts.lending_chart(teams[:1], 0.0).rows) == 1


def test_fair_share_of_nothing_borrowed_is_zero_not_a_division_error() -> None:
    chart = charts.fair_share_chart([{"team": "a", "borrowed_gpu_hours": 0, "weight": 0}])
    assert chart.rows == (("a", 0.0, 0.0, 0.0, 0),)


def test_preemptions_chart_stacks_reasons_in_policy_order() -> None:
    points = [
        {"at": TIMES[1], "reason": "fair-share", "preemptions": 1},
        {"at": TIMES[0], "reason": "reclaim", "preemptions": 2},
        {"at": TIMES[0], "reason": "in-team", "preemptions": 3},
    ]
    chart = charts.preemptions_chart(points)
    _assert_valid_plotly(chart)
    _assert_long_table_is_the_figure(chart)
    assert [t["name"] for t in chart.figure["data"]] == ["in-team", "reclaim", "fair-share"]
    assert chart.figure["layout"]["barmode"] == "stack"


def test_lost_work_and_victim_runtime_charts_plot_the_cost_rows() -> None:
    """The cost rows of ``preemption_points``: one per band and point, each carrying the
    point's lost GPU-hours."""
    points = [
        {"at": at, "lost_gpu_hours": lost, "ran": band, "preemptions": n}
        for at, lost in ((TIMES[0], 1.5), (TIMES[2], 0.25))
        for band, n in (("under 10 min", 2), ("10-60 min", 0), ("over 1 h", 1), ("unknown", 0))
    ]
    lost = charts.lost_work_chart(points)
    _assert_valid_plotly(lost)
    assert lost.rows == ((charts.iso(TIMES[0]), 1.5), (charts.iso(TIMES[2]), 0.25))
    assert lost.figure["data"][0]["y"] == [1.5, 0.25]
    ran = charts.victim_runtime_chart(reversed(points))
    _assert_valid_plotly(ran)
    _assert_long_table_is_the_figure(ran)
    assert [t["name"] for t in ran.figure["data"]] == ["under 10 min", "over 1 h"]  # none: left out
    assert ran.figure["layout"]["barmode"] == "stack"
    empty = charts.victim_runtime_chart([])
    assert empty.figure["layout"]["annotations"][0]["text"] == "No data in this range"


def test_team_usage_and_pending_charts_plot_every_series() -> None:
    points = [
        {"at": at, "quota": 8, "used": 10, "borrowed": 2, "lent": 0, "pending_gpus": 4,
         "running_jobs": 2, "pending_jobs": 1}
        for at in TIMES
    ]  # fmt: skip
    usage = charts.team_usage_chart(iter(points))  # any iterable, walked once
    _assert_valid_plotly(usage)
    _assert_long_table_is_the_figure(usage)
    assert [t["name"] for t in usage.figure["data"]] == ["quota", "used", "borrowed", "lent"]
    pending = charts.pending_chart(points)
    _assert_valid_plotly(pending)
    _assert_long_table_is_the_figure(pending)
    assert len(pending.rows) == 9
    assert [t["name"] for t in pending.figure["data"]] == [
        "GPUs asked by pending jobs",
        "running jobs",
        "pending jobs",
    ]


def _every_chart() -> list[Chart]:
    points = [
        {"at": at, "quota": 8, "used": 10, "borrowed": 2, "lent": 0, "pending_gpus": 4,
         "running_jobs": 2, "pending_jobs": 1, "idle": 3, "pending": 4, "idle_while_waiting": 1.5}
        for at in TIMES
    ]  # fmt: skip
    teams = [{"team": "team-a", "borrowed_gpu_hours": 800.0, "lent_gpu_hours": 0.4, "weight": 1}]
    return [
        charts.capacity_chart(
            [{"at": at, "capacity": 1408, "idle": 37} for at in TIMES],
            [{"at": at, "team": "team-a", "used": 1371} for at in TIMES],
        ),
        charts.lending_chart(teams),
        charts.idle_while_waiting_chart(points),
        charts.preemptions_chart([{"at": T0, "reason": "reclaim", "preemptions": 3}]),
        charts.fair_share_chart(teams),
        charts.team_usage_chart(points),
        charts.pending_chart(points),
        charts.wait_time_chart([{"wait": "1-5 min", "jobs": 7}]),
    ]


def test_legends_are_words_not_identifiers() -> None:
    for chart in _every_chart():
        for trace in chart.figure["data"]:
            assert "_" not in trace["name"], (chart.key, trace["name"])


def test_value_axes_tick_at_round_numbers_from_zero_and_make_room_for_their_labels() -> None:
    for chart in _every_chart():
        layout = chart.figure["layout"]
        assert layout["xaxis"]["automargin"] and layout["yaxis"]["automargin"], chart.key
        for name in ("yaxis", "yaxis2"):
            if name not in layout:
                continue
            axis = layout[name]
            assert axis["tick0"] == 0 and axis["rangemode"] == "tozero", (chart.key, name)
            mantissa = axis["dtick"] / 10 ** math.floor(math.log10(axis["dtick"]))
            assert round(mantissa, 9) in {1, 2, 5}, (chart.key, name, axis["dtick"])


@pytest.mark.parametrize(
    ("largest", "whole", "step"),
    [(1408, False, 500), (1371, False, 500), (37, False, 10), (0.4, False, 0.1), (3, True, 1), (0, True, 1)],
)
def test_nice_step(largest: float, whole: bool, step: float) -> None:
    assert charts.nice_step(largest, whole=whole) == step


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (42, "42 s"), (300, "5 min"), (303, "5 min 3 s"), (101160, "28 h 6 min"), (7200, "2 h")],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert charts.human_duration(seconds) == text


def test_wait_time_chart_has_every_bin_in_order() -> None:
    chart = charts.wait_time_chart([{"wait": "1-5 min", "jobs": 3}, {"wait": "> 1 day", "jobs": 1}])
    _assert_valid_plotly(chart)
    assert [label for label, _ in chart.rows] == [label for label, _ in charts.WAIT_BINS]
    (bars,) = chart.figure["data"]
    assert list(zip(bars["x"], bars["y"], strict=True)) == list(chart.rows)
    assert dict(chart.rows)["1-5 min"] == 3


def test_wait_time_chart_refuses_a_bin_it_does_not_know() -> None:
    with pytest.raises(ValueError, match=r"wait: unknown bin\(s\) \['2 weeks'\]"):
        charts.wait_time_chart([{"wait": "2 weeks", "jobs": 1}])


@pytest.mark.parametrize(
    ("seconds", "label"),
    [(0, "< 1 min"), (59.9, "< 1 min"), (60, "1-5 min"), (3599, "15-60 min"), (86400, "> 1 day")],
)
def test_wait_bin_edges(seconds: float, label: str) -> None:
    assert charts.wait_bin(seconds) == label


def test_an_empty_chart_says_so_and_is_still_valid() -> None:
    chart = charts.capacity_chart([], [])
    _assert_valid_plotly(chart)
    assert chart.rows == ()
    assert chart.figure["layout"]["annotations"][0]["text"] == "No data in this range"
    assert chart.to_csv() == "time,series,gpus\n"


def test_json_of_a_chart_carries_its_figure_and_point_count() -> None:
    chart = charts.preemptions_chart([{"at": T0, "reason": "reclaim", "preemptions": 2}])
    assert chart.to_json() == {
        "key": "preemptions",
        "title": "Preemptions by reason",
        "figure": chart.figure,
        "points": 1,
    }
