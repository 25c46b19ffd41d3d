"""Report pages: preview (exactly the email sent), access, send now, the index."""

from __future__ import annotations

import base64
import html
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from allocations.reports.services import weekly_reports_send
from allocations.reports.weeks import Week
from tests.conftest import PASSWORD, require_service

W47 = "2026-W47"
NOW = datetime(2026, 11, 23, 9, tzinfo=UTC)
IMG = re.compile(r'src="(cid:[^"]+|data:image/png;base64,[^"]+)"')


def login(client, username: str):
    assert client.login(username=username, password=PASSWORD)
    return client


def html_of(message) -> str:
    return message.get_body(preferencelist=("html",)).get_content()


def same_modulo_images(a: str, b: str) -> bool:
    """Equal but for image sources (``cid:`` in the email, ``data:`` in the preview) and line
    ends (SMTP carries CRLF)."""

    def normal(text: str) -> str:
        return IMG.sub('src="IMG"', text.replace("\r\n", "\n")).strip()

    return normal(a) == normal(b)


def test_preview_is_the_email_that_was_sent_with_its_images(week_of_history, smtp, client):
    require_service(Path("/usr/bin/chromium").exists(), "chromium (renders the report charts)")
    weekly_reports_send(week=Week.parse(W47, "Europe/Berlin"), teams=["team-a"], cluster=False, now=NOW)
    sent = smtp.to("bob@example.com")[0]
    page = login(client, "bob").get(f"/reports/{W47}/teams/team-a/")
    assert page.status_code == 200
    preview = page.content.decode()
    assert same_modulo_images(preview, html_of(sent))
    assert IMG.sub("", preview) != preview  # it has images
    # The preview's data: URIs are the very PNGs the email carries, in the same places.
    sent_pngs = {
        p["Content-ID"].strip("<>"): p.get_content()
        for p in sent.walk()
        if p.get_content_type() == "image/png"
    }
    cids = re.findall(r'src="cid:([^"]+)"', html_of(sent))
    data = [base64.b64decode(uri) for uri in re.findall(r'src="data:image/png;base64,([^"]+)"', preview)]
    assert data == [sent_pngs[cid] for cid in cids]


def test_cluster_preview_is_the_cluster_email(week_of_history, smtp, no_charts, client):
    weekly_reports_send(week=Week.parse(W47, "Europe/Berlin"), now=NOW)
    page = login(client, "admin").get(f"/reports/{W47}/cluster/")
    assert page.status_code == 200
    assert same_modulo_images(page.content.decode(), html_of(smtp.to("admin@example.com")[0]))


@pytest.mark.parametrize(
    ("username", "url", "status"),
    [
        (None, f"/reports/{W47}/teams/team-a/", 302),
        (None, f"/reports/{W47}/cluster/", 302),
        ("victor", f"/reports/{W47}/teams/team-a/", 200),  # viewers read their team's report
        ("olga", f"/reports/{W47}/teams/team-a/", 404),  # another team's: as if missing
        ("bob", f"/reports/{W47}/teams/no-such-team/", 404),
        ("bob", f"/reports/{W47}/cluster/", 403),
        ("admin", f"/reports/{W47}/teams/team-b/", 200),
        ("nobody", "/reports/", 200),
    ],
)
def test_preview_access(week_of_history, no_charts, client, username, url, status):
    if username:
        login(client, username)
    assert client.get(url).status_code == status


@pytest.mark.parametrize(
    ("week", "error"),
    [
        ("2026-W99", "week: '2026-W99' is not a week of that year"),
        ("2999-W01", "week: '2999-W01' has not ended yet"),
    ],
)
def test_preview_of_a_bad_week_names_it(personas, no_charts, client, week, error):
    page = login(client, "bob").get(f"/reports/{week}/teams/team-a/")
    assert page.status_code == 400 and error in html.unescape(page.content.decode())


def test_send_now_is_for_cluster_admins(week_of_history, smtp, no_charts, client):
    assert login(client, "alice").post("/reports/send/", {"week": W47, "report": "team-a"}).status_code == 403
    response = login(client, "admin").post("/reports/send/", {"week": W47, "report": "team-a"}, follow=True)
    assert response.status_code == 200
    assert sorted(tos[0] for tos, _ in smtp.received) == ["alice@example.com", "bob@example.com"]
    assert "2 sent, 0 already sent, 0 failed" in response.content.decode()
    client.post("/reports/send/", {"week": W47, "report": "cluster"})
    assert sorted(tos[0] for tos, _ in smtp.received)[0] == "admin@example.com" and len(smtp.received) == 3


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"week": "soon", "report": "all"}, "week: 'soon' is not an ISO week"),
        ({"week": W47, "report": "nope"}, "report: no team is named 'nope'"),
    ],
)
def test_send_now_names_a_bad_field(personas, no_charts, client, data, error):
    response = login(client, "admin").post("/reports/send/", data)
    assert response.status_code == 400 and error in html.unescape(response.content.decode())


def test_index_lists_the_reports_the_user_may_preview(week_of_history, client):
    page = login(client, "bob").get("/reports/").content.decode()
    assert "/teams/team-a/" in page and "/teams/team-b/" not in page and "/cluster/" not in page
    assert 'id="send-now"' not in page
    page = login(client, "admin").get("/reports/").content.decode()
    assert "/cluster/" in page and "/teams/team-b/" in page and 'id="send-now"' in page
