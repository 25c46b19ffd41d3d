"""What a team may ask for, on the pages (docs/limits.md): the console's team form sets the
limits (audited) and names bad values; the submit and queue pages show the limits in force and
the refusal; a what-if draft's team form has no limits."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from allocations.choices import JobState
from allocations.models import AuditEntry, Job, Team
from allocations.services import policy as services
from tests import factories as f
from tests.views.test_console import team_post


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def team_url() -> str:
    return reverse("allocations:team_detail", kwargs={"name": "team-a"})


def test_the_team_form_sets_the_limits_and_each_is_audited(personas):
    data = team_post(
        personas.team,
        {"ml.p5.48xlarge": {"quota": 8}},
        allowed_priority_classes=["training", "experimentation"],
        default_priority_class="training",
        max_gpus_per_job=8,
        max_pending_jobs_per_member=3,
        max_pending_jobs=10,
    )
    response = client_for(personas.cluster_admin).post(team_url(), data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    team = Team.objects.get(pk=personas.team.pk)
    assert team.allowed_priority_classes == ["training", "experimentation"]
    assert (team.default_priority_class.name, team.max_gpus_per_job) == ("training", 8)
    assert (team.max_pending_jobs_per_member, team.max_pending_jobs) == (3, 10)
    assert set(AuditEntry.objects.values_list("field", "new_value")) == {
        ("allowed_priority_classes", '["training", "experimentation"]'),
        ("default_priority_class", "training (70)"),
        ("max_gpus_per_job", "8"),
        ("max_pending_jobs_per_member", "3"),
        ("max_pending_jobs", "10"),
    }


def test_the_team_page_shows_the_limits_in_their_own_card(personas):
    services.team_update(
        actor=None, team=personas.team, max_gpus_per_job=8, allowed_priority_classes=["training"]
    )
    html = client_for(personas.cluster_admin).get(team_url()).content.decode()
    card = html.split('id="team-limits"')[1].split("</section>")[0]
    assert "What the team may ask for" in card
    assert 'name="max_gpus_per_job" value="8"' in card
    assert 'value="training" ' in card and "checked" in card.split('value="training"')[1].split(">")[0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"allowed_priority_classes": ["training", "urgent"]},
            "Allowed priority classes: no class is called &#x27;urgent&#x27;.",
        ),
        (
            {"default_priority_class": "urgent"},
            "Default priority class: no class is called &#x27;urgent&#x27;.",
        ),
        (
            {"allowed_priority_classes": ["training"], "default_priority_class": "inference"},
            "Default priority class &#x27;inference&#x27; is not one the team may use (training).",
        ),
        (
            {"max_gpus_per_job": "lots"},
            "Most GPUs per job must be a whole number of GPUs; got &#x27;lots&#x27;.",
        ),
        ({"max_gpus_per_job": "0"}, "Most GPUs per job must be 1 or more GPUs; got 0."),
        (
            {"max_pending_jobs_per_member": "-1"},
            "Most pending jobs per member must be 1 or more jobs; got -1.",
        ),
        (
            {"max_pending_jobs": "2.5"},
            "Most pending jobs of the team must be a whole number; got &#x27;2.5&#x27;.",
        ),
    ],
)
def test_bad_limits_in_the_team_form_name_the_field_and_value(personas, settings, message):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8}}, **settings)
    response = client_for(personas.cluster_admin).post(team_url(), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not AuditEntry.objects.exists()


def test_the_submit_page_shows_the_limits_in_force(personas):
    services.team_update(
        actor=None,
        team=personas.team,
        allowed_priority_classes=["training", "experimentation"],
        max_gpus_per_job=8,
        max_pending_jobs_per_member=5,
    )
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.PENDING)
    html = (
        client_for(personas.member)
        .get(reverse("allocations:job_submit", kwargs={"team": "team-a"}))
        .content.decode()
    )
    line = " ".join(html.split('id="team-limits">')[1].split("</p>")[0].split())
    assert line == (
        "You may submit classes training, experimentation (default experimentation); at most 8 GPUs per job; "
        "you have 1 of 5 pending; the team has 1 pending."
    )
    assert "team-a may submit: training, experimentation." in html


def test_the_queue_page_shows_the_limits_to_those_who_submit(personas):
    services.team_update(actor=None, team=personas.team, max_pending_jobs=20)
    member = client_for(personas.member).get("/teams/team-a/").content.decode()
    assert "You may submit any class (default experimentation); no limit on GPUs per job" in " ".join(
        member.split()
    )
    assert "the team has 0 of 20 pending" in member
    assert 'id="team-limits"' not in client_for(personas.viewer).get("/teams/team-a/").content.decode()


def test_submitting_above_the_allowed_class_shows_the_refusal_on_the_field(personas):
    services.team_update(actor=None, team=personas.team, allowed_priority_classes=["experimentation"])
    data = {
        "name": "serve",
        "instance_type": "ml.p5.48xlarge",
        "gpus": 4,
        "priority_class": "inference",
        "command": "serve",
    }
    response = client_for(personas.member).post(
        reverse("allocations:job_submit", kwargs={"team": "team-a"}), data
    )
    assert response.status_code == 400
    assert (
        '<span class="error" id="error-priority_class">Team team-a may submit priority classes experimentation; '
        "this job asks for inference.</span>"
    ) in response.content.decode()
    assert not Job.objects.exists()


def test_a_pending_limit_refusal_is_shown_at_the_top_of_the_form(personas):
    services.team_update(actor=None, team=personas.team, max_pending_jobs_per_member=1)
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.PENDING)
    data = {"name": "more", "instance_type": "ml.p5.48xlarge", "gpus": 4, "command": "x"}
    response = client_for(personas.member).post(
        reverse("allocations:job_submit", kwargs={"team": "team-a"}), data
    )
    assert response.status_code == 400
    assert (
        "Team team-a allows at most 1 pending job per member; bob has 1 pending." in response.content.decode()
    )


def test_resubmitting_past_a_limit_shows_the_refusal_on_the_job_page(personas):
    job = f.make_job(
        personas.team,
        personas.instance_type,
        8,
        submitter=personas.member,
        state=JobState.FINISHED,
        command="x",
    )
    services.team_update(actor=None, team=personas.team, max_gpus_per_job=4)
    response = client_for(personas.member).post(
        reverse("allocations:job_resubmit", kwargs={"pk": job.pk}), {"resubmit_token": "t1"}, follow=True
    )
    assert "Team team-a allows at most 4 GPUs per job; this job asks for 8." in response.content.decode()
    assert Job.objects.count() == 1


def test_a_drafts_team_form_has_no_limits_checked_at_submission(personas):
    """A draft holds what the engine decides with: the most GPUs running per member, which
    the engine enforces, is among its settings; the limits checked at submission are not."""
    from allocations.whatif import services as whatif

    draft = whatif.draft_create(actor=personas.cluster_admin, name="d1")
    url = reverse("allocations:whatif_draft_team", kwargs={"pk": draft.pk, "name": "team-a"})
    html = client_for(personas.cluster_admin).get(url).content.decode()
    assert 'name="fair_share_weight"' in html
    assert 'name="max_gpus_per_job"' not in html and 'id="team-limits"' not in html
    assert 'name="max_running_gpus_per_member"' in html


def test_the_team_form_sets_the_most_gpus_running_per_member_and_the_queue_page_shows_it(personas):
    """docs/limits.md: set in the limits card (audited); the member sees where they stand."""
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8}}, max_running_gpus_per_member=6)
    response = client_for(personas.cluster_admin).post(team_url(), data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    assert Team.objects.get(pk=personas.team.pk).max_running_gpus_per_member == 6
    assert AuditEntry.objects.get(field="max_running_gpus_per_member").new_value == "6"
    f.make_job(personas.team, personas.instance_type, 4, submitter=personas.member, state=JobState.RUNNING)
    f.make_job(
        personas.team, personas.instance_type, 2, submitter=personas.team_admin, state=JobState.RUNNING
    )
    line = " ".join(client_for(personas.member).get("/teams/team-a/").content.decode().split())
    assert "you have 0 pending; you run 4 of 6 GPUs; the team has 0 pending." in line
    html = client_for(personas.cluster_admin).get(team_url()).content.decode()
    card = html.split('id="team-limits"')[1].split("</section>")[0]
    assert 'name="max_running_gpus_per_member" value="6"' in card


def test_a_bad_most_gpus_running_per_member_is_named_on_the_form(personas):
    data = team_post(personas.team, {"ml.p5.48xlarge": {"quota": 8}}, max_running_gpus_per_member=0)
    response = client_for(personas.cluster_admin).post(team_url(), data)
    assert response.status_code == 200
    assert "Most GPUs running per member" in response.content.decode()
    assert not AuditEntry.objects.exists()
