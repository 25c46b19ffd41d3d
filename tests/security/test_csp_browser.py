"""The Content-Security-Policy in a real browser (Chromium): every page loads with no CSP
violation and no script error, Plotly draws the dashboards' charts under ``script-src 'self'``
(no 'unsafe-eval'), and a confirmation (static/js/confirm.js, from ``data-confirm``, no inline
handler) still asks."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocations.choices import JobState
from allocations.models import PriorityClass
from allocations.services import history
from tests import factories as f
from tests.e2e.conftest import login

pytestmark = [pytest.mark.e2e]

# Violations are reported to the page as events; an init script runs before the page's own
# scripts and is not subject to the page's policy, so it sees every one.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber}`);
});
"""


def watch(page: Any) -> list[str]:
    errors: list[str] = []
    page.add_init_script(RECORD_VIOLATIONS)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def violations(page: Any) -> list[str]:
    return list(page.evaluate("() => window.__cspViolations || []"))


@pytest.fixture
def cluster(personas: Any) -> Any:
    now = timezone.now()
    f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        state=JobState.RUNNING,
        submitted_at=now - timedelta(hours=1),
        started_at=now - timedelta(minutes=30),
        nodes=[[personas.nodes[0].name, 8]],
    )
    history.history_sample(now=now - timedelta(minutes=1))
    history.history_sample(now=now)
    return personas


ADMIN_PAGES = [
    "/",
    "/console/teams/",
    "/console/teams/team-a/",
    "/console/teams/new/",
    "/console/policy/",
    "/console/nodes/",
    "/console/instance-types/",
    "/console/priority-classes/",
    "/console/jobs/",
    "/console/audit/",
    "/console/cycles/",
    "/console/import/",
    "/console/export/",
    "/teams/team-a/",
    "/teams/team-a/submit/",
    "/teams/team-a/members/",
    "/my-teams/",
    "/dashboards/",
    "/reports/",
    "/reports/settings/",
    "/whatif/",
    "/api/docs/",
    "/api/v1/jobs/",  # DRF's browsable API
    "/django-admin/",
]


def test_no_page_breaks_the_policy(live_server, page, cluster) -> None:  # type: ignore[no-untyped-def]
    errors = watch(page)
    page.goto(f"{live_server.url}/accounts/login/")
    assert violations(page) == []
    login(page, live_server, cluster.cluster_admin)
    found: dict[str, list[str]] = {}
    for path in ADMIN_PAGES:
        response = page.goto(f"{live_server.url}{path}")
        assert response.status < 400, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("load")
        if path.startswith("/django-admin/"):
            # Django's admin has no <link rel="icon">: Chromium asks for /favicon.ico (404).
            errors[:] = [e for e in errors if "status of 404" not in e]
        if problems := violations(page) + errors:
            found[path] = problems
        errors.clear()
    assert found == {}


def test_swagger_ui_starts_under_the_policy(live_server, page, cluster) -> None:  # type: ignore[no-untyped-def]
    errors = watch(page)
    login(page, live_server, cluster.cluster_admin)
    page.goto(f"{live_server.url}/api/docs/")
    page.locator(".swagger-ui .opblock").first.wait_for()  # drawn by the (external) start-up script
    assert violations(page) == [] and errors == []


@pytest.mark.parametrize("path", ["/dashboards/cluster/?range=1d", "/dashboards/teams/team-a/?range=1d"])
def test_plotly_draws_the_dashboards_without_unsafe_eval(live_server, page, cluster, path) -> None:  # type: ignore[no-untyped-def]
    errors = watch(page)
    login(page, live_server, cluster.cluster_admin)
    response = page.goto(f"{live_server.url}{path}")
    assert "unsafe-eval" not in response.headers["content-security-policy"]
    page.locator(".js-plotly-plot .main-svg").first.wait_for()
    assert page.locator(".js-plotly-plot").count() >= 2
    assert violations(page) == [] and errors == []


def test_a_delete_still_asks_for_confirmation(live_server, page, cluster) -> None:  # type: ignore[no-untyped-def]
    """The policy blocks inline onsubmit handlers, so the console's delete buttons ask through
    static/js/confirm.js, from data-confirm. Dismissing keeps the row."""
    errors = watch(page)
    login(page, live_server, cluster.cluster_admin)
    priority_class = PriorityClass.objects.order_by("weight").first()
    page.goto(f"{live_server.url}/console/priority-classes/{priority_class.pk}/")
    questions: list[str] = []

    def dismiss(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.click("button[value=delete]")
    page.wait_for_timeout(300)  # let a (wrong) submission start, if one were made
    assert len(questions) == 1 and questions[0].startswith("Delete ")
    assert PriorityClass.objects.filter(pk=priority_class.pk).exists()
    assert violations(page) == [] and errors == []
