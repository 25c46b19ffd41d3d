"""The console's side of preemption grace (docs/preemption.md section 5): the policy page and
the priority-class form set a grace (a class's empty means the policy's), audited; and a job
within its grace shows "terminating, grace ends in N s" on its page, in the console's job list
and in its team's queue."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

from django.test import Client
from django.utils import timezone

from allocations.models import AuditEntry, ClusterPolicy, Job, PriorityClass
from tests import factories as f

POLICY = {
    "form": "policy",
    "policy-idle_allocation": "fair-share",
    "policy-task_ranking": "priority",
    "policy-share_unallocated": "on",
    "policy-queueing": "best-effort-fifo",
}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_policy_page_sets_the_preemption_grace(personas):
    response = client_for(personas.cluster_admin).post(
        "/console/policy/", {**POLICY, "policy-preemption_grace_s": "30"}
    )
    assert response.status_code == 302
    assert ClusterPolicy.objects.get().preemption_grace_s == 30
    assert AuditEntry.objects.filter(field="preemption_grace_s", old_value="0", new_value="30").exists()


def test_a_priority_class_gets_its_own_grace_or_the_policys(personas):
    admin = client_for(personas.cluster_admin)
    response = admin.post(
        "/console/priority-classes/", {"name": "urgent", "weight": "99", "preemption_grace_s": "45"}
    )
    assert response.status_code == 302
    assert PriorityClass.objects.get(name="urgent").preemption_grace_s == 45
    html = unescape(admin.get("/console/priority-classes/").content.decode())
    row = re.search(r"<strong>urgent</strong>.*?</tr>", html, re.S)
    assert row and "45 s" in row.group(0)
    training = PriorityClass.objects.get(name="training")
    response = admin.post(
        f"/console/priority-classes/{training.pk}/",
        {"name": "training", "weight": "70", "preemption_grace_s": "600"},
    )
    assert response.status_code == 302, response.content
    assert PriorityClass.objects.get(name="training").preemption_grace_s == 600
    bad = admin.post(
        "/console/priority-classes/", {"name": "later", "weight": "9", "preemption_grace_s": "-1"}
    )
    assert bad.status_code == 200
    assert "-1" in " ".join(bad.context["form"].errors["preemption_grace_s"])
    assert not PriorityClass.objects.filter(name="later").exists()


def terminating_job(personas) -> tuple[Job, Job]:
    """A running job of team-a signalled 10 s ago with a 30 s grace, for a job of team-b."""
    now = timezone.now()
    preemptor = f.make_job(personas.other_team, personas.instance_type, 8)
    victim = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        state="running",
        started_at=now - timedelta(seconds=100),
        nodes=[[personas.nodes[0].name, 8]],
        terminating_since=now - timedelta(seconds=10),
        grace_ends_at=now + timedelta(seconds=20),
        preempted_for=preemptor,
        preempted_reason="reclaim",
    )
    return victim, preemptor


def grace_text(html: str) -> int:
    found = re.search(r"terminating, grace ends in (\d+) s", unescape(html))
    assert found, "no grace shown"
    return int(found.group(1))


def test_a_terminating_job_shows_when_its_grace_ends_on_its_page(personas):
    victim, preemptor = terminating_job(personas)

    html = client_for(personas.member).get(f"/jobs/{victim.pk}/").content.decode()

    assert 0 < grace_text(html) <= 20
    assert f"/jobs/{preemptor.pk}/" in html


def test_a_terminating_job_shows_when_its_grace_ends_in_the_lists(personas):
    victim, _ = terminating_job(personas)
    other = f.make_job(
        personas.team, personas.instance_type, 8, state="running", started_at=timezone.now(), nodes=[["x", 8]]
    )

    console = client_for(personas.cluster_admin).get("/console/jobs/").content.decode()
    queue = client_for(personas.member).get("/teams/team-a/").content.decode()

    for html in (console, queue):
        rows = dict(re.findall(r'<tr id="job-(\d+)"(.*?)</tr>', html, re.S))
        assert 0 < grace_text(rows[str(victim.pk)]) <= 20
        assert "terminating" not in rows[str(other.pk)]


def test_the_pages_of_a_preemptor_held_for_its_victim_show_why_it_waits(personas):
    """Left out of the snapshot while it waits (the estimates read it), it still has its page,
    its place in the lists and its reason."""
    victim, preemptor = terminating_job(personas)
    Job.objects.filter(pk=preemptor.pk).update(
        pending_reason_code="preempting",
        pending_reason_message=f"waits for job {victim.pk} (grace 30 s, 20 s left) to stop",
    )
    member = client_for(personas.other_member)

    page = member.get(f"/jobs/{preemptor.pk}/")
    queue = member.get("/teams/team-b/")

    assert page.status_code == 200 and queue.status_code == 200
    assert f"waits for job {victim.pk}" in unescape(page.content.decode())
    assert f'id="job-{preemptor.pk}"' in queue.content.decode()
    # Expected when the victim's grace runs out, in about 20 s (selectors/estimates.py).
    estimate = re.search(r'<dd id="job-estimate">(.*?)</dd>', page.content.decode(), re.S)
    assert estimate and "UTC (in" in estimate.group(1) and "unknown" not in estimate.group(1)
