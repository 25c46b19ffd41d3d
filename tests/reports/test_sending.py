"""Sending the weekly reports to a real SMTP server (aiosmtpd) and reading what it received."""

from __future__ import annotations

import csv
import html
import io
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from allocations.models import Membership, ReportDelivery, ReportPreference
from allocations.reports.services import weekly_report_due, weekly_reports_send, weekly_reports_tick
from allocations.reports.weeks import Week
from tests.conftest import require_service
from tests.reports.conftest import free_port

W47 = "2026-W47"
NOW = datetime(2026, 11, 23, 9, tzinfo=UTC)  # Monday 10:00 in Berlin, after W47


def week() -> Week:
    return Week.parse(W47, "Europe/Berlin")


def parts(message) -> list:
    """The MIME tree as nested (content type, [children]) pairs."""
    if message.is_multipart():
        return [message.get_content_type(), [parts(p) for p in message.iter_parts()]]
    return message.get_content_type()


def html_of(message) -> str:
    return message.get_body(preferencelist=("html",)).get_content()


def text_of(message) -> str:
    return message.get_body(preferencelist=("plain",)).get_content()


# --- who gets what, once ------------------------------------------------------------------------
def test_team_admins_members_and_cluster_admins_get_their_report(week_of_history, smtp, no_charts):
    result = weekly_reports_send(week=week(), now=NOW)
    assert sorted(to for tos, _ in smtp.received for to in tos) == [
        "admin@example.com",
        "alice@example.com",
        "bob@example.com",
        "olga@example.com",
    ]  # victor is a viewer: no team report
    assert len(result.sent) == 4 and not result.failed
    assert smtp.to("bob@example.com")[0]["Subject"] == "[gpugov] Weekly report 2026-W47: team team-a"
    assert smtp.to("admin@example.com")[0]["Subject"] == "[gpugov] Weekly cluster report 2026-W47"
    assert set(ReportDelivery.objects.values_list("state", flat=True)) == {"sent"}


def test_sending_twice_sends_once(week_of_history, smtp, no_charts):
    weekly_reports_send(week=week(), now=NOW)
    again = weekly_reports_send(week=week(), now=NOW)
    assert len(smtp.received) == 4
    assert again.sent == [] and len(again.already_sent) == 4
    # The beat tick: the week counts as sent, so it does nothing at all.
    assert weekly_reports_tick(now=NOW) is None
    assert len(smtp.received) == 4


@pytest.mark.django_db(transaction=True)
def test_concurrent_senders_send_each_report_once(week_of_history, smtp, no_charts):
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (SQLite's shared-cache test database locks tables)")
    results = []

    def send() -> None:
        try:
            results.append(weekly_reports_send(week=week(), now=NOW))
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=send) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3, "a sender raised"
    assert len(smtp.received) == 4
    assert sum(len(r.sent) for r in results) == 4
    assert ReportDelivery.objects.count() == 4


def test_a_refused_send_is_failed_then_retried(week_of_history, smtp, no_charts, settings):
    port = settings.EMAIL_PORT
    settings.EMAIL_PORT = free_port()  # nothing listens there: the connection is refused
    result = weekly_reports_send(week=week(), now=NOW)
    assert len(result.failed) == 4 and smtp.received == []
    assert set(ReportDelivery.objects.values_list("state", flat=True)) == {"failed"}
    assert "ConnectionRefusedError" in ReportDelivery.objects.first().error
    settings.EMAIL_PORT = port
    retry = weekly_reports_tick(now=NOW)  # the hourly beat retries failures
    assert retry is not None and len(retry.sent) == 4 and len(smtp.received) == 4
    assert weekly_reports_tick(now=NOW) is None


def test_claims_are_released_when_an_email_cannot_be_built(week_of_history, smtp, no_charts, settings):
    settings.TEMPLATES = []  # the email templates cannot be found: nothing may stay "sending"
    result = weekly_reports_send(week=week(), now=NOW)
    assert smtp.received == [] and len(result.failed) == 4
    assert "weekly_report" in result.failed[0]
    assert set(ReportDelivery.objects.values_list("state", flat=True)) == {"failed"}


def test_the_beat_sends_from_monday_seven_local_time():
    tz = "Europe/Berlin"
    assert weekly_report_due(datetime(2026, 11, 23, 5, 59, tzinfo=UTC), tz, 0, 7) is None  # 06:59 local
    assert weekly_report_due(datetime(2026, 11, 23, 6, 0, tzinfo=UTC), tz, 0, 7).label == W47
    assert weekly_report_due(datetime(2026, 11, 25, 12, tzinfo=UTC), tz, 0, 7).label == W47  # catch-up
    assert weekly_report_due(datetime(2026, 11, 22, 23, 30, tzinfo=UTC), tz, 0, 7) is None  # Monday 00:30


def test_the_tick_sends_the_due_week(week_of_history, smtp, no_charts):
    assert weekly_reports_tick(now=datetime(2026, 11, 23, 5, tzinfo=UTC)) is None
    assert smtp.received == []
    result = weekly_reports_tick(now=datetime(2026, 11, 23, 6, 5, tzinfo=UTC))
    assert result is not None and result.week == W47 and len(result.sent) == 4


# --- the email ----------------------------------------------------------------------------------
def test_mime_structure_inline_charts_and_csv(week_of_history, smtp):
    require_service(Path("/usr/bin/chromium").exists(), "chromium (renders the report charts)")
    weekly_reports_send(week=week(), teams=["team-a"], cluster=False, now=NOW)
    message = smtp.to("bob@example.com")[0]
    assert parts(message) == [
        "multipart/mixed",
        [
            [
                "multipart/alternative",
                ["text/plain", ["multipart/related", ["text/html", "image/png", "image/png"]]],
            ],
            "text/csv",
        ],
    ]
    body = html_of(message)
    images = {
        p["Content-ID"].strip("<>"): p.get_content()
        for p in message.walk()
        if p.get_content_type() == "image/png"
    }
    assert (
        sorted(re.findall(r'src="cid:([^"]+)"', body)) == sorted(images) == ["daily@gpugov", "trend@gpugov"]
    )
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in images.values())
    assert all(
        p.get_content_disposition() == "inline" for p in message.walk() if p.get_content_type() == "image/png"
    )
    attachment = next(message.iter_attachments())
    assert attachment.get_filename() == "gpugov-team-a-2026-W47-daily.csv"
    rows = list(csv.DictReader(io.StringIO(attachment.get_content())))
    assert [
        (r["date"], r["used_within_quota_gpu_hours"], r["borrowed_gpu_hours"], r["cost_borrowed"])
        for r in rows
    ] == [
        ("2026-11-16", "4.00", "2.00", "20.00"),
        ("2026-11-22", "1.00", "0.00", "0.00"),
    ]
    assert "https://gpugov.example.org/dashboards/teams/team-a/" in body
    assert (
        str(message["List-Unsubscribe"])
        .strip()
        .startswith("<https://gpugov.example.org/reports/unsubscribe/")
    )


def test_figures_in_the_text_and_html(week_of_history, smtp, no_charts):
    weekly_reports_send(week=week(), now=NOW)
    team = text_of(smtp.to("bob@example.com")[0])
    for label, value in [
        ("GPU-hours used within quota", "5.0"),
        ("GPU-hours borrowed", "2.0"),
        ("Quota utilization", "31%"),
        ("Mean wait", "2.3 h"),
        ("95th percentile wait", "6.0 h"),
        ("Preemptions suffered", "1 (reclaim 1)"),
        ("GPU-hours lost to preemption", "4.0"),
        ("Cost: own quota", "50.00"),
        ("Cost: borrowed", "20.00"),
    ]:
        assert f"  {label:<34} {value}\r\n" in team
    assert (
        "borrow-limit | 0.2 | 0.5" in team and "2026-W46 | 8.0 | 8.0 | 0.0 | 0.0 | 0.0 | 100% | 80.00" in team
    )
    cluster = text_of(smtp.to("admin@example.com")[0])
    assert "GPU-hours idle while jobs waited   2.0" in cluster
    assert "Team team-b used under 50% of its quota for 4 weeks" in cluster
    assert "Team team-a waited most on its borrow limit on ml.p5.48xlarge" in cluster
    assert "lent | team-b | 2.0" in cluster and "borrowed | team-a | 2.0" in cluster
    assert "Evidence: Quota utilization 2026-W44 0%" in html_of(smtp.to("admin@example.com")[0])


def test_without_a_renderer_the_email_goes_without_images(week_of_history, smtp, settings, caplog):
    settings.REPORT_CHART_BROWSER = "/nonexistent/chromium"
    result = weekly_reports_send(week=week(), teams=["team-a"], cluster=False, now=NOW)
    assert len(result.sent) == 2 and not result.images
    message = smtp.to("alice@example.com")[0]
    assert parts(message) == [
        "multipart/mixed",
        [["multipart/alternative", ["text/plain", "text/html"]], "text/csv"],
    ]
    assert "<img" not in html_of(message)
    assert "REPORT_CHART_BROWSER='/nonexistent/chromium' does not exist" in caplog.text


# --- subscriptions ------------------------------------------------------------------------------
def unsubscribe_path(message) -> str:
    url = re.search(r"Unsubscribe from this report: (\S+)", text_of(message))[1]
    return url.removeprefix("https://gpugov.example.org")


def test_unsubscribe_link_works_without_login(week_of_history, smtp, no_charts, client):
    weekly_reports_send(week=week(), now=NOW)
    path = unsubscribe_path(smtp.to("bob@example.com")[0])
    page = client.get(path)
    assert page.status_code == 200 and b"the weekly report of team team-a" in page.content
    assert Membership.objects.get(user__username="bob").weekly_report  # GET changes nothing
    done = client.post(path)
    assert done.status_code == 200 and b"no longer receives" in done.content
    assert not Membership.objects.get(user__username="bob").weekly_report
    # The cluster admin's link turns off the cluster report.
    client.post(unsubscribe_path(smtp.to("admin@example.com")[0]))
    assert ReportPreference.objects.get(user__username="admin").cluster_report is False
    result = weekly_reports_send(week=week().shifted(-1), now=NOW)
    assert sorted(result.sent) == ["team team-a -> alice@example.com", "team team-b -> olga@example.com"]


@pytest.mark.parametrize("token", ["garbage", "eyJ1IjoxfQ:bad:signature"])
def test_a_bad_unsubscribe_token_is_refused_by_name(db, client, token):
    page = client.get(f"/reports/unsubscribe/{token}/")
    assert page.status_code == 400 and b"token:" in page.content
    assert client.post(f"/reports/unsubscribe/{token}/").status_code == 400


def test_settings_page_turns_reports_on_and_off(personas, client):
    from tests.conftest import PASSWORD

    client.login(username="admin", password=PASSWORD)
    assert client.post("/reports/settings/", {}).status_code == 302
    assert ReportPreference.objects.get(user=personas.cluster_admin).cluster_report is False
    client.post("/reports/settings/", {"cluster": "on"})
    assert ReportPreference.objects.get(user=personas.cluster_admin).cluster_report is True
    client.login(username="bob", password=PASSWORD)
    assert client.get("/reports/settings/").status_code == 200
    client.post("/reports/settings/", {})
    assert not Membership.objects.get(user=personas.member).weekly_report
    client.post("/reports/settings/", {"team": [str(personas.team.pk)]})
    assert Membership.objects.get(user=personas.member).weekly_report
    other = client.post("/reports/settings/", {"team": [str(personas.other_team.pk)]})
    assert other.status_code == 400
    assert f"team: '{personas.other_team.pk}' is not one of your teams" in html.unescape(
        other.content.decode()
    )


# --- the command --------------------------------------------------------------------------------
def test_command_dry_run_sends_nothing(week_of_history, smtp, no_charts, capsys):
    call_command("send_weekly_reports", "--week", W47, "--dry-run")
    out = capsys.readouterr().out
    assert (
        "would send team team-a -> bob@example.com" in out
        and "would send cluster -> admin@example.com" in out
    )
    assert smtp.received == [] and not ReportDelivery.objects.exists()


def test_command_sends_one_team(week_of_history, smtp, no_charts, capsys):
    call_command("send_weekly_reports", "--week", W47, "--team", "team-b")
    assert [tos for tos, _ in smtp.received] == [["olga@example.com"]]
    call_command("send_weekly_reports", "--week", W47, "--team", "team-b")
    assert "already sent team team-b -> olga@example.com" in capsys.readouterr().out
    assert len(smtp.received) == 1


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--week", "2026-47"], "--week: '2026-47' is not an ISO week"),
        (["--week", "2999-W01"], "--week: '2999-W01' has not ended yet"),
        (["--week", W47, "--team", "nope"], "--team: no team is named 'nope'"),
    ],
)
def test_command_names_a_bad_argument(personas, args, error):
    with pytest.raises(CommandError, match=re.escape(error)):
        call_command("send_weekly_reports", *args)
