"""The most GPUs running per member inside a team (docs/limits.md), through the allocation loop
on the simulated backend: the snapshot carries the team's limit and each job's submitter, and a
member's job past it is stored pending with the engine's reason while a colleague's starts."""

from __future__ import annotations

import pytest

from allocations.models import Job
from allocations.services import policy as services
from tests.conftest import Personas
from tests.services.test_loop import cycle, submit

pytestmark = pytest.mark.django_db


def test_a_member_at_the_limit_waits_with_its_reason_and_a_colleague_starts(personas: Personas) -> None:
    services.team_update(actor=None, team=personas.team, max_running_gpus_per_member=4)
    bob, alice = personas.member, personas.team_admin
    first = submit(personas, "team-a", 4, submitter=bob)
    second = submit(personas, "team-a", 2, submitter=bob)
    colleague = submit(personas, "team-a", 2, submitter=alice)

    run = cycle()

    states = {job.pk: job.state for job in Job.objects.all()}
    assert states == {first.pk: "running", second.pk: "pending", colleague.pk: "running"}
    second.refresh_from_db()
    assert second.pending_reason_code == "member-limit"
    assert second.pending_reason_message == (
        "member bob runs 4 GPUs in team team-a; with this job's 2 that would be 6, "
        "above the team's limit of 4 GPUs running per member"
    )
    assert (run.started, run.pending) == (2, 1)


def test_a_job_without_a_submitter_is_not_held_to_the_limit(personas: Personas) -> None:
    services.team_update(actor=None, team=personas.team, max_running_gpus_per_member=1)
    job = submit(personas, "team-a", 4)
    cycle()
    job.refresh_from_db()
    assert job.state == "running"


def test_a_limit_lowered_later_preempts_nobody(personas: Personas) -> None:
    running = submit(personas, "team-a", 4, submitter=personas.member)
    cycle()
    services.team_update(actor=None, team=personas.team, max_running_gpus_per_member=2)
    waiting = submit(personas, "team-a", 1, submitter=personas.member)
    run = cycle()
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert (running.state, waiting.state, waiting.pending_reason_code) == (
        "running",
        "pending",
        "member-limit",
    )
    assert run.preempted == 0
