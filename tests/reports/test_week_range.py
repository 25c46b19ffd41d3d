"""Weeks at the ends of the calendar: a well-formed ISO week whose start or end (or the trend
weeks a report reads before it) Python's datetimes cannot hold is refused by name, never an
OverflowError (which would make /reports/9999-W52/teams/<team>/ answer 500)."""

from __future__ import annotations

import html

import pytest
from django.core.management import CommandError, call_command

from allocations.models import Cluster
from allocations.reports.weeks import Week, WeekOutOfRange
from tests.conftest import PASSWORD

EDGE_WEEKS = ["9999-W52", "0001-W01", "0001-W07"]  # W07: its 8-week trend starts in year 0


def login(client, username: str):
    assert client.login(username=username, password=PASSWORD)
    return client


@pytest.mark.parametrize(
    ("text", "time_zone"),
    [
        ("9999-W52", "UTC"),  # its end is 10000-01-03
        ("9999-W52", "Pacific/Kiritimati"),
        ("0001-W01", "Europe/Berlin"),  # midnight east of UTC is still in year 0 in UTC
    ],
)
def test_a_week_outside_the_calendar_is_refused_with_its_value(text, time_zone):
    with pytest.raises(WeekOutOfRange, match=f"week: '{text}' is out of range"):
        Week.parse(text, time_zone)


def test_the_first_weeks_of_year_one_are_refused_with_the_weeks_a_report_reads_before_them():
    assert Week.parse("0001-W01", "UTC").start.year == 1  # the week itself fits in UTC
    with pytest.raises(WeekOutOfRange, match="'0001-W07' is out of range: the week or the 7 weeks before it"):
        Week.parse("0001-W07", "UTC", weeks_before=7)
    assert Week.parse("0001-W08", "UTC", weeks_before=7).label == "0001-W08"


def test_the_first_week_whose_trend_fits_is_reported(personas, no_charts, client):
    Cluster.objects.filter(pk=1).update(time_zone="UTC")
    assert login(client, "bob").get("/reports/0001-W08/teams/team-a/").status_code == 200


@pytest.fixture(params=["UTC", "Europe/Berlin"])
def cluster_zone(request, personas):
    Cluster.objects.filter(pk=1).update(time_zone=request.param)
    return request.param


@pytest.mark.parametrize("username", ["alice", "bob", "victor"])  # every team role
@pytest.mark.parametrize("week", EDGE_WEEKS)
def test_a_team_report_of_a_week_outside_the_calendar_is_not_found(
    cluster_zone, no_charts, client, username, week
):
    response = login(client, username).get(f"/reports/{week}/teams/team-a/")
    assert response.status_code == 404


@pytest.mark.parametrize("week", EDGE_WEEKS)
def test_the_cluster_report_of_a_week_outside_the_calendar_is_not_found(
    cluster_zone, no_charts, client, week
):
    assert login(client, "admin").get(f"/reports/{week}/cluster/").status_code == 404


@pytest.mark.parametrize("week", EDGE_WEEKS)
def test_sending_a_week_outside_the_calendar_names_the_week(cluster_zone, no_charts, client, week):
    response = login(client, "admin").post("/reports/send/", {"week": week, "report": "all"})
    assert response.status_code == 400
    assert f"week: '{week}' is out of range" in html.unescape(response.content.decode())


@pytest.mark.parametrize("week", EDGE_WEEKS)
def test_the_send_command_names_a_week_outside_the_calendar(cluster_zone, week):
    with pytest.raises(CommandError, match=f"--week: '{week}' is out of range"):
        call_command("send_weekly_reports", "--week", week, "--dry-run")
