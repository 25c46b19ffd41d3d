"""The job page's Resubmit button: its form carries a one-time token, so the form sent twice
(a double click, a browser resending it) makes one job and both answers lead to it."""

from __future__ import annotations

import re

from django.contrib.messages import get_messages
from django.test import Client

from allocations.choices import JobState
from allocations.models import Job
from tests import factories as f


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _token(client: Client, job: Job) -> str:
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    match = re.search(r'name="resubmit_token" value="([^"]+)"', html)
    assert match, "the resubmit form carries no token"
    return match[1]


def _ended_job(personas) -> Job:
    return f.make_job(
        personas.team,
        personas.instance_type,
        2,
        state=JobState.FAILED,
        command="x",
        submitter=personas.member,
    )


def test_the_resubmit_form_sent_twice_makes_one_job(personas):
    job = _ended_job(personas)
    client = _client(personas.member)
    token = _token(client, job)
    first = client.post(f"/jobs/{job.pk}/resubmit/", {"resubmit_token": token})
    again = client.post(f"/jobs/{job.pk}/resubmit/", {"resubmit_token": token})
    new = Job.objects.get(state=JobState.PENDING)
    assert first.status_code == again.status_code == 302
    assert first["Location"] == again["Location"] == f"/jobs/{new.pk}/"
    assert "sent already" in " ".join(str(m) for m in get_messages(again.wsgi_request))
    # The page drawn again has a new token: a new click is a new resubmit.
    fresh = _token(client, job)
    assert fresh != token
    client.post(f"/jobs/{job.pk}/resubmit/", {"resubmit_token": fresh})
    assert Job.objects.filter(state=JobState.PENDING).count() == 2


def test_another_user_posting_the_same_token_makes_their_own_job(personas):
    job = _ended_job(personas)
    token = _token(_client(personas.member), job)
    _client(personas.member).post(f"/jobs/{job.pk}/resubmit/", {"resubmit_token": token})
    _client(personas.team_admin).post(f"/jobs/{job.pk}/resubmit/", {"resubmit_token": token})
    assert Job.objects.filter(state=JobState.PENDING).count() == 2
