"""The demo workload keeps the demo cluster busy and shows borrowing, lending and reclaim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum

from allocations.models import Cluster, Job, JobEvent, TeamQuota
from allocations.services.demo import PROFILES, _in_burst, demo_workload_tick
from allocations.services.loop import run_allocation_cycle
from tests.conftest import Personas

pytestmark = pytest.mark.django_db


def running_gpus(team: str, instance_type: str) -> int:
    return (
        Job.objects.filter(state="running", team__name=team, instance_type__name=instance_type).aggregate(
            total=Sum("gpus")
        )["total"]
        or 0
    )


def test_does_nothing_unless_the_cluster_asks_for_it(personas: Personas) -> None:
    assert demo_workload_tick(datetime.now(UTC)) == 0
    assert not Job.objects.exists()


def test_tops_every_teams_backlog_up_to_its_demand_once(personas: Personas) -> None:
    """Whatever the sizes drawn (they are seeded by the minute, so 40 minutes are tried), one
    tick of at most MAX_SUBMISSIONS_PER_TICK jobs a team brings it to its demand."""
    Cluster.objects.filter(pk=1).update(backend_settings={"demo_workload": True})
    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    for minute in range(40):
        JobEvent.objects.all().delete()
        Job.objects.all().delete()
        now = start + timedelta(minutes=minute)
        assert demo_workload_tick(now) > 0
        for team in (personas.team, personas.other_team):
            jobs = Job.objects.filter(team=team)
            assert jobs.aggregate(total=Sum("gpus"))["total"] == 8, (minute, team.name)  # quota 8, demand 1.0
            assert all(job.requested_duration and job.priority_class and job.image for job in jobs)
        assert JobEvent.objects.filter(kind="submitted").count() == Job.objects.count()
        assert demo_workload_tick(now) == 0  # already at its demand


def test_demo_cluster_shows_borrowing_lending_and_reclaim(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("load_demo")
    capsys.readouterr()
    speech = PROFILES["speech"]
    # A moment outside speech's burst, then one inside it (bursts are on the wall clock).
    quiet = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    while _in_burst(speech, "speech", quiet):
        quiet += timedelta(seconds=30)
    loud = quiet
    while not _in_burst(speech, "speech", loud):
        loud += timedelta(seconds=30)

    for _ in range(3):
        demo_workload_tick(quiet)
        run_allocation_cycle(trigger="test")
    # Interns want far more than their quota and borrow; speech is idle and lends.
    interns = TeamQuota.objects.get(team__name="interns", instance_type__name="ml.g5.12xlarge").quota
    assert running_gpus("interns", "ml.g5.12xlarge") > interns
    assert not Job.objects.filter(team__name="speech").exists()

    demo_workload_tick(loud)
    run_allocation_cycle(trigger="test")
    # Speech wants its quota back: it starts jobs, and borrowers are preempted to make room.
    assert running_gpus("speech", "ml.p4d.24xlarge") + running_gpus("speech", "ml.g5.12xlarge") > 0
    assert JobEvent.objects.filter(kind="preempted", preemptor__team__name="speech").exists()
