"""The console's job list: search, filters, sorts, bad parameters, positions and estimates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from allocations.choices import JobState
from tests import factories as f
from tests.conftest import Personas
from tests.views.test_console import signed_in

pytestmark = pytest.mark.django_db
URL = "/console/jobs/"


@pytest.fixture
def admin(personas: Personas):
    return signed_in(personas.cluster_admin)


@pytest.fixture
def jobs(personas: Personas):
    """Jobs of both teams, by different submitters, types and classes, in every state."""
    g5 = f.make_instance_type("ml.g5.12xlarge", 4)
    classes = personas.priority_classes
    now = timezone.now()
    return {
        "bobs": f.make_job(
            personas.team,
            personas.instance_type,
            8,
            name="llama-pretrain",
            submitter=personas.member,
            priority_class=classes["training"],
            submitted_at=now - timedelta(minutes=3),
            requested_duration=3600,
        ),
        "alices": f.make_job(
            personas.team,
            g5,
            4,
            name="eval-sweep",
            submitter=personas.team_admin,
            priority_class=classes["experimentation"],
            submitted_at=now - timedelta(minutes=2),
            requested_duration=3600,
        ),
        "olgas": f.make_job(
            personas.other_team,
            personas.instance_type,
            2,
            name="serve-canary",
            submitter=personas.other_member,
            priority_class=classes["inference"],
            state=JobState.RUNNING,
            nodes=[[personas.nodes[0].name, 2]],
            started_at=now,
            submitted_at=now - timedelta(minutes=1),
            requested_duration=3600,
        ),
    }


def names(response) -> list[str]:
    return [job.name for job in response.context["page"]]


def test_url_is_the_console_jobs_page():
    assert reverse("allocations:console_jobs") == URL


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"q": "olg"}, ["serve-canary"]),  # a part of the submitter's username
        ({"q": "LLAMA"}, ["llama-pretrain"]),  # a part of the name, any case
        ({"q": "team-b"}, ["serve-canary"]),  # the team's name
        ({"submitter": "alice"}, ["eval-sweep"]),
        ({"team": "team-a"}, ["eval-sweep", "llama-pretrain"]),
        ({"instance_type": "ml.g5.12xlarge"}, ["eval-sweep"]),
        ({"priority_class": "inference"}, ["serve-canary"]),
        ({"state": "running"}, ["serve-canary"]),
        ({"state": "pending", "team": "team-a", "q": "sweep"}, ["eval-sweep"]),
        ({"q": "nothing-like-it"}, []),
    ],
)
def test_search_and_filters(admin, jobs, params, expected):
    response = admin.get(URL, params)
    assert response.status_code == 200
    assert names(response) == expected


def test_search_by_id(admin, jobs):
    assert names(admin.get(URL, {"q": f"#{jobs['alices'].pk}"})) == ["eval-sweep"]


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("", ["serve-canary", "eval-sweep", "llama-pretrain"]),  # newest first
        ("submitted", ["llama-pretrain", "eval-sweep", "serve-canary"]),
        ("name", ["eval-sweep", "llama-pretrain", "serve-canary"]),
        ("-name", ["serve-canary", "llama-pretrain", "eval-sweep"]),
        ("gpus", ["serve-canary", "eval-sweep", "llama-pretrain"]),
        ("-priority", ["serve-canary", "llama-pretrain", "eval-sweep"]),
        ("submitter", ["eval-sweep", "llama-pretrain", "serve-canary"]),  # alice, bob, olga
        ("team", ["llama-pretrain", "eval-sweep", "serve-canary"]),  # ties by id
        ("instance_type", ["eval-sweep", "llama-pretrain", "serve-canary"]),
    ],
)
def test_sorts(admin, jobs, sort, expected):
    assert names(admin.get(URL, {"sort": sort} if sort else {})) == expected


def test_the_sorted_column_header_links_to_the_other_direction(admin, jobs):
    body = admin.get(URL, {"sort": "name", "q": "a"}).content.decode()
    assert "?sort=-name&amp;q=a" in body or "?q=a&amp;sort=-name" in body
    assert "Job▲" in body


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"sort": "password"}, "sort=password: not a column this list sorts by"),
        ({"sort": "-name; drop table"}, "sort=-name; drop table: not a column"),
        ({"state": "exploded"}, "state=exploded: no such state"),
        ({"team": "no-such-team"}, "team=no-such-team: no such team."),
        ({"instance_type": "tpu"}, "instance_type=tpu: no such instance type."),
        ({"priority_class": "vip"}, "priority_class=vip: no such priority class."),
        ({"page": "many"}, None),  # a bad page number shows the first page
    ],
)
def test_a_bad_parameter_is_named_with_its_value_never_a_500(admin, jobs, params, message):
    response = admin.get(URL, {**params, "q": "llama"})
    if message is None:
        assert response.status_code == 200
    else:
        assert response.status_code == 400
        assert message in response.content.decode()
    # The good parameters still apply.
    assert names(response) == ["llama-pretrain"]


def test_pending_jobs_show_their_position_and_estimate(admin, personas, jobs):
    # team-a: llama-pretrain (training, 70) ranks before eval-sweep (experimentation, 10).
    response = admin.get(URL)
    rows = {job.name: place for job, place in response.context["rows"]}
    assert rows["serve-canary"] is None  # running: no place in a queue
    assert rows["llama-pretrain"].position == 1
    assert rows["eval-sweep"].position == 2
    body = response.content.decode()
    # llama-pretrain fits now; g5 has no nodes, so eval-sweep is unknown, with its reason.
    assert rows["llama-pretrain"].estimated_start is not None
    assert rows["eval-sweep"].estimated_start is None
    assert rows["eval-sweep"].note == "no job that runs or waits frees room for it"
    assert "No job that runs or waits frees room for it." in body


# Query counts do not grow with the jobs shown (STYLE.md); two sizes, the same count.
@pytest.mark.parametrize("params", [{}, {"q": "job", "sort": "-priority"}])
def test_the_job_list_makes_the_same_number_of_queries_at_two_sizes(
    admin, personas, params, django_assert_num_queries
):
    def add(count: int) -> None:
        classes = list(personas.priority_classes.values())
        for i in range(count):
            team = personas.team if i % 2 else personas.other_team
            f.make_job(
                team,
                personas.instance_type,
                1 + i % 8,
                name=f"job-{i}",
                submitter=personas.member,
                priority_class=classes[i % len(classes)],
                state=JobState.PENDING if i % 3 else JobState.FINISHED,
            )

    add(6)
    admin.get(URL, params)  # warm the session
    with CaptureQueriesContext(connection) as small:
        assert len(admin.get(URL, params).context["page"]) == 6
    add(60)
    with django_assert_num_queries(len(small.captured_queries)):
        assert len(admin.get(URL, params).context["page"]) == 50


def test_a_state_the_engine_refuses_makes_estimates_unknown_not_a_500(admin, personas):
    # A running job on a node the cluster no longer has: the engine refuses the snapshot.
    f.make_job(personas.team, personas.instance_type, 8, state=JobState.RUNNING, nodes=[["gone", 8]])
    waiting = f.make_job(personas.team, personas.instance_type, 8, requested_duration=60)
    response = admin.get(URL)
    assert response.status_code == 200
    place = dict(response.context["rows"])[waiting]
    assert place.estimated_start is None
    assert place.note.startswith("the cluster's state cannot be forecast (jobs[")
