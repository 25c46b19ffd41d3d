"""Property tests of the job figures that the weekly reports and the dashboards share: for any
lifecycle of any jobs, ``activity_by_team`` (a walk of plain rows, no database) gives starts
and preemptions that add up and GPU-hours lost equal to what each preempted event records it
lost or, for an event recorded without it, the preempted run's GPU-hours, and
``job_waits`` (in the database) one wait per start in the week, never negative, from the job's
latest submission or requeue."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocations.models import Job, JobEvent
from allocations.reports.weeks import Week
from allocations.selectors.history import activity_by_team, job_waits, mean_wait, p95_wait
from tests import factories as f

WEEK = Week.parse("2026-W47", "UTC")
ORIGIN = WEEK.start - timedelta(days=3)


@st.composite
def lifecycle(draw: st.DrawFn, job_id: int) -> list[tuple]:
    """One job's events in order: submitted, then (started, (preempted, requeued | finished))*;
    a preempted event records its run and lost GPU-seconds (a checkpoint kept some) or, as
    events recorded before those fields, neither."""
    team = draw(st.integers(1, 3))
    gpus = draw(st.integers(1, 8))
    at = ORIGIN + timedelta(minutes=draw(st.integers(0, 14 * 24 * 60)))
    submitted = at
    rows = [(job_id, team, gpus, submitted, "submitted", at, "", None, None, None)]
    for _ in range(draw(st.integers(0, 4))):
        at += timedelta(minutes=draw(st.integers(0, 3000)))
        rows.append((job_id, team, gpus, submitted, "started", at, "", None, None, None))
        ran = draw(st.integers(0, 3000)) * 60.0
        at += timedelta(seconds=ran)
        if draw(st.booleans()):
            reason = draw(st.sampled_from(["in-team", "reclaim", "fair-share"]))
            preemptor = draw(st.sampled_from([None, 1, 2, 3]))
            lost = gpus * draw(st.floats(0, ran)) if draw(st.booleans()) else None
            recorded = ran if lost is not None else None
            rows.append((job_id, team, gpus, submitted, "preempted", at, reason, preemptor, recorded, lost))
            rows.append((job_id, team, gpus, submitted, "requeued", at, reason, None, None, None))
        else:
            kind = draw(st.sampled_from(["finished", "failed"]))
            rows.append((job_id, team, gpus, submitted, kind, at, "", None, None, None))
            break
    return rows


@st.composite
def histories(draw: st.DrawFn) -> list[tuple]:
    rows = []
    for job_id in range(draw(st.integers(0, 6))):
        rows += draw(lifecycle(job_id))
    return rows


def in_week(at: datetime) -> bool:
    return WEEK.start <= at < WEEK.end


@settings(max_examples=200, deadline=None)
@given(histories())
def test_job_figures_add_up(rows: list[tuple]) -> None:
    # What the query returns: every event of the jobs (also after the week), by job, in time order.
    walked = [
        (job, team, gpus, kind, at, preemptor, ran_s, lost)
        for job, team, gpus, _, kind, at, _, preemptor, ran_s, lost in rows
    ]
    jobs = activity_by_team(WEEK.start, WEEK.end, walked)
    for team, figures in jobs.items():
        mine = [r for r in rows if r[1] == team]
        starts = [r for r in mine if r[4] == "started" and in_week(r[5])]
        assert figures.started == len({r[0] for r in starts})
        preempted = [r for r in mine if r[4] == "preempted" and in_week(r[5])]
        assert figures.preempted == len(preempted)
        assert figures.preemptions_caused == sum(
            1 for r in rows if r[4] == "preempted" and in_week(r[5]) and r[7] == team
        )
        # Each preempted run: what its event records it lost, else the GPUs times the time since
        # that job's previous start (in order).
        lost = 0.0
        for i, r in enumerate(rows):
            if r[1] == team and r[4] == "preempted" and in_week(r[5]):
                if r[9] is not None:
                    lost += r[9] / 3600
                    continue
                start = next(s[5] for s in reversed(rows[:i]) if s[0] == r[0] and s[4] == "started")
                lost += r[2] * (r[5] - start).total_seconds() / 3600
        assert abs(figures.gpu_hours_lost - lost) < 1e-6


@pytest.fixture
def three_teams(personas):
    return {1: personas.team, 2: personas.other_team, 3: f.make_team("team-c", {personas.instance_type: 8})}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=histories())
def test_waits_are_one_per_start_from_the_latest_submission_or_requeue(
    three_teams, rows: list[tuple]
) -> None:
    """``job_waits`` (SQL: a running maximum over each job's events) against the rule read off
    the events in order."""
    Job.objects.all().delete()
    personas_type = three_teams[1].quotas.get().instance_type
    jobs: dict[int, Job] = {}
    for job_id, team, gpus, submitted, kind, at, reason, *_ in rows:
        if job_id not in jobs:
            jobs[job_id] = f.make_job(three_teams[team], personas_type, gpus, submitted_at=submitted)
        JobEvent.objects.create(job=jobs[job_id], kind=kind, at=at, reason=reason)
    expected: dict[int, list[float]] = {}
    ready: dict[int, datetime] = {}
    for job_id, team, _, submitted, kind, at, *_ in rows:
        if kind in ("submitted", "requeued"):
            ready[job_id] = at
        elif kind == "started" and in_week(at):
            wait = (at - ready.get(job_id, submitted)).total_seconds()
            expected.setdefault(three_teams[team].pk, []).append(max(0.0, wait))
    waits = job_waits(WEEK.start, WEEK.end)
    assert waits == expected
    for team_waits in waits.values():
        assert min(team_waits) <= mean_wait(team_waits) <= max(team_waits)
        assert p95_wait(team_waits) in team_waits
