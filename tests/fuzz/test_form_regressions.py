"""Cases from the form fuzzing, each by name."""

from __future__ import annotations

import pytest
from django.test import Client


def test_a_team_form_with_other_errors_does_not_report_a_raw_constraint(personas):
    """POST /console/teams/new/ with an empty name and a maximum priority past 100 reports the
    name's error alone, rather than "Constraint “team_max_priority_0_100” is violated." at the
    top of the form, naming no field."""
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


@pytest.mark.parametrize("next_url", ["0", "nodes", "https://evil.example/", "//evil.example/x", ""])
def test_node_state_form_with_a_strange_next_goes_back_to_the_nodes_page(personas, next_url):
    """POST /console/nodes/<pk>/state/ with next=0 goes to the nodes page, rather than a 500
    from redirect("0") looking the word up as a URL name (NoReverseMatch). Anything but a path
    of this site goes to the nodes page."""
    client = Client()
    client.force_login(personas.cluster_admin)
    node = personas.nodes[0]
    response = client.post(f"/console/nodes/{node.pk}/state/", {"state": "draining", "next": next_url})
    assert response.status_code == 302
    assert response["Location"] == "/console/nodes/"


def test_node_state_form_goes_back_to_a_path_of_this_site(personas):
    client = Client()
    client.force_login(personas.cluster_admin)
    node = personas.nodes[0]
    response = client.post(f"/console/nodes/{node.pk}/state/", {"state": "ready", "next": "/console/teams/"})
    assert response["Location"] == "/console/teams/"
