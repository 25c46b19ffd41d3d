"""Faults that the form fuzzing found, each reproduced by name."""

from __future__ import annotations

from django.test import Client


def test_a_team_form_with_other_errors_does_not_report_a_raw_constraint(personas):
    """POST /console/teams/new/ with an empty name and a maximum priority past 100 answered
    "Constraint “team_max_priority_0_100” is violated." at the top of the form, naming no field."""
    client = Client()
    client.force_login(personas.cluster_admin)
    body = {
        "name": "",
        "fair_share_weight": "1",
        "sharing": "lend-and-borrow",
        "preempt_team_tasks": "lower-priority",
        "reclaim": "any",
        "preempt_while_borrowing": "",
        "preempt_while_borrowing_max_priority": "25666267273",
        "quota-TOTAL_FORMS": "0",
        "quota-INITIAL_FORMS": "0",
    }
    response = client.post("/console/teams/new/", body)
    form = response.context["form"]
    assert "Constraint" not in response.content.decode()
    assert list(form.errors) == ["name"]
    # With the name fixed, the rule names the field and the value.
    response = client.post("/console/teams/new/", {**body, "name": "team-c"})
    errors = response.context["form"].errors
    assert list(errors) == ["preempt_while_borrowing_max_priority"]
    assert "25666267273" in errors["preempt_while_borrowing_max_priority"][0]
