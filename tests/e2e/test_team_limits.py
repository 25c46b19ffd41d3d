"""In a real browser (tests/e2e/conftest.py): a member of a team that may submit only its
lower classes sees what is in force on the submit page, picks ``inference`` anyway and gets the
refusal naming the classes the team may use, with no job made (docs/limits.md)."""

from __future__ import annotations

from typing import Any

import pytest

from allocations.models import Job
from allocations.services import policy as policy_services
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]


def test_a_member_submitting_above_the_allowed_classes_sees_the_refusal(
    personas: Any, live_server: Any, page: Any, transactional_db: None
) -> None:
    policy_services.team_update(
        actor=personas.cluster_admin,
        team=personas.team,
        allowed_priority_classes=["fine-tuning", "experimentation"],
    )
    login(page, live_server, personas.member)
    page.goto(f"{live_server.url}/teams/team-a/submit/")
    limits = " ".join(page.locator("#team-limits").inner_text().split())
    assert limits.startswith("You may submit classes fine-tuning, experimentation (default experimentation);")

    page.fill("#id_name", "serve")
    page.select_option("#id_instance_type", "ml.p5.48xlarge")
    page.fill("#id_gpus", "8")
    page.select_option("#id_priority_class", "inference")
    page.fill("#id_command", "python serve.py")
    page.click("#job-submit-form button[type=submit]")

    error = page.locator("#error-priority_class")
    error.wait_for()
    assert error.inner_text() == (
        "Team team-a may submit priority classes fine-tuning, experimentation; this job asks for inference."
    )
    assert page.url.endswith("/teams/team-a/submit/")
    assert not Job.objects.exists()
