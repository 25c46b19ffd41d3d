"""Team pages: my teams, the queue (positions, reasons, estimates, usage), submitting with
field errors, a job's whole history, members; constant query counts at 10 and 1,000 jobs."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocations.choices import JobEventKind, JobState
from allocations.models import ClusterPolicy, Job, JobEvent, Membership
from tests import factories as f


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def row_of(html: str, job: Job) -> str:
    match = re.search(rf'<tr id="job-{job.pk}".*?</tr>', html, re.S)
    assert match, f"job {job.pk} is not on the page"
    return match.group(0)


def test_my_teams_lists_the_users_teams_with_role_and_counts(personas):
    f.make_job(personas.team, personas.instance_type, 1)
    html = client_for(personas.viewer).get("/my-teams/").content.decode()
    assert "/teams/team-a/" in html and "Viewer" in html
    assert "/teams/team-b/" not in html


def test_the_queue_orders_pending_jobs_by_priority_then_submit_time_then_id(personas):
    now = timezone.now()
    classes = personas.priority_classes
    it = personas.instance_type
    low_early = f.make_job(personas.team, it, 1, priority_class=classes["experimentation"], submitted_at=now)
    high_late = f.make_job(
        personas.team, it, 1, priority_class=classes["inference"], submitted_at=now + timedelta(seconds=5)
    )
    low_late = f.make_job(
        personas.team,
        it,
        1,
        priority_class=classes["experimentation"],
        submitted_at=now + timedelta(seconds=9),
    )
    same_time = f.make_job(personas.team, it, 1, priority_class=classes["experimentation"], submitted_at=now)
    html = client_for(personas.member).get("/teams/team-a/").content.decode()
    positions = {
        job.pk: re.search(r'class="position">(\d+)<', row_of(html, job)).group(1)
        for job in (low_early, high_late, low_late, same_time)
    }
    assert positions == {high_late.pk: "1", low_early.pk: "2", same_time.pk: "3", low_late.pk: "4"}


def test_under_first_come_first_serve_ranking_the_queue_ignores_priority(personas):
    ClusterPolicy.objects.update(task_ranking="first-come-first-serve")
    now = timezone.now()
    it = personas.instance_type
    first = f.make_job(
        personas.team, it, 1, priority_class=personas.priority_classes["experimentation"], submitted_at=now
    )
    second = f.make_job(
        personas.team,
        it,
        1,
        priority_class=personas.priority_classes["inference"],
        submitted_at=now + timedelta(1),
    )
    html = client_for(personas.member).get("/teams/team-a/").content.decode()
    assert 'class="position">1<' in row_of(html, first)
    assert 'class="position">2<' in row_of(html, second)


def test_the_queue_shows_the_engines_reason_with_its_numbers_and_an_estimate(personas):
    now = timezone.now()
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    f.make_job(
        personas.team, it, 8, state=JobState.RUNNING, nodes=[[n1, 8]], started_at=now, requested_duration=3600
    )
    f.make_job(
        personas.other_team,
        it,
        8,
        state=JobState.RUNNING,
        nodes=[[n2, 8]],
        started_at=now,
        requested_duration=7200,
    )
    waiting = f.make_job(
        personas.team,
        it,
        8,
        pending_reason_code="borrow-limit",
        pending_reason_message="team-a uses 8 of its 12 GPU limit on ml.p5.48xlarge; 8 more would exceed it",
    )
    html = client_for(personas.member).get("/teams/team-a/").content.decode()
    row = row_of(html, waiting)
    assert "borrow-limit" in row and "uses 8 of its 12 GPU limit" in row
    expected = (now + timedelta(seconds=3600)).strftime("%Y-%m-%d %H:%M")
    assert expected in row, row


def test_the_estimate_is_unknown_when_a_running_job_has_no_duration(personas):
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    endless = f.make_job(
        personas.team, it, 8, state=JobState.RUNNING, nodes=[[n1, 8]], started_at=timezone.now()
    )
    f.make_job(personas.other_team, it, 8, state=JobState.RUNNING, nodes=[[n2, 8]], started_at=timezone.now())
    waiting = f.make_job(personas.team, it, 8)
    row = row_of(client_for(personas.member).get("/teams/team-a/").content.decode(), waiting)
    assert '<td class="estimate" data-estimate="">unknown' in row
    assert f"Job #{endless.pk} runs with no requested duration, so when it ends is unknown." in row, row


def test_the_queue_shows_quota_usage_borrowed_and_lent(personas):
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    f.make_job(
        personas.team, it, 10, state=JobState.RUNNING, nodes=[[n1, 8], [n2, 2]], started_at=timezone.now()
    )
    html = client_for(personas.member).get("/teams/team-a/").content.decode()
    usage = re.search(r'<tr data-instance-type="ml.p5.48xlarge">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", usage)
    assert cells[:5] == ["ml.p5.48xlarge", "8", "10", "2", "0"]
    html = client_for(personas.other_member).get("/teams/team-b/").content.decode()
    usage = re.search(r'<tr data-instance-type="ml.p5.48xlarge">(.*?)</tr>', html, re.S).group(1)
    assert re.findall(r"<td>(.*?)</td>", usage)[:5] == ["ml.p5.48xlarge", "8", "0", "0", "2"]


def test_the_live_fragment_is_the_queue_without_the_page(personas):
    job = f.make_job(personas.team, personas.instance_type, 1)
    html = client_for(personas.member).get("/teams/team-a/live/").content.decode()
    assert f'id="job-{job.pk}"' in html and "<html" not in html


def test_viewers_see_the_queue_without_submit_or_cancel(personas):
    f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member)
    html = client_for(personas.viewer).get("/teams/team-a/").content.decode()
    assert "Submit a job" not in html and "Cancel" not in html
    html = client_for(personas.member).get("/teams/team-a/").content.decode()
    assert "Submit a job" in html and "Cancel" in html


def _bulk_jobs(personas, count: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            team=personas.team,
            submitter=personas.member,
            instance_type=personas.instance_type,
            gpus=16,  # more than the team may ever borrow up to: all stay pending cheaply
            name=f"bulk-{i}",
            priority_class=personas.priority_classes["training"],
            submitted_at=now - timedelta(seconds=i),
            pending_reason_code="borrow-limit",
            pending_reason_message="too big",
        )
        for i in range(count)
    )


@pytest.mark.parametrize("url", ["/teams/team-a/", "/teams/team-a/live/", "/my-teams/"])
def test_page_query_count_does_not_grow_with_the_jobs(personas, url):
    counts = []
    for total in (10, 1000):
        Job.objects.all().delete()
        _bulk_jobs(personas, total)
        client = client_for(personas.member)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


# --- Submitting -------------------------------------------------------------------------------
FORM = {"name": "train", "instance_type": "ml.p5.48xlarge", "gpus": "4", "command": "python train.py"}


def test_the_submit_form_offers_only_the_policys_classes_with_the_lowest_selected(personas):
    html = client_for(personas.member).get("/teams/team-a/submit/").content.decode()
    options = re.findall(
        r'<option value="([a-z-]+)"( selected)?>',
        html.split('name="priority_class"')[1].split("</select>")[0],
    )
    assert [name for name, _ in options] == ["inference", "training", "fine-tuning", "experimentation"]
    assert [name for name, selected in options if selected] == ["experimentation"]


def test_submitting_redirects_to_the_job_page_with_its_history(personas):
    response = client_for(personas.member).post(
        "/teams/team-a/submit/", {**FORM, "priority_class": "training"}
    )
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.priority_class.name, job.submitter) == ("training", personas.member)
    html = client_for(personas.member).get(response["Location"]).content.decode()
    assert 'data-kind="submitted"' in html


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"gpus": "-1"}, "gpus", []),
        ({"gpus": "abc"}, "gpus", []),
        ({"instance_type": "ml.nope"}, "instance_type", []),
        ({"priority_class": "urgent"}, "priority_class", []),
        ({"gpus": "12"}, "gpus", ["8 GPUs per node", "12"]),
        ({"gpus": "24"}, "gpus", ["12"]),
        ({"requested_duration": "-4"}, "requested_duration", []),
        ({"requested_duration": "soon"}, "requested_duration", []),
        ({"command": ""}, "command", ["command or an image"]),
    ],
)
def test_bad_input_is_shown_on_the_field_and_nothing_is_submitted(personas, changes, field, words):
    response = client_for(personas.member).post("/teams/team-a/submit/", {**FORM, **changes})
    assert response.status_code == 400
    html = response.content.decode()
    error = re.search(rf'<span class="error" id="error-{field}">(.*?)</span>', html, re.S)
    assert error, html
    for word in words:
        assert word in error.group(1)
    assert not Job.objects.exists()


# --- A job's page -----------------------------------------------------------------------------
def test_the_job_page_shows_its_whole_history(personas):
    now = timezone.now()
    it = personas.instance_type
    job = f.make_job(personas.team, it, 8, submitter=personas.member, state=JobState.FINISHED)
    preemptor = f.make_job(personas.other_team, it, 8, name="reclaimer")
    events = [
        (JobEventKind.SUBMITTED, {}),
        (JobEventKind.STARTED, {"nodes": [["gpu-node-1", 8]]}),
        (
            JobEventKind.PREEMPTED,
            {"preemptor": preemptor, "reason": "reclaim", "message": "team-b reclaims its quota"},
        ),
        (JobEventKind.REQUEUED, {}),
        (JobEventKind.STARTED, {"nodes": [["gpu-node-2", 8]]}),
        (JobEventKind.FINISHED, {}),
    ]
    for i, (kind, fields) in enumerate(events):
        JobEvent.objects.create(job=job, kind=kind, at=now + timedelta(seconds=i), **fields)
    html = client_for(personas.viewer).get(f"/jobs/{job.pk}/").content.decode()
    kinds = re.findall(r'<tr data-kind="([a-z]+)">', html)
    assert kinds == ["submitted", "started", "preempted", "requeued", "started", "finished"]
    assert "gpu-node-1 (8 GPUs)" in html and "gpu-node-2 (8 GPUs)" in html
    assert f"reclaimer (#{preemptor.pk}, team team-b)" in html and "<code>reclaim</code>" in html
    assert "team-b reclaims its quota" in html
    # Team-a's viewer may read the history but not resubmit.
    assert "resubmit-job" not in html
    assert "resubmit-job" in client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()


def test_cancel_from_the_job_page(personas):
    job = f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member, command="x")
    response = client_for(personas.member).post(f"/jobs/{job.pk}/cancel/", {"confirm": "yes"})
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


@pytest.mark.parametrize("method", ["get", "post"])
def test_cancel_asks_for_confirmation_first_and_cancels_nothing(personas, method):
    job = f.make_job(personas.team, personas.instance_type, 1, submitter=personas.member, command="x")
    response = getattr(client_for(personas.member), method)(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f"Cancel job {job.name} <small>#{job.pk}</small>?" in html
    assert 'name="confirm" value="yes"' in html and 'id="keep-job"' in html
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_cancelling_an_ended_job_says_why_and_changes_nothing(personas):
    job = f.make_job(
        personas.team, personas.instance_type, 1, submitter=personas.member, state=JobState.FINISHED
    )
    response = client_for(personas.member).post(f"/jobs/{job.pk}/cancel/", {"confirm": "yes"}, follow=True)
    assert "can be cancelled" in response.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.FINISHED


# --- Members ----------------------------------------------------------------------------------
def test_a_team_admin_adds_a_member_by_username(personas):
    response = client_for(personas.team_admin).post(
        "/teams/team-a/members/", {"username": "nobody", "role": "member"}
    )
    assert response.status_code == 302
    assert Membership.objects.get(user=personas.outsider).role == "member"


def test_adding_an_unknown_user_is_a_field_error(personas):
    response = client_for(personas.team_admin).post(
        "/teams/team-a/members/", {"username": "ghost", "role": "member"}
    )
    assert response.status_code == 400
    assert "ghost" in response.content.decode()


def test_an_unknown_role_changes_nothing(personas):
    membership = Membership.objects.get(user=personas.viewer)
    response = client_for(personas.team_admin).post(
        f"/teams/team-a/members/{membership.pk}/role/", {"role": "boss"}, follow=True
    )
    assert "boss" in response.content.decode()
    membership.refresh_from_db()
    assert membership.role == "viewer"


def test_a_membership_of_another_team_answers_404_even_to_a_team_admin(personas):
    theirs = Membership.objects.get(user=personas.other_member)
    response = client_for(personas.team_admin).post(f"/teams/team-a/members/{theirs.pk}/remove/")
    assert response.status_code == 404
    assert Membership.objects.filter(pk=theirs.pk).exists()


def test_adding_someone_already_in_the_team_is_an_error_on_the_username(personas):
    response = client_for(personas.team_admin).post(
        "/teams/team-a/members/", {"username": "bob", "role": "viewer"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "already a member of team-a" in html
    assert Membership.objects.get(user=personas.member).role == "member"


def _username_errors(html: str) -> list[str]:
    return [
        re.sub(r"\s+", " ", e).strip()
        for e in re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', html, re.S)
    ]


def test_a_team_admin_cannot_add_staff_and_cannot_tell_them_from_unknown_names(personas):
    """Staff, superusers and deactivated accounts are not a team admin's to add, and the answer
    is word for word the one for a name nobody has: the form tells no one which names exist."""
    root = f.make_user("root")  # a superuser need not be staff
    root.is_superuser = True
    root.save()
    gone = f.make_user("gone")
    gone.is_active = False
    gone.save()
    client = client_for(personas.team_admin)
    answers = {}
    for name in ("admin", "root", "gone", "ghost"):
        response = client.post("/teams/team-a/members/", {"username": name, "role": "member"})
        assert response.status_code == 400, name
        answers[name] = _username_errors(response.content.decode().replace(name, "NAME"))
    assert answers["ghost"] == ["<li>No user called &#x27;NAME&#x27; can be added to this team.</li>"]
    assert answers["admin"] == answers["root"] == answers["gone"] == answers["ghost"]
    assert not Membership.objects.filter(user__username__in=answers).exists()


def test_a_cluster_admin_adds_staff_to_a_team_from_its_page(personas):
    f.make_user("operator", staff=True)
    response = client_for(personas.cluster_admin).post(
        "/teams/team-a/members/", {"username": "operator", "role": "viewer"}
    )
    assert response.status_code == 302
    assert Membership.objects.get(user__username="operator").role == "viewer"
