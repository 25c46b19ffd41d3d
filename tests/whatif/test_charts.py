"""The lab's charts from plain result rows (no database): one trace per policy, and the CSV is
the table the chart draws."""

from __future__ import annotations

from datetime import UTC, datetime

import plotly.graph_objects

from allocations.whatif import charts


def policy(name: str, running: list[float], wait: float) -> dict:
    return {
        "key": name,
        "name": name,
        "series": {"bucket_s": 3600, "running_gpus": running, "waiting_gpus": [0.0] * len(running)},
        "teams": {
            "team-a": {"wait_mean_s": wait, "borrowed_gpu_hours": 2.0, "lent_gpu_hours": 0.0},
            "team-b": {"wait_mean_s": 0, "borrowed_gpu_hours": 0.0, "lent_gpu_hours": 2.0},
        },
    }


def test_each_chart_has_one_trace_per_policy_and_its_table_as_csv():
    start = datetime(2026, 11, 1, tzinfo=UTC)
    built = charts.run_charts(start, [policy("live policy", [8, 4], 600), policy("lend more", [12, 8], 60)])
    assert [c.key for c in built] == list(charts.CHART_KEYS)
    running = built[0]
    assert [t["name"] for t in running.figure["data"]] == ["live policy", "lend more"]
    assert running.figure["data"][1]["x"] == ["2026-11-01T00:00:00Z", "2026-11-01T01:00:00Z"]
    assert running.to_csv().splitlines()[:3] == [
        "time,policy,gpus",
        "2026-11-01T00:00:00Z,live policy,8.0",
        "2026-11-01T01:00:00Z,live policy,4.0",
    ]
    waits = built[2]  # the longest wait is 10 minutes: the axis is in minutes, the hover in words
    assert [t["y"] for t in waits.figure["data"]] == [[10.0, 0.0], [1.0, 0.0]]
    assert waits.figure["layout"]["yaxis"]["title"]["text"] == "mean wait (minutes)"
    assert [t["text"] for t in waits.figure["data"]] == [["10 min", "0 s"], ["1 min", "0 s"]]
    assert ("team-a", "live policy", "mean wait (minutes)", 10.0) in waits.rows
    lending = built[3]
    assert len(lending.figure["data"]) == 4  # borrowed and lent, for each policy
    assert ("team-b", "lend more", "lent", 2.0) in lending.rows


def test_long_waits_are_in_hours_and_minutes_not_seconds():
    start = datetime(2026, 11, 1, tzinfo=UTC)
    waits = charts.run_charts(start, [policy("live policy", [8], 101160)])[2]
    assert waits.figure["layout"]["yaxis"]["title"]["text"] == "mean wait (hours)"
    assert waits.figure["data"][0]["y"][0] == 28.1
    assert waits.figure["data"][0]["text"][0] == "28 h 6 min"
    plotly.graph_objects.Figure(waits.figure)  # valid Plotly
