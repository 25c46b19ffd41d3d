"""A week of history for the what-if lab: two teams on two 8-GPU nodes, one node down for six
hours, and jobs whose real run times are recorded.

team-a asks for far more than its quota of 8 GPUs while team-b, which lends nothing under the
live policy (lend limit 0), mostly idles: a draft that lends team-b's idle quota must cut
team-a's waits and the GPU-hours left idle while jobs waited.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from allocations.choices import JobState
from allocations.models import AuditEntry, InstanceType, Job, TeamQuota
from tests import factories as f
from tests.conftest import Personas

HOUR = timedelta(hours=1)


@dataclass
class History:
    personas: Personas
    start: datetime
    end: datetime
    jobs: list[Job]


def build_week(personas: Personas, *, seed: int = 7, per_day: int = 6) -> History:
    """Seven days of jobs ending now. Run times are what the rows say (finished - started);
    the start times themselves are the live cluster's business and do not matter here."""
    InstanceType.objects.filter(pk=personas.instance_type.pk).update(price_per_gpu_hour=Decimal("4.5"))
    TeamQuota.objects.filter(team=personas.other_team).update(lend_limit=0)
    TeamQuota.objects.filter(team=personas.team).update(borrow_limit_percent=100)  # may borrow a node
    end = timezone.now().replace(microsecond=0)
    start = end - timedelta(days=7)
    rng = random.Random(seed)
    it = personas.instance_type
    classes = personas.priority_classes
    jobs = []
    for day in range(7):
        base = start + timedelta(days=day)
        for n in range(per_day):
            submitted = base + timedelta(hours=rng.randrange(0, 20), minutes=rng.randrange(60))
            started = submitted + timedelta(minutes=rng.randrange(0, 90))
            run = timedelta(minutes=rng.randrange(60, 240))
            jobs.append(
                f.make_job(
                    personas.team,
                    it,
                    8,
                    submitted_at=submitted,
                    started_at=started,
                    finished_at=started + run,
                    state=JobState.FINISHED,
                    priority_class=classes["training" if n % 2 else "experimentation"],
                    submitter=personas.member,
                )
            )
        submitted = base + timedelta(hours=rng.randrange(0, 20))
        jobs.append(
            f.make_job(
                personas.other_team,
                it,
                4,
                submitted_at=submitted,
                started_at=submitted,
                finished_at=submitted + 2 * HOUR,
                state=JobState.FINISHED,
                priority_class=classes["inference"],
            )
        )
    # One job cancelled while it waited, and one still running, with a requested duration.
    jobs.append(
        f.make_job(
            personas.team,
            it,
            8,
            submitted_at=end - 30 * HOUR,
            finished_at=end - 29 * HOUR,
            state=JobState.CANCELLED,
        )
    )
    jobs.append(
        f.make_job(
            personas.team,
            it,
            8,
            submitted_at=end - 3 * HOUR,
            started_at=end - 2 * HOUR,
            state=JobState.RUNNING,
            requested_duration=4 * 3600,
        )
    )
    # A node down for six hours on day three, as the audit trail of node changes records it.
    node = personas.nodes[0]
    for at, old, new in (
        (start + timedelta(days=3), "ready", "down"),
        (start + timedelta(days=3, hours=6), "down", "ready"),
    ):
        AuditEntry.objects.create(
            at=at,
            actor_name="system",
            action="update",
            object_type="node",
            object_id=str(node.pk),
            object_repr=node.name,
            field="state",
            old_value=old,
            new_value=new,
        )
    return History(personas, start, end, jobs)


@pytest.fixture
def week(personas: Personas) -> History:
    return build_week(personas)
