"""Days at the very ends of the calendar in the day filters: a range of days is read as the
midnights from its first day to the day after its last, which Python's datetimes cannot hold
for 9999-12-31 (an OverflowError, a 500). Every day field refuses them, naming the value."""

from __future__ import annotations

from html import unescape

import pytest
from django.test import Client

# (field as the message names it, the value, the message's end)
ENDS = [
    ("To", {"until": "9999-12-31"}, "got 9999-12-31."),
    ("From", {"since": "0001-01-01"}, "got 0001-01-01."),
]


@pytest.fixture
def admin(personas) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(personas.cluster_admin)
    return client


@pytest.mark.parametrize(("name", "query", "got"), ENDS)
def test_the_audit_filter_refuses_a_day_at_the_end_of_the_calendar(admin, name, query, got):
    response = admin.get("/console/audit/", query)
    assert response.status_code in (200, 400)
    assert f"{name} must be a day from 0001-01-02 to 9999-12-30; {got}" in unescape(response.content.decode())


def test_the_audit_filter_takes_the_last_day_it_accepts(admin):
    assert admin.get("/console/audit/", {"since": "0001-01-02", "until": "9999-12-30"}).status_code == 200


@pytest.mark.parametrize(("name", "days", "got"), ENDS)
def test_a_whatif_run_over_a_day_at_the_end_of_the_calendar_is_a_form_error(admin, name, days, got):
    from allocations.models import PolicyDraft

    admin.post("/whatif/", {"draft-name": "ends"})
    body = {
        "run-drafts": PolicyDraft.objects.get(name="ends").pk,
        "run-range": "dates",
        "run-since": "2026-01-01",
        "run-until": "2026-01-02",
        "run-time_step": "60",
    }
    body.update({f"run-{key}": value for key, value in days.items()})
    response = admin.post("/whatif/runs/", body)
    assert response.status_code in (200, 400)
    assert f"{name} must be a day from 0001-01-02 to 9999-12-30; {got}" in unescape(response.content.decode())
