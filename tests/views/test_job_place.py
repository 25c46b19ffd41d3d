"""A pending job's place on its page and on its team's queue: position, estimated start, the
reason in plain words beside its code, and why an estimate is unknown or ahead of its turn."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from allocations.choices import PENDING_CODE_WORDS, JobState
from allocations.engine import PendingCode
from tests import factories as f
from tests.conftest import Personas
from tests.views.test_console import signed_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(personas: Personas):
    """team-a holds node 1 for an hour, team-b node 2 for two; team-a waits with a big job
    (ahead) and a small one behind it that fits on node 1's 4 free GPUs now."""
    now = timezone.now()
    it = personas.instance_type
    n1, n2 = (node.name for node in personas.nodes)
    f.make_job(
        personas.team, it, 4, state=JobState.RUNNING, nodes=[[n1, 4]], started_at=now, requested_duration=3600
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
    big = f.make_job(
        personas.team,
        it,
        8,
        name="big",
        submitter=personas.member,
        submitted_at=now - timedelta(minutes=2),
        requested_duration=600,
        pending_reason_code=PendingCode.NO_IDLE_CAPACITY.value,
        pending_reason_message="team-a uses 4 of its 8 GPU quota; 4 GPUs idle in the pool, 8 needed",
    )
    small = f.make_job(
        personas.team,
        it,
        4,
        name="small",
        submitter=personas.member,
        submitted_at=now - timedelta(minutes=1),
        requested_duration=600,
    )
    return big, small


def test_every_pending_code_has_plain_words():
    assert set(PENDING_CODE_WORDS) == {code.value for code in PendingCode}


def test_the_job_page_shows_position_estimate_and_the_reason_in_words(personas, busy):
    big, small = busy
    client = signed_in(personas.member)
    response = client.get(reverse("allocations:job_detail", kwargs={"pk": big.pk}))
    body = response.content.decode()
    assert "1 in team-a's queue" in body
    assert PENDING_CODE_WORDS["no-idle-capacity"] in body
    assert "<code>no-idle-capacity</code>" in body
    # It starts when team-a's running job ends, in an hour.
    wait = response.context["place"].estimated_start - timezone.now()
    assert timedelta(minutes=58) < wait <= timedelta(hours=1)
    assert "Estimated start" in body
    small_page = client.get(reverse("allocations:job_detail_live", kwargs={"pk": small.pk})).content.decode()
    assert "2 in team-a's queue" in small_page
    # The small job starts now, before the big one ahead of it, and says why.
    assert "now" in small_page
    assert f"A smaller job (4 GPUs) that fits sooner than #{big.pk} ahead of it (8 GPUs)." in small_page


@pytest.mark.usefixtures("busy")
def test_the_queue_page_says_why_a_job_starts_before_the_one_ahead(personas):
    body = signed_in(personas.member).get(reverse("allocations:team_queue", kwargs={"team": "team-a"}))
    rows = {row.job.name: row for row in body.context["queue"].pending}
    assert rows["small"].estimated_start < rows["big"].estimated_start
    assert rows["small"].estimate_note.startswith("a smaller job (4 GPUs)")
    assert rows["big"].estimate_note == ""


def test_an_unknown_estimate_says_why(personas, busy):
    big, _small = busy
    # team-b's job no longer says when it ends: nothing behind it can be forecast.
    type(big).objects.filter(team=personas.other_team).update(requested_duration=None)
    body = signed_in(personas.member).get(reverse("allocations:job_detail", kwargs={"pk": big.pk}))
    text = body.content.decode()
    assert "unknown" in text
    assert "runs with no requested duration, so when it ends is unknown." in text


def test_a_running_job_has_no_queue_place(personas, busy):
    running = type(busy[0]).objects.filter(state=JobState.RUNNING, team=personas.team).get()
    body = signed_in(personas.member).get(reverse("allocations:job_detail", kwargs={"pk": running.pk}))
    assert body.context["place"] is None
    assert "Queue position" not in body.content.decode()
