"""Dashboard pages, data endpoints and CSVs: who sees what, bad filters, CSV = chart data,
points per series bounded, query counts independent of the range."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from allocations.choices import JobEventKind, JobState
from allocations.models import JobEvent
from allocations.selectors import history as selectors
from allocations.services import history

CLUSTER_CHARTS = [
    "capacity",
    "idle_while_waiting",
    "lending",
    "fair_share",
    "preemptions",
    "lost_work",
    "victim_runtime",
]
TEAM_CHARTS = ["usage", "pending", "wait_time", "preemptions", "lost_work", "victim_runtime"]


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)  # the login form itself is the console's (and django-axes') to test
    return client


@pytest.fixture
def recorded(personas):  # type: ignore[no-untyped-def]
    """30 sampled minutes up to now: team-b runs 12 of 16 GPUs (4 borrowed from team-a), a
    team-a job waits for 2 GPUs and one was preempted; team-a's finished job waited 3 minutes."""
    from tests import factories as f

    now = timezone.now()
    nodes = personas.nodes
    f.make_job(
        personas.other_team,
        personas.instance_type,
        12,
        state=JobState.RUNNING,
        submitted_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=1),
        nodes=[[nodes[0].name, 8], [nodes[1].name, 4]],
    )
    waiting = f.make_job(personas.team, personas.instance_type, 2, submitted_at=now - timedelta(minutes=40))
    JobEvent.objects.create(
        job=waiting, kind=JobEventKind.PREEMPTED, at=now - timedelta(minutes=10, seconds=30), reason="reclaim"
    )
    finished = f.make_job(
        personas.team,
        personas.instance_type,
        1,
        state=JobState.FINISHED,
        submitted_at=now - timedelta(minutes=20),
        started_at=now - timedelta(minutes=17),
        finished_at=now - timedelta(minutes=5),
    )
    # Its history, as the services and the loop record it: the wait chart reads the events.
    for kind, minutes in [("submitted", 20), ("started", 17), ("finished", 5)]:
        JobEvent.objects.create(job=finished, kind=kind, at=now - timedelta(minutes=minutes))
    for i in range(30):
        history.history_sample(now=now - timedelta(minutes=i))
    history.history_rollup(now=now)
    return personas


def test_a_member_sees_the_dashboard_of_their_own_team(recorded) -> None:  # type: ignore[no-untyped-def]
    for user in (recorded.member, recorded.viewer, recorded.team_admin, recorded.cluster_admin):
        response = _client(user).get(reverse("allocations:dashboard_team", kwargs={"team": "team-a"}))
        assert response.status_code == 200, user
        for key in TEAM_CHARTS:
            assert f'id="chart-{key}"' in response.content.decode()


def test_another_teams_dashboard_is_404_in_every_format(recorded) -> None:  # type: ignore[no-untyped-def]
    for user in (recorded.other_member, recorded.outsider):
        client = _client(user)
        for name, kwargs in [
            ("allocations:dashboard_team", {}),
            ("allocations:dashboard_team_data", {}),
            ("allocations:dashboard_team_csv", {"chart": "usage"}),
        ]:
            url = reverse(name, kwargs={"team": "team-a", **kwargs})
            assert client.get(url).status_code == 404, (user, url)
    missing = reverse("allocations:dashboard_team", kwargs={"team": "no-such-team"})
    assert _client(recorded.cluster_admin).get(missing).status_code == 404


def test_the_cluster_dashboard_is_for_cluster_admins(recorded, client) -> None:  # type: ignore[no-untyped-def]
    url = reverse("allocations:dashboard_cluster")
    assert _client(recorded.cluster_admin).get(url).status_code == 200
    assert _client(recorded.team_admin).get(url).status_code == 403
    assert client.get(url).status_code == 302  # anonymous: to the login page
    anonymous_team = client.get(reverse("allocations:dashboard_team", kwargs={"team": "team-a"}))
    assert anonymous_team.status_code == 302


def test_the_index_lists_the_users_own_dashboards(recorded) -> None:  # type: ignore[no-untyped-def]
    page = _client(recorded.member).get(reverse("allocations:dashboards")).content.decode()
    assert "/dashboards/teams/team-a/" in page and "team-b" not in page
    assert "/dashboards/cluster/" not in page
    admin_page = _client(recorded.cluster_admin).get(reverse("allocations:dashboards")).content.decode()
    assert "/dashboards/cluster/" in admin_page and "/dashboards/teams/team-b/" in admin_page


def test_the_team_data_shows_what_was_sampled(recorded) -> None:  # type: ignore[no-untyped-def]
    url = reverse("allocations:dashboard_team_data", kwargs={"team": "team-a"})
    data = _client(recorded.member).get(url, {"range": "1h"}).json()
    assert data["window"]["resolution"] == "minute" and data["window"]["live"] is True
    figures = {c["key"]: c["figure"] for c in data["charts"]}
    assert list(figures) == TEAM_CHARTS
    usage = {t["name"]: t["y"] for t in figures["usage"]["data"]}
    assert len(usage["lent"]) == 30 and set(usage["lent"]) == {4.0} and set(usage["quota"]) == {8.0}
    preempted = {t["name"]: sum(t["y"]) for t in figures["preemptions"]["data"]}
    assert preempted == {"reclaim": 1}
    # Recorded with neither its run time nor a start: a victim whose run is not known.
    ran = {t["name"]: sum(t["y"]) for t in figures["victim_runtime"]["data"]}
    assert ran == {"unknown": 1} and sum(figures["lost_work"]["data"][0]["y"]) == 0
    waits = dict(zip(figures["wait_time"]["data"][0]["x"], figures["wait_time"]["data"][0]["y"], strict=True))
    assert waits["1-5 min"] == 1 and sum(waits.values()) == 1


def test_the_cluster_data_stacks_usage_by_team_and_counts_idle_while_waiting(recorded) -> None:  # type: ignore[no-untyped-def]
    url = reverse("allocations:dashboard_cluster_data")
    data = _client(recorded.cluster_admin).get(url, {"range": "6h"}).json()
    figures = {c["key"]: c["figure"] for c in data["charts"]}
    assert list(figures) == CLUSTER_CHARTS
    capacity = {t["name"]: t["y"] for t in figures["capacity"]["data"]}
    assert set(capacity["capacity"]) == {16.0} and set(capacity["idle"]) == {4.0}
    assert set(capacity["team-b"]) == {12.0} and set(capacity["team-a"]) == {0.0}
    waiting = {t["name"]: t["y"] for t in figures["idle_while_waiting"]["data"]}
    assert set(waiting["idle while jobs waited"]) == {2.0}  # 4 idle, 2 wanted
    lending = {t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in figures["lending"]["data"]}
    assert lending["borrowed"]["team-b"] == 2.0 and lending["lent"]["team-a"] == 2.0  # 4 GPUs x 30 min


@pytest.mark.parametrize("dashboard", ["cluster", "team"])
def test_each_csv_is_exactly_its_charts_data(recorded, dashboard: str) -> None:  # type: ignore[no-untyped-def]
    client = _client(recorded.cluster_admin)
    kwargs = {"team": "team-a"} if dashboard == "team" else {}
    data = client.get(
        reverse(f"allocations:dashboard_{dashboard}_data", kwargs=kwargs), {"range": "1d"}
    ).json()
    for chart in data["charts"]:
        url = reverse(f"allocations:dashboard_{dashboard}_csv", kwargs={**kwargs, "chart": chart["key"]})
        response = client.get(url, {"range": "1d"})
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        header, *rows = list(csv.reader(io.StringIO(response.content.decode())))
        assert len(rows) == chart["points"], chart["key"]
        traces = chart["figure"]["data"]
        if header[:2] in (["time", "series"], ["time", "reason"], ["time", "victim_ran"]):
            plotted = sorted(
                (str(x), t["name"], float(y)) for t in traces for x, y in zip(t["x"], t["y"], strict=True)
            )
            in_csv = sorted((r[0], r[1].removeprefix("team "), float(r[2])) for r in rows)
            assert plotted == in_csv, chart["key"]
        else:
            for i, trace in enumerate(traces):
                assert [r[0] for r in rows] == [str(x) for x in trace["x"]]
                assert [float(r[i + 1]) for r in rows] == [float(y) for y in trace["y"]], chart["key"]


def test_an_unknown_chart_csv_is_404(recorded) -> None:  # type: ignore[no-untyped-def]
    url = reverse("allocations:dashboard_cluster_csv", kwargs={"chart": "nope"})
    assert _client(recorded.cluster_admin).get(url).status_code == 404


@pytest.mark.parametrize(
    ("params", "field", "value"),
    [
        ({"range": "2w"}, "range", "'2w'"),
        ({"instance_type": "ml.nope"}, "instance_type", "'ml.nope'"),
        ({"team": "ghost"}, "team", "'ghost'"),
    ],
)
def test_bad_filters_get_400_naming_the_parameter_and_its_value(recorded, params, field, value) -> None:  # type: ignore[no-untyped-def]
    client = _client(recorded.cluster_admin)
    response = client.get(reverse("allocations:dashboard_cluster_data"), params)
    assert response.status_code == 400
    message = response.json()["errors"][field]
    assert message.startswith(f"{field}:") and value in message
    page = client.get(reverse("allocations:dashboard_cluster"), params)
    assert page.status_code == 400 and value.replace("'", "&#x27;") in page.content.decode()
    csv_response = client.get(
        reverse("allocations:dashboard_cluster_csv", kwargs={"chart": "capacity"}), params
    )
    assert csv_response.status_code == 400 and value in csv_response.content.decode()


def test_filters_narrow_to_an_instance_type_and_teams(recorded) -> None:  # type: ignore[no-untyped-def]
    from tests import factories as f

    f.make_instance_type("ml.g5.xlarge", 1)
    client = _client(recorded.cluster_admin)
    url = reverse("allocations:dashboard_cluster_data")
    other = client.get(url, {"range": "1h", "instance_type": "ml.g5.xlarge"}).json()
    assert all(not t["y"] for t in other["charts"][0]["figure"]["data"])
    only_b = client.get(url, {"range": "1h", "team": "team-b"}).json()
    lending = only_b["charts"][2]["figure"]["data"][0]
    assert lending["x"] == ["team-b"]


@pytest.mark.parametrize("dashboard", ["cluster", "team"])
def test_query_count_does_not_depend_on_the_range(recorded, dashboard: str) -> None:  # type: ignore[no-untyped-def]
    client = _client(recorded.cluster_admin)
    kwargs = {"team": "team-a"} if dashboard == "team" else {}
    counts = {}
    for key in ("1h", "1d", "30d", "1y"):
        with CaptureQueriesContext(connection) as queries:
            assert (
                client.get(
                    reverse(f"allocations:dashboard_{dashboard}", kwargs=kwargs), {"range": key}
                ).status_code
                == 200
            )
        counts[key] = len(queries)
    assert len(set(counts.values())) == 1, counts


@pytest.mark.parametrize(
    ("key", "source", "bucket"),
    [
        ("1h", "minute", timedelta(minutes=1)),
        ("6h", "minute", timedelta(minutes=1)),
        ("1d", "minute", timedelta(minutes=3)),  # 1440 minutes: 480 points
        ("7d", "hour", timedelta(hours=1)),
        ("30d", "hour", timedelta(hours=2)),
        ("90d", "hour", timedelta(hours=5)),  # 2160 hours: 432 points
        ("1y", "day", timedelta(days=1)),
    ],
)
def test_every_range_stays_well_under_2000_points_per_series(
    key: str, source: str, bucket: timedelta
) -> None:
    window = selectors.window_for(key, datetime(2026, 11, 29, 16, 41, 7, tzinfo=UTC))
    assert (window.source, window.bucket) == (source, bucket)
    assert (window.end - window.start) / window.bucket <= selectors.MAX_POINTS <= 2000


def test_a_90_day_range_merges_hours_into_5_hour_points(personas) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    for hours_ago in range(12):
        history.history_sample(now=now - timedelta(hours=hours_ago))
    history.history_rollup(now=now - timedelta(hours=12))
    history.history_rollup(now=now)
    window = selectors.window_for("90d", now)
    points = selectors.capacity_points(window)
    assert 3 <= len(points) <= 4  # 12 hourly samples in 5-hour points aligned on the epoch
    assert sum(p["samples"] for p in points) == 12
    assert all(p["capacity"] == 16 for p in points)
    assert all(p["t"] % (5 * 3600) == 0 for p in points)


@pytest.mark.parametrize("minutes_past_the_hour", [2, 30])
def test_a_day_merges_minutes_into_3_minute_averages(personas, minutes_past_the_hour: int) -> None:  # type: ignore[no-untyped-def]
    """Two of three minutes with 12 GPUs used, one with none: the point averages 8. The minutes
    are sampled and rolled up as beat's ``history_tick`` does; at 2 past the hour they fall in
    the hour before, a whole hour of the window, read from its rollup (sampled without rolling
    up, the test would depend on the minute it runs at)."""
    from tests import factories as f

    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    now = hour + timedelta(minutes=minutes_past_the_hour)
    start = now - timedelta(minutes=(int(now.timestamp()) // 60) % 3 + 3)  # a point's first minute
    history.history_sample(now=start)
    f.make_job(
        personas.other_team,
        personas.instance_type,
        12,
        state=JobState.RUNNING,
        submitted_at=start,
        started_at=start,
        nodes=[[personas.nodes[0].name, 8], [personas.nodes[1].name, 4]],
    )
    history.history_sample(now=start + timedelta(minutes=1))
    history.history_sample(now=start + timedelta(minutes=2))
    history.history_rollup(now=start + timedelta(minutes=2))
    window = selectors.window_for("1d", now)
    (point,) = [p for p in selectors.capacity_points(window) if p["t"] == int(start.timestamp())]
    assert (point["samples"], point["allocated"], point["idle"]) == (3, 8, 8)
    usage = selectors.stacked_usage(window, selectors.team_totals(window), [point])
    assert {u["team"]: u["used"] for u in usage} == {"team-b": 8, "team-a": 0}


def test_plotly_js_is_served_locally_and_cached(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get(reverse("allocations:plotly_js"))
    assert response.status_code == 200
    assert "immutable" in response["Cache-Control"]
    assert b"plotly" in b"".join(response.streaming_content)[:2000].lower()


def test_beyond_ten_teams_the_rest_are_stacked_as_other_teams(personas) -> None:  # type: ignore[no-untyped-def]
    """Twelve teams run 1 GPU each: the top ten (ties by name) are drawn, the other two (and
    the idle team-a and team-b) make up 2 GPUs of "other teams"; a team filter shows its own."""
    from tests import factories as f

    now = timezone.now()
    node = personas.nodes[0].name
    for k in range(1, 13):
        team = f.make_team(f"t{k:02d}", {personas.instance_type: 1})
        f.make_job(
            team,
            personas.instance_type,
            1,
            state=JobState.RUNNING,
            submitted_at=now,
            started_at=now,
            nodes=[[node, 1]],
        )
    history.history_sample(now=now)
    client = _client(personas.cluster_admin)
    data = client.get(reverse("allocations:dashboard_cluster_data"), {"range": "1h"}).json()
    capacity = {t["name"]: t["y"] for t in data["charts"][0]["figure"]["data"]}
    assert [name for name in capacity if name not in ("capacity", "idle")] == [
        *(f"t{k:02d}" for k in range(1, 11)),
        "other teams",
    ]
    assert capacity["other teams"] == [2.0] and capacity["t01"] == [1.0]
    chosen = client.get(
        reverse("allocations:dashboard_cluster_data"), {"range": "1h", "team": ["t11", "t12"]}
    ).json()
    teams = [
        t["name"] for t in chosen["charts"][0]["figure"]["data"] if t["name"] not in ("capacity", "idle")
    ]
    assert teams == ["t11", "t12"]


@pytest.mark.parametrize("key", ["6h", "1d", "7d"])
def test_team_totals_from_whole_periods_equal_the_sums_of_the_windows_rows(personas, key: str) -> None:  # type: ignore[no-untyped-def]
    """Totals read whole hours (days) from rollups and only the partial ends from the window's
    own table; they must equal the sums of the window's rows, whatever the boundaries."""
    from django.db.models import Sum as SumOf

    from allocations.models import TeamUsageMinute, TeamUsageRollup
    from tests import factories as f

    end = datetime(2026, 11, 20, 14, 37, 20, tzinfo=UTC)
    job = None
    for i, minutes_ago in enumerate(range(30 * 60, -1, -7)):  # 30 hours, every 7 minutes
        at = end - timedelta(minutes=minutes_ago)
        if i % 40 == 0:  # start or stop team-b's borrowing job now and then
            if job is None:
                job = f.make_job(
                    personas.other_team, personas.instance_type, 12, state=JobState.RUNNING,
                    submitted_at=at, started_at=at, nodes=[[personas.nodes[0].name, 8], [personas.nodes[1].name, 4]],
                )  # fmt: skip
            else:
                job.delete()
                job = None
        history.history_sample(now=at)
        if i % 25 == 0:
            history.history_rollup(now=at)
    history.history_rollup(now=end)
    window = selectors.window_for(key, end)
    totals = {t["team"]: t for t in selectors.team_totals(window)}
    if window.source == "minute":
        rows = TeamUsageMinute.objects.filter(minute__gt=window.start, minute__lte=window.end)
        fields = {"used": "used", "borrowed": "borrowed", "lent": "lent"}
    else:
        rows = TeamUsageRollup.objects.filter(period="hour", start__gt=window.start, start__lte=window.end)
        fields = {"used": "used_gpu_minutes", "borrowed": "borrowed_gpu_minutes", "lent": "lent_gpu_minutes"}
    for team in ("team-a", "team-b"):
        expected = rows.filter(team__name=team).aggregate(**{k: SumOf(v) for k, v in fields.items()})
        for k in fields:
            assert totals[team][f"{k}_gpu_hours"] == pytest.approx((expected[k] or 0) / 60), (team, k)
    assert totals["team-b"]["borrowed_gpu_hours"] > 0 and totals["team-a"]["lent_gpu_hours"] > 0


def test_dashboards_without_any_history_yet_say_so(personas) -> None:  # type: ignore[no-untyped-def]
    client = _client(personas.cluster_admin)
    for url in (
        reverse("allocations:dashboard_cluster_data"),
        reverse("allocations:dashboard_team_data", kwargs={"team": "team-a"}),
    ):
        for chart in client.get(url, {"range": "1y"}).json()["charts"]:
            if chart["key"] != "wait_time":  # its bins are always there, at 0
                assert chart["points"] == 0, (url, chart["key"])
                assert chart["figure"]["layout"]["annotations"][0]["text"] == "No data in this range"
    assert client.get(reverse("allocations:dashboard_cluster")).status_code == 200


def test_the_dashboards_show_lost_gpu_hours_and_victims_by_run_time(personas) -> None:  # type: ignore[no-untyped-def]
    """Three of team-a's jobs preempted in one minute: 4 GPUs after 5 minutes with a checkpoint
    that kept 2 (12 GPU-minutes lost), 2 GPUs after 30 minutes and 1 after 2 hours, neither
    with one (the whole run lost): 12 + 60 + 120 GPU-minutes = 3.2 GPU-hours; a team-b job
    after 20 minutes on 8 GPUs (2.67 GPU-hours) shows on the cluster's chart only."""
    from tests import factories as f

    now = timezone.now().replace(second=30)
    minute = history.floor_minute(now)
    for team, gpus, ran_min, lost_gpu_min in [
        (personas.team, 4, 5, 12),
        (personas.team, 2, 30, None),
        (personas.team, 1, 120, None),
        (personas.other_team, 8, 20, None),
    ]:
        job = f.make_job(team, personas.instance_type, gpus, submitted_at=now - timedelta(hours=3))
        at = minute - timedelta(seconds=20)
        JobEvent.objects.create(job=job, kind=JobEventKind.STARTED, at=at - timedelta(minutes=ran_min))
        JobEvent.objects.create(
            job=job,
            kind=JobEventKind.PREEMPTED,
            at=at,
            reason="reclaim",
            ran_s=ran_min * 60.0 if lost_gpu_min is not None else None,  # older events lack both
            lost_gpu_seconds=lost_gpu_min * 60.0 if lost_gpu_min is not None else None,
        )
    history.history_sample(now=minute)
    history.history_rollup(now=minute)
    client = _client(personas.cluster_admin)
    expected = {
        "team": (3.2, {"under 10 min": 1, "10-60 min": 1, "over 1 h": 1}),
        "cluster": (3.2 + 8 * 20 / 60, {"under 10 min": 1, "10-60 min": 2, "over 1 h": 1}),
    }
    for dashboard, kwargs in (("team", {"team": "team-a"}), ("cluster", {})):
        lost_gpu_hours, by_run = expected[dashboard]
        for key in ("1h", "7d"):  # minutes, and hour rollups
            data = client.get(
                reverse(f"allocations:dashboard_{dashboard}_data", kwargs=kwargs), {"range": key}
            )
            figures = {c["key"]: c["figure"] for c in data.json()["charts"]}
            assert sum(figures["lost_work"]["data"][0]["y"]) == pytest.approx(lost_gpu_hours, abs=0.001)
            ran = {t["name"]: sum(t["y"]) for t in figures["victim_runtime"]["data"]}
            assert ran == by_run, (dashboard, key)
        page = client.get(reverse(f"allocations:dashboard_{dashboard}", kwargs=kwargs)).content.decode()
        assert 'id="chart-lost_work"' in page and 'id="chart-victim_runtime"' in page
        csv_url = reverse(f"allocations:dashboard_{dashboard}_csv", kwargs={**kwargs, "chart": "lost_work"})
        rows = list(csv.reader(io.StringIO(client.get(csv_url, {"range": "1h"}).content.decode())))
        assert rows[0] == ["time", "lost_gpu_hours"]
        assert sum(float(r[1]) for r in rows[1:]) == pytest.approx(lost_gpu_hours, abs=0.001)
